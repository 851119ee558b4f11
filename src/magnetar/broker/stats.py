"""Rate meters and latency histograms the broker updates on its hot paths, read by the
admin stats (``GET …/stats``) and the Prometheus ``/metrics`` endpoint.

Sans-IO: every meter takes the :class:`~magnetar.common.clock.Clock` it reads, so tests
drive it with a ``ManualClock``. Recording is O(1) (one clock read, two additions, an
occasional bucket rotation); reading is O(buckets).

* :class:`RateMeter` — events and bytes per second over a sliding window of fixed buckets
  (default 10 buckets of 1 s). Pulsar's broker reports the rate of its last stats interval
  (``statsUpdateFrequencyInSecs``, 60 s); a short sliding window shows the same quantity
  while it is still moving, which is what operators watch. The totals (``total_count``,
  ``total_bytes``) never decay: they are the ``msgInCounter``/``bytesInCounter`` family.
* :class:`SampledRateMeter` — the same quantity for the per-message hot paths: recording only
  adds to the totals (no clock read); a :class:`MeterSampler` folds what was recorded since
  the last sample into the current bucket every second, and every read samples first. An
  event is thus counted in the bucket of the sample that saw it, at most one tick late.
* :class:`ProducerMeters`, :class:`ConsumerMeters`, :class:`SubscriptionMeters`,
  :class:`TopicMeters` — what one producer / consumer / subscription / topic records.
"""

from __future__ import annotations

import weakref

from magnetar.common.clock import Clock

WINDOW_S = 10.0
BUCKETS = 10


class RateMeter:
    """Counts events (and their bytes) in a sliding window of ``buckets`` fixed buckets.

    ``rate()`` and ``throughput()`` divide the window's sum by the time it covers: the full
    buckets plus the elapsed part of the current one, but never more than the meter's age
    (so a meter created a second ago does not report a tenth of its rate) and never less
    than one bucket (so one early event does not read as a huge rate).
    """

    __slots__ = (
        "_born_s",
        "_bytes",
        "_clock",
        "_counts",
        "_slot",
        "_width_s",
        "last_record_ms",
        "total_bytes",
        "total_count",
    )

    def __init__(self, clock: Clock, window_s: float = WINDOW_S, buckets: int = BUCKETS) -> None:
        if buckets < 1 or window_s <= 0:
            raise ValueError("a rate meter needs at least one bucket and a positive window")
        self._clock = clock
        self._width_s = window_s / buckets
        self._counts = [0] * buckets
        self._bytes = [0] * buckets
        now = clock.monotonic_s()
        self._born_s = now
        self._slot = int(now // self._width_s)
        self.total_count = 0
        self.total_bytes = 0
        self.last_record_ms = 0
        """Wall-clock time of the last :meth:`record` with a non-zero count (0 = never)."""

    def record(self, count: int, size_bytes: int = 0) -> None:
        slot = int(self._clock.monotonic_s() // self._width_s)
        if slot != self._slot:
            self._rotate(slot)
        i = slot % len(self._counts)
        self._counts[i] += count
        self._bytes[i] += size_bytes
        self.total_count += count
        self.total_bytes += size_bytes

    def touch(self) -> None:
        """Remember now as the last activity time (for ``last…Timestamp`` fields)."""
        self.last_record_ms = self._clock.now_ms()

    def _rotate(self, slot: int) -> None:
        n = len(self._counts)
        if slot - self._slot >= n:
            for i in range(n):
                self._counts[i] = 0
                self._bytes[i] = 0
        else:
            for s in range(self._slot + 1, slot + 1):
                self._counts[s % n] = 0
                self._bytes[s % n] = 0
        self._slot = slot

    def _span_s(self, now: float) -> float:
        width = self._width_s
        covered = (len(self._counts) - 1) * width + (now - self._slot * width)
        return max(width, min(covered, now - self._born_s))

    def rate(self) -> float:
        """Events per second over the window."""
        now = self._clock.monotonic_s()
        slot = int(now // self._width_s)
        if slot != self._slot:
            self._rotate(slot)
        return sum(self._counts) / self._span_s(now)

    def throughput(self) -> float:
        """Bytes per second over the window."""
        now = self._clock.monotonic_s()
        slot = int(now // self._width_s)
        if slot != self._slot:
            self._rotate(slot)
        return sum(self._bytes) / self._span_s(now)


class SampledRateMeter(RateMeter):
    """A :class:`RateMeter` whose :meth:`record` is two additions: the counts reach the
    window's buckets at the next :meth:`sample` (called by a :class:`MeterSampler` about
    every second, and by every read). ``last_record_ms`` is the time of the last sample
    that saw new events (so at most one sampling interval after the event)."""

    __slots__ = ("__weakref__", "_sampled_bytes", "_sampled_count")

    def __init__(
        self,
        clock: Clock,
        sampler: MeterSampler | None = None,
        window_s: float = WINDOW_S,
        buckets: int = BUCKETS,
    ) -> None:
        super().__init__(clock, window_s, buckets)
        self._sampled_count = 0
        self._sampled_bytes = 0
        if sampler is not None:
            sampler.add(self)

    def record(self, count: int, size_bytes: int = 0) -> None:
        self.total_count += count
        self.total_bytes += size_bytes

    def sample(self) -> None:
        """Fold the events recorded since the last sample into the current bucket."""
        count = self.total_count - self._sampled_count
        size = self.total_bytes - self._sampled_bytes
        if not count and not size:
            return
        slot = int(self._clock.monotonic_s() // self._width_s)
        if slot != self._slot:
            self._rotate(slot)
        i = slot % len(self._counts)
        self._counts[i] += count
        self._bytes[i] += size
        self._sampled_count = self.total_count
        self._sampled_bytes = self.total_bytes
        if count:
            self.last_record_ms = self._clock.now_ms()

    def rate(self) -> float:
        self.sample()
        return super().rate()

    def throughput(self) -> float:
        self.sample()
        return super().throughput()


class MeterSampler:
    """The :class:`SampledRateMeter` s of one broker; its owner calls :meth:`sample_all`
    about every second. Holds its meters weakly (a closed producer's meter just goes)."""

    __slots__ = ("_meters",)

    def __init__(self) -> None:
        self._meters: weakref.WeakSet[SampledRateMeter] = weakref.WeakSet()

    def add(self, meter: SampledRateMeter) -> None:
        self._meters.add(meter)

    def sample_all(self) -> None:
        for meter in list(self._meters):
            meter.sample()

    def __len__(self) -> int:
        return len(self._meters)


def _in_rate(clock: Clock, sampler: MeterSampler | None) -> RateMeter:
    return RateMeter(clock) if sampler is None else SampledRateMeter(clock, sampler)


class ProducerMeters:
    """What one producer records: messages and bytes in."""

    __slots__ = ("chunked", "msg_in")

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        self.msg_in = _in_rate(clock, sampler)
        """Sampled (see :class:`SampledRateMeter`) when a ``sampler`` is given."""
        self.chunked = RateMeter(clock)


class ConsumerMeters:
    """What one consumer records: messages out, redeliveries, acks, flow permits."""

    __slots__ = ("ack", "entries_out", "flow", "msg_out", "redeliver")

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        self.msg_out = _in_rate(clock, sampler)
        """Sampled (see :class:`SampledRateMeter`) when a ``sampler`` is given; its
        ``last_record_ms`` is then the last consume time to within a sampling interval."""
        self.entries_out = 0
        self.redeliver = RateMeter(clock)
        self.ack = RateMeter(clock)
        """Acknowledged messages (batch-aware: acknowledging a batch entry counts its
        messages; a cumulative ack counts every message it covers)."""
        self.flow = RateMeter(clock)

    def avg_messages_per_entry(self) -> int:
        """Messages per entry sent to this consumer, averaged since it connected, rounded
        to an int: Pulsar's ``avgMessagesPerEntry`` is an int and clients decode it into
        one (a Go ``int`` field rejects 2.5)."""
        entries = self.entries_out
        return round(self.msg_out.total_count / entries) if entries else 0


class SubscriptionMeters:
    """What one subscription records: messages out over all its consumers (so its counters
    never go backwards when consumers leave), expiries, mark-delete movements. Kept by the
    topic per subscription name (:attr:`Topic.subscription_meters`)."""

    __slots__ = ("expired", "last_expire_ms", "last_mark_delete_advanced_ms", "msg_out")

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        self.msg_out = _in_rate(clock, sampler)
        """Every message sent to any consumer of the subscription, present or past."""
        self.expired = RateMeter(clock)
        self.last_expire_ms = 0
        self.last_mark_delete_advanced_ms = 0


class TopicMeters:
    """What one topic records: messages in (all producers, past and present). The latency
    of storing entries is the managed ledger's (``ManagedLedger.add_latency``)."""

    __slots__ = ("msg_in",)

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        self.msg_in = SampledRateMeter(clock, sampler)
        """Sampled (see :class:`SampledRateMeter`); without a ``sampler`` every read samples."""

    @property
    def last_publish_ms(self) -> int:
        """When messages last came in (wall clock, ms; 0 = never): the time of the sample
        that first saw them, so never before the publish and at most a sampling interval
        after it."""
        self.msg_in.sample()
        return self.msg_in.last_record_ms
