"""An asyncio event loop on simulated time.

:class:`SimulatedLoop` runs ready callbacks exactly as asyncio does, but instead of waiting
for I/O it jumps its clock to the next timer: a ten-minute timeout costs nothing, and the
order of everything depends only on what the code scheduled. It has no I/O at all (no
sockets, no pipes): code under simulation reaches other nodes through simulated transports.
``run_in_executor`` runs the function inline, on the loop, so work handed to threads happens
at a fixed point of the schedule instead of whenever a thread gets the CPU.

:class:`LoopClock` is the :class:`~magnetar.common.clock.Clock` of code on that loop.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from magnetar.common.clock import Timer

T = TypeVar("T")

EPOCH_MS = 1_700_000_000_000
"""Wall-clock time at simulated time 0 (what :meth:`LoopClock.now_ms` adds)."""


class SimulationStuck(RuntimeError):
    """Nothing is ready and no timer is set, yet the awaited work is not done: a deadlock
    (on a real loop it would hang forever)."""


class _NoIO:
    """The loop's selector: no file descriptors; a wait for I/O moves the clock instead."""

    def __init__(self, loop: SimulatedLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise SimulationStuck(f"nothing scheduled at t={self._loop.time():.3f}s")
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        """Nothing to release."""


class SimulatedLoop(asyncio.BaseEventLoop):
    """See the module docstring. Time starts at 0 and moves only between loop iterations,
    to the due time of the earliest timer, when nothing is ready."""

    def __init__(self) -> None:
        super().__init__()
        self._now_s = 0.0
        self._selector = _NoIO(self)

    def time(self) -> float:
        return self._now_s

    def advance(self, delta_s: float) -> None:
        """Move the clock forward (the loop does it while idle)."""
        self._now_s += max(0.0, delta_s)

    def _process_events(self, event_list: list[Any]) -> None:
        """No I/O events exist."""

    def _write_to_self(self) -> None:
        """``call_soon_threadsafe`` needs no wake-up: the loop never blocks."""

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Run ``func(*args)`` now, on the loop; the future is done on return."""
        fut: asyncio.Future[T] = self.create_future()
        try:
            fut.set_result(contextvars.copy_context().run(func, *args))
        except BaseException as exc:  # delivered through the future, as from a thread
            fut.set_exception(exc)
        return fut


class LoopClock:
    """The :class:`~magnetar.common.clock.Clock` of a :class:`SimulatedLoop`: monotonic
    time is the loop's time, wall-clock time that plus :data:`EPOCH_MS`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def now_ms(self) -> int:
        return EPOCH_MS + round(self._loop.time() * 1000)

    def monotonic_s(self) -> float:
        return self._loop.time()

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(max(0.0, delay_s))

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        return self._loop.call_later(max(0.0, delay_s), callback)


__all__ = ["EPOCH_MS", "LoopClock", "SimulatedLoop", "SimulationStuck"]
