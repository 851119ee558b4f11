"""Time as an injected dependency.

Core logic never reads the wall clock or sleeps directly: constructors take a :class:`Clock`.
Production code passes :class:`SystemClock`; tests pass :class:`ManualClock` and advance it,
which wakes exactly the sleepers and fires exactly the timers whose deadlines have passed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    """A pending :meth:`Clock.call_later` callback."""

    def cancel(self) -> None:
        """Make sure the callback does not run (a no-op once it has run or was cancelled)."""
        ...


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

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` on the running event loop once :meth:`monotonic_s` has advanced
        by at least ``delay_s`` (never earlier by this clock's reading, so a caller that
        computed a deadline from :meth:`monotonic_s` finds it reached when called)."""
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

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        return _SystemTimer(time.monotonic() + max(0.0, delay_s), callback)


_REARM_MIN_S = 0.001
"""The shortest re-arm of an early timer: the granularity of uvloop's timers."""


class _SystemTimer:
    """An event-loop timer that fires only once ``time.monotonic()`` reaches its deadline.

    Event loops may run a timer early by this measure: uvloop's (libuv's) timers count whole
    milliseconds from a loop time cached at the start of the iteration, so a timer armed late
    in a busy iteration comes due up to that iteration's length (seen: 1 ms) before the
    deadline. An early firing re-arms for what remains, at least one millisecond.
    """

    __slots__ = ("_callback", "_deadline_s", "_handle")

    def __init__(self, deadline_s: float, callback: Callable[[], None]) -> None:
        self._deadline_s = deadline_s
        self._callback = callback
        loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = loop.call_later(
            max(0.0, deadline_s - time.monotonic()), self._fire
        )

    def _fire(self) -> None:
        remaining_s = self._deadline_s - time.monotonic()
        if remaining_s > 0:
            loop = asyncio.get_running_loop()
            self._handle = loop.call_later(max(remaining_s, _REARM_MIN_S), self._fire)
            return
        self._handle = None
        self._callback()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class ManualClock:
    """A clock that moves only when :meth:`advance` is called.

    ``sleep`` registers a future that resolves once the clock has been advanced past its
    deadline. Sleepers wake in deadline order; equal deadlines wake in the order they slept.
    ``call_later`` callbacks run inside :meth:`advance`, in deadline order (ties in the order
    they were registered), each at most once.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_s = start_ms / 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._timers: list[tuple[float, int, _ManualTimer]] = []
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
        """Move time forward by ``delta_s`` seconds, wake every sleeper now due, then run
        every timer now due."""
        if delta_s < 0:
            raise ValueError("a clock never goes backwards")
        self._now_s += delta_s
        while self._sleepers and self._sleepers[0][0] <= self._now_s:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
        while self._timers and self._timers[0][0] <= self._now_s:
            _, _, timer = heapq.heappop(self._timers)
            timer.fire()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer(callback)
        heapq.heappush(self._timers, (self._now_s + max(0.0, delay_s), next(self._seq), timer))
        return timer

    @property
    def timers(self) -> int:
        """How many ``call_later`` callbacks are pending (neither run nor cancelled)."""
        return sum(1 for _, _, t in self._timers if t.pending)

    @property
    def sleepers(self) -> int:
        """How many sleeps are pending (tests use it to know a task reached its sleep)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())


class _ManualTimer:
    __slots__ = ("_callback", "pending")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self.pending = True

    def fire(self) -> None:
        if self.pending:
            self.pending = False
            self._callback()

    def cancel(self) -> None:
        self.pending = False
