"""What every perf run shares: the stop signal, the reporting loop, the run's end, and the
receiving worker of ``perf consume`` and ``perf read``.

A run ends when its workers finish (message quota reached), when ``duration_s`` passes, or on
SIGINT/SIGTERM; in every case the summary is printed and the exit status is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from magnetar.cli.perf.meter import PerfMeter, Report
from magnetar.cli.perf.report import ReportPrinter
from magnetar.common.clock import Clock


async def wait_or_stop(stop: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``stop``; True if it is set."""
    if timeout_s > 0 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout_s)
    return stop.is_set()


BATCH_MAX = 500
"""Messages one receive or read call returns at most."""
BATCH_WAIT_MS = 100
"""How long one receive or read call waits for a first message."""


async def count_received(
    next_batch: Callable[[int, int], Awaitable[Sequence[Any]]],
    *,
    meter: PerfMeter,
    stop: asyncio.Event,
    clock: Clock,
    budget: list[int],
    after_batch: Callable[[Sequence[Any]], Awaitable[None]] | None = None,
) -> None:
    """One receiving worker of ``perf consume`` or ``perf read``: until ``stop`` is set, take
    ``next_batch(BATCH_MAX, BATCH_WAIT_MS)`` (a consumer's ``batch_receive`` or a reader's
    ``read_batch``), record each message's size and end-to-end latency (now minus publish time,
    millisecond resolution), await ``after_batch`` (acknowledging) if given, and spend the
    batch from ``budget[0]``, the messages left over all workers (0: unlimited), which sets
    ``stop`` when it reaches 0."""
    record = meter.record
    while not stop.is_set():
        msgs = await next_batch(BATCH_MAX, BATCH_WAIT_MS)
        if not msgs:
            continue
        now_ms = clock.now_ms()
        for m in msgs:
            record(len(m.data()), (now_ms - m.publish_timestamp()) * 1000)
        if after_batch is not None:
            await after_batch(msgs)
        if budget[0]:
            budget[0] -= len(msgs)
            if budget[0] <= 0:
                stop.set()


async def run_workers(
    workers: Sequence[Awaitable[Any]],
    *,
    stop: asyncio.Event,
    meter: PerfMeter,
    printer: ReportPrinter,
    clock: Clock,
    start_s: float,
    duration_s: float,
    interval_s: float,
    on_stop: Callable[[], Awaitable[None]],
) -> Report:
    """Run ``workers`` until they finish, ``duration_s`` (0: no limit) passes or a signal
    arrives; report every ``interval_s``; then call ``on_stop`` (flush/close) and return the
    summary. Worker errors propagate after ``on_stop``."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(w) for w in workers]

    async def reporting() -> None:
        next_s = start_s + interval_s
        while not await wait_or_stop(stop, next_s - clock.monotonic_s()):
            now = clock.monotonic_s()
            printer.window(meter.interval(now), now - start_s)
            next_s += interval_s

    async def deadline() -> None:
        if duration_s > 0:
            await wait_or_stop(stop, start_s + duration_s - clock.monotonic_s())
            stop.set()

    reporter = asyncio.ensure_future(reporting())
    timer = asyncio.ensure_future(deadline())
    try:
        stopping = asyncio.ensure_future(stop.wait())
        pending = {*tasks, stopping}
        while tasks and not stop.is_set():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not stopping:
                    tasks.remove(t)
                    t.result()  # a worker's error ends the run
        stop.set()
        await asyncio.gather(*tasks)  # workers see ``stop`` and wind down
        stopping.cancel()
    finally:
        stop.set()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for t in tasks:
            t.cancel()
        await on_stop()
        reporter.cancel()
        timer.cancel()
        await asyncio.gather(reporter, timer, *tasks, return_exceptions=True)
    return meter.summary(clock.monotonic_s())
