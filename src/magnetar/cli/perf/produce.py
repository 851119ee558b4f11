"""``magnetar perf produce``: N producers per topic sending fixed-size messages at a rate.

Latency is from ``send_async`` to the broker's receipt. Each producer keeps at most
``max_outstanding`` messages in flight; the rate is shared evenly by the producers and
paced against the start time (bursts catch up after a late wake-up), so the generator
itself stays cheap: one pre-built payload, one shared callback per producer, no futures.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from dataclasses import dataclass
from typing import Any

from magnetar.cli.auth_options import NO_AUTH, CliAuth
from magnetar.cli.perf.meter import PerfMeter, Report
from magnetar.cli.perf.report import ReportPrinter
from magnetar.cli.perf.run import run_workers, wait_or_stop
from magnetar.common.clock import Clock, SystemClock

#: Messages queued per event-loop turn when the rate is unlimited.
BURST_MAX = 256
DRAIN_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceOptions:
    service_url: str
    auth: CliAuth = NO_AUTH
    """Credentials (--auth-plugin/--auth-params)."""
    topics: tuple[str, ...]
    rate: float  # msg/s over all producers; 0 = unlimited
    size_bytes: int
    producers_per_topic: int
    num_messages: int  # over all producers; 0 = unlimited
    duration_s: float  # 0 = unlimited
    batching: bool
    batch_delay_ms: int
    batch_max_messages: int
    batch_max_bytes: int
    max_outstanding: int
    compression: str
    stats_interval_s: float


async def _drive(
    producer: Any,
    payload: bytes,
    quota: int,
    rate: float,
    max_outstanding: int,
    meter: PerfMeter,
    stop: asyncio.Event,
    clock: Clock,
) -> None:
    now = clock.monotonic_s
    sent_at: collections.deque[float] = collections.deque()
    room = asyncio.Event()
    size = len(payload)
    record = meter.record

    def done(error: Any, _mid: Any) -> None:
        t0 = sent_at.popleft()  # receipts arrive in send order
        if error is None:
            record(size, int((now() - t0) * 1_000_000))
        else:
            meter.error()
        room.set()

    start = now()
    sent = 0
    send = producer.send_async
    while not stop.is_set() and (quota == 0 or sent < quota):
        if rate > 0:
            allowed = int((now() - start) * rate) + 1
            if sent >= allowed:
                await wait_or_stop(stop, start + (sent + 1) / rate - now())
                continue
            burst = allowed - sent
        else:
            burst = BURST_MAX
        if quota:
            burst = min(burst, quota - sent)
        burst = min(burst, max_outstanding - len(sent_at))
        if burst <= 0:
            room.clear()
            if len(sent_at) >= max_outstanding:
                stopping = asyncio.ensure_future(stop.wait())
                waiting = asyncio.ensure_future(room.wait())
                await asyncio.wait({stopping, waiting}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                waiting.cancel()
            continue
        t0 = now()  # one reading per burst: its messages are queued within microseconds
        for _ in range(burst):
            sent_at.append(t0)
            send(payload, done)
        sent += burst
        await clock.sleep(0)  # let receipts and socket writes run
    await producer.flush()
    # Wait (bounded) for the receipts of what was sent.
    deadline = now() + DRAIN_TIMEOUT_S
    while sent_at and now() < deadline:
        room.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(room.wait(), deadline - now())


async def run_produce(
    opts: ProduceOptions, printer: ReportPrinter, clock: Clock | None = None
) -> Report:
    """Run the load; returns the summary. Raises the client's errors (connect, lookup)."""
    from magnetar.client import Client, CompressionType

    clock = clock or SystemClock()
    payload = os.urandom(opts.size_bytes)
    n = len(opts.topics) * opts.producers_per_topic
    rate = opts.rate / n if opts.rate > 0 else 0.0
    quota, extra = divmod(opts.num_messages, n) if opts.num_messages else (0, 0)
    stop = asyncio.Event()
    client = Client(
        opts.service_url,
        authentication=opts.auth.client_authentication(),
        tls_certificate_file_path=opts.auth.tls_cert_file,
        tls_private_key_file_path=opts.auth.tls_key_file,
    )
    producers: list[Any] = []
    try:
        for topic in opts.topics:
            for _ in range(opts.producers_per_topic):
                producers.append(
                    await client.create_producer(
                        topic,
                        batching_enabled=opts.batching,
                        batching_max_publish_delay_ms=opts.batch_delay_ms,
                        batching_max_messages=opts.batch_max_messages,
                        batching_max_allowed_size_in_bytes=opts.batch_max_bytes,
                        max_pending_messages=opts.max_outstanding,
                        compression_type=CompressionType[opts.compression],
                    )
                )
        start = clock.monotonic_s()
        meter = PerfMeter(start)
        workers = [
            _drive(p, payload, (quota + (1 if i < extra else 0)) if opts.num_messages else 0,
                   rate, opts.max_outstanding, meter, stop, clock)
            for i, p in enumerate(producers)
        ]  # fmt: skip

        with printer:
            return await run_workers(
                workers, stop=stop, meter=meter, printer=printer, clock=clock, start_s=start,
                duration_s=opts.duration_s, interval_s=opts.stats_interval_s, on_stop=client.close,
            )  # fmt: skip
    finally:
        await client.close()
