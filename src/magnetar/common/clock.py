"""Time as an injected dependency.

Core logic never reads the wall clock or sleeps directly: constructors take a :class:`Clock`.
Production code passes :class:`SystemClock`; tests pass :class:`ManualClock` and advance it,
which wakes exactly the sleepers whose deadlines have passed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """What logic may ask about time."""

    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the Unix epoch (for timestamps on data)."""
        ...

    def monotonic_s(self) -> float:
        """A monotonic reading in seconds (for timeouts and rates; never goes backwards)."""
        ...

    async def sleep(self, delay_s: float) -> None:
        """Suspend the calling task for ``delay_s`` seconds of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    monotonic_s = staticmethod(time.monotonic)
    """Seconds from an arbitrary origin (``time.monotonic`` itself: read on hot paths, so
    no Python frame in between)."""

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(max(0.0, delay_s))


class ManualClock:
    """A clock that moves only when :meth:`advance` is called.

    ``sleep`` registers a future that resolves once the clock has been advanced past its
    deadline. Sleepers wake in deadline order; equal deadlines wake in the order they slept.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_s = start_ms / 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return round(self._now_s * 1000)

    def monotonic_s(self) -> float:
        return self._now_s

    async def sleep(self, delay_s: float) -> None:
        if delay_s <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now_s + delay_s, next(self._seq), fut))
        await fut

    def advance(self, delta_s: float) -> None:
        """Move time forward by ``delta_s`` seconds and wake every sleeper now due."""
        if delta_s < 0:
            raise ValueError("a clock never goes backwards")
        self._now_s += delta_s
        while self._sleepers and self._sleepers[0][0] <= self._now_s:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many sleeps are pending (tests use it to know a task reached its sleep)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())
