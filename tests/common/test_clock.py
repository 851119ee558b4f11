import asyncio
from typing import Any

import pytest

from magnetar.common.clock import ManualClock, SystemClock
from magnetar.testing import wait_until_async


async def test_manual_clock_wakes_sleepers_in_deadline_order() -> None:
    clock = ManualClock(start_ms=1_000)
    woke: list[str] = []

    async def sleeper(name: str, delay_s: float) -> None:
        await clock.sleep(delay_s)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper("late", 2.0)), asyncio.create_task(sleeper("early", 1.0))]
    while clock.sleepers < 2:
        await asyncio.sleep(0)
    clock.advance(1.5)
    await asyncio.sleep(0)
    assert woke == ["early"]
    assert clock.now_ms() == 2_500
    clock.advance(0.5)
    await asyncio.gather(*tasks)
    assert woke == ["early", "late"]


def test_manual_clock_refuses_to_go_backwards() -> None:
    with pytest.raises(ValueError):
        ManualClock().advance(-1)


async def test_system_clock_is_monotonic() -> None:
    clock = SystemClock()
    a = clock.monotonic_s()
    await clock.sleep(0)
    assert clock.monotonic_s() >= a
    assert clock.now_ms() > 1_600_000_000_000


async def test_manual_clock_runs_timers_in_deadline_order_and_skips_cancelled() -> None:
    clock = ManualClock(start_ms=0)
    ran: list[str] = []
    clock.call_later(2.0, lambda: ran.append("late"))
    clock.call_later(1.0, lambda: ran.append("early"))
    cancelled = clock.call_later(1.5, lambda: ran.append("cancelled"))
    cancelled.cancel()
    assert clock.timers == 2
    clock.advance(1.9)
    assert ran == ["early"]
    clock.advance(0.1)
    assert ran == ["early", "late"]
    assert clock.timers == 0


class _EarlyTimersLoop(asyncio.SelectorEventLoop):
    """A real event loop whose timers come due 5 ms early by ``time.monotonic``, as uvloop's
    millisecond timers counted from a cached loop time do (by up to a busy iteration)."""

    def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> Any:
        return super().call_later(max(0.0, delay - 0.005), callback, *args, context=context)


def test_system_clock_timer_never_fires_before_its_deadline() -> None:
    clock = SystemClock()
    loop = _EarlyTimersLoop()
    try:

        async def main() -> tuple[float, float]:
            fired: asyncio.Future[float] = loop.create_future()
            deadline_s = clock.monotonic_s() + 0.05
            clock.call_later(0.05, lambda: fired.set_result(clock.monotonic_s()))
            return deadline_s, await fired

        deadline_s, fired_s = loop.run_until_complete(main())
    finally:
        loop.close()
    assert fired_s >= deadline_s


async def test_system_clock_timer_can_be_cancelled() -> None:
    clock = SystemClock()
    ran: list[int] = []
    timer = clock.call_later(0.01, lambda: ran.append(1))
    timer.cancel()
    timer.cancel()  # a no-op the second time
    done = clock.call_later(0.02, lambda: ran.append(2))
    await wait_until_async(lambda: ran, 10.0)
    done.cancel()  # a no-op once run
    assert ran == [2]
