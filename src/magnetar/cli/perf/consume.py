"""``magnetar perf consume``: consumers counting what they receive.

Latency is end to end: receive time minus the message's publish time (both wall clocks on
this machine when the producer runs here; millisecond resolution). Messages are
acknowledged as they are counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.cli.auth_options import NO_AUTH, CliAuth
from magnetar.cli.perf.meter import PerfMeter, Report
from magnetar.cli.perf.report import ReportPrinter
from magnetar.cli.perf.run import count_received, run_workers
from magnetar.common.clock import Clock, SystemClock


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeOptions:
    service_url: str
    auth: CliAuth = NO_AUTH
    """Credentials (--auth-plugin/--auth-params)."""
    topics: tuple[str, ...]
    subscriptions: tuple[str, ...]
    subscription_type: str  # as the CLI spells it: Exclusive | Shared | Failover | Key_Shared
    consumers_per_subscription: int
    position: str  # Latest | Earliest
    receiver_queue_size: int
    num_messages: int  # over all consumers; 0 = unlimited
    duration_s: float
    stats_interval_s: float


def _acknowledger(consumer: Any, cumulative: bool) -> Callable[[Sequence[Any]], Awaitable[None]]:
    """Acknowledge a received batch: cumulatively up to its last message (Exclusive and
    Failover), or message by message (Shared and Key_Shared, where cumulative acks are refused)."""

    async def acknowledge(msgs: Sequence[Any]) -> None:
        if cumulative:
            await consumer.acknowledge_cumulative(msgs[-1])
        else:
            for m in msgs:
                await consumer.acknowledge(m)

    return acknowledge


async def run_consume(
    opts: ConsumeOptions, printer: ReportPrinter, clock: Clock | None = None
) -> Report:
    """Subscribe, then count until the quota, the duration or a signal; returns the summary."""
    from magnetar.cli.client_cmd import consumer_type
    from magnetar.client import Client, ConsumerType, InitialPosition

    clock = clock or SystemClock()
    stop = asyncio.Event()
    client = Client(
        opts.service_url,
        authentication=opts.auth.client_authentication(),
        tls_certificate_file_path=opts.auth.tls_cert_file,
        tls_private_key_file_path=opts.auth.tls_key_file,
    )
    consumers: list[Any] = []
    sub_type = consumer_type(opts.subscription_type)
    cumulative = sub_type in (ConsumerType.Exclusive, ConsumerType.Failover)
    try:
        for topic in opts.topics:
            for sub in opts.subscriptions:
                for _ in range(opts.consumers_per_subscription):
                    consumers.append(
                        await client.subscribe(
                            topic,
                            sub,
                            consumer_type=sub_type,
                            receiver_queue_size=opts.receiver_queue_size,
                            initial_position=InitialPosition[opts.position],
                        )
                    )
        printer.out.note(f"{len(consumers)} consumers subscribed")
        start = clock.monotonic_s()
        meter = PerfMeter(start)
        budget = [opts.num_messages]
        workers = [
            count_received(
                c.batch_receive, meter=meter, stop=stop, clock=clock, budget=budget,
                after_batch=_acknowledger(c, cumulative),
            )
            for c in consumers
        ]  # fmt: skip

        with printer:
            return await run_workers(
                workers, stop=stop, meter=meter, printer=printer, clock=clock, start_s=start,
                duration_s=opts.duration_s, interval_s=opts.stats_interval_s, on_stop=client.close,
            )  # fmt: skip
    finally:
        await client.close()
