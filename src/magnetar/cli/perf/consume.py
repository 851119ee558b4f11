"""``magnetar perf consume``: consumers counting what they receive.

Latency is end to end: receive time minus the message's publish time (both wall clocks on
this machine when the producer runs here; millisecond resolution). Messages are
acknowledged as they are counted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from magnetar.cli.perf.meter import PerfMeter, Report
from magnetar.cli.perf.report import ReportPrinter
from magnetar.cli.perf.run import run_workers
from magnetar.common.clock import Clock, SystemClock

RECEIVE_BATCH_MAX = 500
RECEIVE_WAIT_MS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeOptions:
    service_url: str
    topics: tuple[str, ...]
    subscriptions: tuple[str, ...]
    subscription_type: str  # as the CLI spells it: Exclusive | Shared | Failover | Key_Shared
    consumers_per_subscription: int
    position: str  # Latest | Earliest
    receiver_queue_size: int
    num_messages: int  # over all consumers; 0 = unlimited
    duration_s: float
    stats_interval_s: float


async def _drain(
    consumer: Any,
    meter: PerfMeter,
    stop: asyncio.Event,
    clock: Clock,
    budget: list[int],
    cumulative: bool,
) -> None:
    record = meter.record
    while not stop.is_set():
        msgs = await consumer.batch_receive(RECEIVE_BATCH_MAX, RECEIVE_WAIT_MS)
        if not msgs:
            continue
        now_ms = clock.now_ms()
        for m in msgs:
            record(len(m.data()), (now_ms - m.publish_timestamp()) * 1000)
        if cumulative:
            await consumer.acknowledge_cumulative(msgs[-1])
        else:
            for m in msgs:
                await consumer.acknowledge(m)
        if budget[0]:
            budget[0] -= len(msgs)
            if budget[0] <= 0:
                stop.set()


async def run_consume(
    opts: ConsumeOptions, printer: ReportPrinter, clock: Clock | None = None
) -> Report:
    """Subscribe, then count until the quota, the duration or a signal; returns the summary."""
    from magnetar.cli.client_cmd import consumer_type
    from magnetar.client import Client, ConsumerType, InitialPosition

    clock = clock or SystemClock()
    stop = asyncio.Event()
    client = Client(opts.service_url)
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
        workers = [_drain(c, meter, stop, clock, budget, cumulative) for c in consumers]

        async def close() -> None:
            await client.close()

        with printer:
            return await run_workers(
                workers, stop=stop, meter=meter, printer=printer, clock=clock, start_s=start,
                duration_s=opts.duration_s, interval_s=opts.stats_interval_s, on_stop=close,
            )  # fmt: skip
    finally:
        await client.close()
