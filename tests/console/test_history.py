"""The console's history sampler: bounded rings, partitions added up, and sampling only
while a console reads (a manual clock; no broker)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from magnetar.common.clock import ManualClock
from magnetar.console.history import (
    DEMAND_WINDOW_S,
    SAMPLE_INTERVAL_S,
    HistorySampler,
    Sample,
    TopicHistory,
)


def test_a_ring_keeps_the_last_samples_and_a_round_drops_topics_gone() -> None:
    history = TopicHistory(samples_max=3)
    for t in range(5):
        history.record_round({"a": Sample(t, 1.0, 0.0, t), "b": Sample(t, 0.0, 0.0, 0)})
    assert [s.backlog for s in history.samples(["a"])] == [2, 3, 4]
    history.record_round({"b": Sample(5, 0.0, 0.0, 0)})
    assert history.samples(["a"]) == []
    assert history.topic_names() == ["b"]


def test_partitions_add_up_by_round() -> None:
    history = TopicHistory()
    history.record_round(
        {"t-partition-0": Sample(1, 1.0, 2.0, 3), "t-partition-1": Sample(1, 10.0, 20.0, 30)}
    )
    history.record_round(
        {"t-partition-0": Sample(2, 1.0, 1.0, 4), "t-partition-1": Sample(2, 0.0, 0.0, 0)}
    )
    assert history.samples(["t-partition-0", "t-partition-1", "unknown"]) == [
        Sample(1, 11.0, 22.0, 33),
        Sample(2, 1.0, 1.0, 4),
    ]


@dataclass
class _Topic:
    full_name: str
    backlog: int = 0


@dataclass
class _Broker:
    topics: list[Any] = field(default_factory=list)
    closing: bool = False

    def loaded_topics(self) -> list[Any]:
        return self.topics


async def _rounds(clock: ManualClock, n: int) -> None:
    for _ in range(n):
        for _ in range(3):
            await asyncio.sleep(0)  # let the sampler's task finish its round and sleep
        clock.advance(SAMPLE_INTERVAL_S)
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_sampler_runs_only_while_a_console_reads() -> None:
    clock = ManualClock()
    topic = _Topic("persistent://t/n/a")
    broker = _Broker([topic])
    sampled: list[int] = []

    def sample(t: Any, at_ms: int) -> Sample:
        sampled.append(at_ms)
        return Sample(at_ms, 0.0, 0.0, t.backlog)

    sampler = HistorySampler(broker, clock, sample)
    await _rounds(clock, 3)
    assert not sampler.running and sampled == []  # nobody looked: no work at all

    assert [s.backlog for s in sampler.read([topic.full_name])] == [0]  # a fresh first round
    topic.backlog = 7
    await _rounds(clock, 2)
    assert [s.backlog for s in sampler.read([topic.full_name])] == [0, 7, 7]

    # nobody reads for the demand window: the task ends and the samples go
    await _rounds(clock, int(DEMAND_WINDOW_S / SAMPLE_INTERVAL_S) + 1)
    assert not sampler.running
    assert sampler.history.topic_names() == []
    done = len(sampled)
    await _rounds(clock, 3)
    assert len(sampled) == done

    assert len(sampler.read([topic.full_name])) == 1  # a new reader starts it again
    assert sampler.running
    broker.closing = True
    await _rounds(clock, 1)
    assert not sampler.running
