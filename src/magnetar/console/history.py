"""The console's charts: the last minutes of each loaded topic's publish rate, dispatch rate
and backlog, kept in memory from the broker's own meters.

Sampling is lazy. :class:`TopicHistory` is the pure part (rings of samples, at most
:data:`SAMPLES_MAX` per topic and :data:`TOPICS_MAX` topics). :class:`HistorySampler` is its
asyncio shell: each :meth:`HistorySampler.read` records that a console is looking and starts
one task that samples every :data:`SAMPLE_INTERVAL_S`; the task ends (and the samples are
dropped) once nobody has read for :data:`DEMAND_WINDOW_S`. While no console is open the
broker does no work for it at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.topic import Topic
from magnetar.common.clock import Clock

SAMPLE_INTERVAL_S = 5.0
SAMPLES_MAX = 120
"""Ten minutes at :data:`SAMPLE_INTERVAL_S`."""
TOPICS_MAX = 10_000
"""Topics sampled per round at most (the first in the broker's order)."""
DEMAND_WINDOW_S = 60.0
"""The sampler runs while a console has read within this window."""


@dataclass(frozen=True, slots=True)
class Sample:
    at_ms: int
    publish_rate: float
    """Messages in per second (all producers)."""
    dispatch_rate: float
    """Messages out per second (all subscriptions)."""
    backlog: int
    """Messages not yet acknowledged, summed over the durable subscriptions."""

    def to_json(self) -> dict[str, float | int]:
        return {
            "timestamp": self.at_ms,
            "msgRateIn": round(self.publish_rate, 3),
            "msgRateOut": round(self.dispatch_rate, 3),
            "msgBacklog": self.backlog,
        }


class TopicHistory:
    """Rings of samples keyed by full topic name. A round replaces the set of topics: a
    topic absent from it (unloaded, moved) loses its samples."""

    def __init__(self, samples_max: int = SAMPLES_MAX) -> None:
        self.samples_max = samples_max
        self._rings: dict[str, deque[Sample]] = {}

    def record_round(self, samples: dict[str, Sample]) -> None:
        for name in [n for n in self._rings if n not in samples]:
            del self._rings[name]
        for name, sample in samples.items():
            ring = self._rings.get(name)
            if ring is None:
                ring = self._rings[name] = deque(maxlen=self.samples_max)
            ring.append(sample)

    def clear(self) -> None:
        self._rings.clear()

    def samples(self, names: Iterable[str]) -> list[Sample]:
        """The samples of ``names`` added together by round (a partitioned topic asks for
        its partitions), oldest first. Returns new objects; unknown names add nothing."""
        by_time: dict[int, Sample] = {}
        for name in names:
            for s in self._rings.get(name, ()):
                prev = by_time.get(s.at_ms)
                if prev is not None:
                    s = Sample(
                        s.at_ms,
                        prev.publish_rate + s.publish_rate,
                        prev.dispatch_rate + s.dispatch_rate,
                        prev.backlog + s.backlog,
                    )
                by_time[s.at_ms] = s
        return [by_time[t] for t in sorted(by_time)]

    def topic_names(self) -> list[str]:
        return list(self._rings)


def sample_of(topic: Topic, at_ms: int) -> Sample:
    """One topic's sample from its meters and cursors (no I/O)."""
    dispatch = sum(m.msg_out.rate() for m in topic.subscription_meters.values())
    backlog = sum(c.backlog_messages for c in topic.ml.cursors.values() if c.durable)
    return Sample(at_ms, topic.meters.msg_in.rate(), dispatch, backlog)


class LoadedTopics(Protocol):
    """The broker as the sampler sees it (:class:`~magnetar.broker.service.BrokerService`)."""

    closing: bool

    def loaded_topics(self) -> list[Topic]: ...


class HistorySampler:
    """Samples ``topics`` into a :class:`TopicHistory` while consoles read it (see the
    module). Its task ends by itself once the broker is closing."""

    def __init__(
        self,
        topics: LoadedTopics,
        clock: Clock,
        sample: Callable[[Topic, int], Sample] = sample_of,
    ) -> None:
        self._topics = topics
        self._clock = clock
        self._sample = sample
        self.history = TopicHistory()
        self._last_read_s = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def read(self, names: Iterable[str]) -> list[Sample]:
        """The samples of ``names`` (see :meth:`TopicHistory.samples`); starts sampling
        when it is not running (the first answer then holds one fresh round)."""
        self._last_read_s = self._clock.monotonic_s()
        if not self.running:
            self._sample_round()
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self.history.samples(names)

    def _sample_round(self) -> None:
        now_ms = self._clock.now_ms()
        topics = self._topics.loaded_topics()[:TOPICS_MAX]
        self.history.record_round({t.full_name: self._sample(t, now_ms) for t in topics})

    async def _run(self) -> None:
        while self._clock.monotonic_s() - self._last_read_s < DEMAND_WINDOW_S:
            await self._clock.sleep(SAMPLE_INTERVAL_S)
            if self._topics.closing:
                break
            self._sample_round()
        self.history.clear()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
