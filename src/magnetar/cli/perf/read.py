"""``magnetar perf read``: one reader per topic counting what it reads (``pulsar-perf read``).

A reader holds no durable subscription and acknowledges nothing, so reading costs the topic
no backlog. Latency is end to end as for ``perf consume``: read time minus the message's
publish time (millisecond resolution).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from magnetar.cli.auth_options import NO_AUTH, CliAuth
from magnetar.cli.perf.meter import PerfMeter, Report
from magnetar.cli.perf.report import ReportPrinter
from magnetar.cli.perf.run import count_received, run_workers
from magnetar.common.clock import Clock, SystemClock


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadOptions:
    service_url: str
    auth: CliAuth = NO_AUTH
    """Credentials (--auth-plugin/--auth-params)."""
    topics: tuple[str, ...]
    start_message_id: Any  # a client MessageId
    receiver_queue_size: int
    num_messages: int  # over all readers; 0 = unlimited
    duration_s: float
    stats_interval_s: float


async def run_read(opts: ReadOptions, printer: ReportPrinter, clock: Clock | None = None) -> Report:
    """Open the readers, then count until the quota, the duration or a signal; returns the
    summary."""
    from magnetar.client import Client

    clock = clock or SystemClock()
    stop = asyncio.Event()
    client = Client(
        opts.service_url,
        authentication=opts.auth.client_authentication(),
        tls_certificate_file_path=opts.auth.tls_cert_file,
        tls_private_key_file_path=opts.auth.tls_key_file,
    )
    try:
        readers = [
            await client.create_reader(
                topic, opts.start_message_id, receiver_queue_size=opts.receiver_queue_size
            )
            for topic in opts.topics
        ]
        printer.out.note(f"{len(readers)} readers started")
        start = clock.monotonic_s()
        meter = PerfMeter(start)
        budget = [opts.num_messages]
        workers = [
            count_received(r.read_batch, meter=meter, stop=stop, clock=clock, budget=budget)
            for r in readers
        ]

        with printer:
            return await run_workers(
                workers, stop=stop, meter=meter, printer=printer, clock=clock, start_s=start,
                duration_s=opts.duration_s, interval_s=opts.stats_interval_s, on_stop=client.close,
            )  # fmt: skip
    finally:
        await client.close()
