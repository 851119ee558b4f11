import asyncio

import pytest

from magnetar.common.clock import ManualClock, SystemClock


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
