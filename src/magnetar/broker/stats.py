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
  The sampler visits only the meters that recorded since its last round (a meter queues
  itself on its first record after a round), so idle producers and consumers cost nothing.

A meter holds no buckets until it first counts something: most meters of a broker with many
idle topics never do.
* :class:`ProducerMeters`, :class:`ConsumerMeters`, :class:`SubscriptionMeters`,
  :class:`TopicMeters` — what one producer / consumer / subscription / topic records.
"""

from __future__ import annotations

from typing import Any

from magnetar.common.clock import Clock

WINDOW_S = 10.0
BUCKETS = 10
_DEFAULT_SHAPE = (WINDOW_S / BUCKETS, BUCKETS)
"""The default bucket width and count: one tuple shared by the meters that use them."""


class _Window:
    """A meter's buckets, made at its first event (an idle meter has none)."""

    __slots__ = ("bytes", "counts", "slot")

    def __init__(self, buckets: int, slot: int) -> None:
        self.counts = [0] * buckets
        self.bytes = [0] * buckets
        self.slot = slot
        """The current bucket's number."""


class RateMeter:
    """Counts events (and their bytes) in a sliding window of ``buckets`` fixed buckets.

    ``rate()`` and ``throughput()`` divide the window's sum by the time it covers: the full
    buckets plus the elapsed part of the current one, but never more than the meter's age
    (so a meter created a second ago does not report a tenth of its rate) and never less
    than one bucket (so one early event does not read as a huge rate).
    """

    __slots__ = (
        "_born_s",
        "_clock",
        "_shape",
        "_window",
        "last_record_ms",
        "total_bytes",
        "total_count",
    )

    def __init__(
        self,
        clock: Clock,
        window_s: float = WINDOW_S,
        buckets: int = BUCKETS,
        *,
        born_s: float | None = None,
    ) -> None:
        """``born_s``: the clock's ``monotonic_s()`` now, when the caller has read it (the
        meters of one producer or consumer share one reading, and its float)."""
        if buckets < 1 or window_s <= 0:
            raise ValueError("a rate meter needs at least one bucket and a positive window")
        self._clock = clock
        default = window_s == WINDOW_S and buckets == BUCKETS
        self._shape = _DEFAULT_SHAPE if default else (window_s / buckets, buckets)
        """The bucket width (s) and count."""
        self._window: _Window | None = None
        """The buckets (None until the first event: all zero)."""
        self._born_s = clock.monotonic_s() if born_s is None else born_s
        self.total_count = 0
        self.total_bytes = 0
        self.last_record_ms = 0
        """Wall-clock time of the last :meth:`record` with a non-zero count (0 = never)."""

    def record(self, count: int, size_bytes: int = 0) -> None:
        self._add(count, size_bytes)
        self.total_count += count
        self.total_bytes += size_bytes

    def _add(self, count: int, size_bytes: int) -> None:
        """Add to the current bucket (creating the buckets on the first event)."""
        width_s, n = self._shape
        slot = int(self._clock.monotonic_s() // width_s)
        window = self._window
        if window is None:
            window = self._window = _Window(n, slot)
        elif slot != window.slot:
            _rotate(window, n, slot)
        i = slot % n
        window.counts[i] += count
        window.bytes[i] += size_bytes

    def touch(self) -> None:
        """Remember now as the last activity time (for ``last…Timestamp`` fields)."""
        self.last_record_ms = self._clock.now_ms()

    def _span_s(self, window: _Window, now: float) -> float:
        width, n = self._shape
        covered = (n - 1) * width + (now - window.slot * width)
        return max(width, min(covered, now - self._born_s))

    def _current(self) -> tuple[_Window | None, float]:
        """The buckets rotated to now (None: no event yet), and now."""
        window = self._window
        if window is None:
            return None, 0.0
        now = self._clock.monotonic_s()
        width_s, n = self._shape
        slot = int(now // width_s)
        if slot != window.slot:
            _rotate(window, n, slot)
        return window, now

    def rate(self) -> float:
        """Events per second over the window."""
        window, now = self._current()
        if window is None:
            return 0.0
        return sum(window.counts) / self._span_s(window, now)

    def throughput(self) -> float:
        """Bytes per second over the window."""
        window, now = self._current()
        if window is None:
            return 0.0
        return sum(window.bytes) / self._span_s(window, now)


def _rotate(window: _Window, n: int, slot: int) -> None:
    """Move ``window`` (of ``n`` buckets) on to bucket number ``slot``, zeroing those passed."""
    counts, sizes = window.counts, window.bytes
    if slot - window.slot >= n:
        for i in range(n):
            counts[i] = 0
            sizes[i] = 0
    else:
        for s in range(window.slot + 1, slot + 1):
            counts[s % n] = 0
            sizes[s % n] = 0
    window.slot = slot


class SampledRateMeter(RateMeter):
    """A :class:`RateMeter` whose :meth:`record` is two additions: the counts reach the
    window's buckets at the next :meth:`sample` (called by a :class:`MeterSampler` about
    every second, and by every read). ``last_record_ms`` is the time of the last sample
    that saw new events (so at most one sampling interval after the event)."""

    __slots__ = ("_sampled_bytes", "_sampled_count", "_sampler")

    def __init__(
        self,
        clock: Clock,
        sampler: MeterSampler | None = None,
        window_s: float = WINDOW_S,
        buckets: int = BUCKETS,
        *,
        born_s: float | None = None,
    ) -> None:
        super().__init__(clock, window_s, buckets, born_s=born_s)
        self._sampled_count = 0
        self._sampled_bytes = 0
        self._sampler = sampler
        """The sampler to queue on at the next record; None while queued (the sampler's
        round gives it back) or without one (every read samples then)."""

    def record(self, count: int, size_bytes: int = 0) -> None:
        self.total_count += count
        self.total_bytes += size_bytes
        sampler = self._sampler
        if sampler is not None:
            self._sampler = None
            sampler.queue(self)

    def sample(self) -> None:
        """Fold the events recorded since the last sample into the current bucket."""
        count = self.total_count - self._sampled_count
        size = self.total_bytes - self._sampled_bytes
        if not count and not size:
            return
        self._add(count, size)
        self._sampled_count = self.total_count
        self._sampled_bytes = self.total_bytes
        if count:
            self.last_record_ms = self._clock.now_ms()

    def sample_queued(self, sampler: MeterSampler) -> None:
        """:meth:`sample`, by ``sampler``'s round that this meter queued itself for."""
        self._sampler = sampler
        self.sample()

    def rate(self) -> float:
        self.sample()
        return super().rate()

    def throughput(self) -> float:
        self.sample()
        return super().throughput()


class MeterSampler:
    """Samples the :class:`SampledRateMeter` s of one broker that recorded since its last
    round; its owner calls :meth:`sample_all` about every second. A meter is held from its
    record to the next round only (a closed producer's meter then just goes)."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        self._due: list[SampledRateMeter] = []

    def queue(self, meter: SampledRateMeter) -> None:
        """Sample ``meter`` at the next round (it recorded; called once per round)."""
        self._due.append(meter)

    def sample_all(self) -> None:
        due, self._due = self._due, []
        for meter in due:
            meter.sample_queued(self)


def _in_rate(clock: Clock, sampler: MeterSampler | None, born_s: float) -> RateMeter:
    if sampler is None:
        return RateMeter(clock, born_s=born_s)
    return SampledRateMeter(clock, sampler, born_s=born_s)


class _LazyMeter:
    """A :class:`RateMeter` attribute of a meters object, made on its first use (reading
    or recording) and born when its owner was: most of an idle topic's meters never are.
    The owner has a slot ``_<name>`` for it and ``_clock`` and ``_born_s`` slots."""

    __slots__ = ("_slot",)

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = "_" + name

    def __get__(self, owner: Any, owner_type: type | None = None) -> RateMeter:
        meter: RateMeter | None = getattr(owner, self._slot)
        if meter is None:
            meter = RateMeter(owner._clock, born_s=owner._born_s)
            setattr(owner, self._slot, meter)
        return meter


class ProducerMeters:
    """What one producer records: messages and bytes in."""

    __slots__ = ("_born_s", "_chunked", "_clock", "msg_in")

    chunked = _LazyMeter()

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        now = clock.monotonic_s()
        self._clock = clock
        self._born_s = now
        self.msg_in = _in_rate(clock, sampler, now)
        """Sampled (see :class:`SampledRateMeter`) when a ``sampler`` is given."""
        self._chunked: RateMeter | None = None


class ConsumerMeters:
    """What one consumer records: messages out, redeliveries, acks (acknowledged messages,
    batch-aware: acknowledging a batch entry counts its messages; a cumulative ack counts
    every message it covers), flow permits."""

    __slots__ = ("_ack", "_born_s", "_clock", "_flow", "_redeliver", "entries_out", "msg_out")

    redeliver = _LazyMeter()
    ack = _LazyMeter()
    flow = _LazyMeter()

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        now = clock.monotonic_s()
        self._clock = clock
        self._born_s = now
        self.msg_out = _in_rate(clock, sampler, now)
        """Sampled (see :class:`SampledRateMeter`) when a ``sampler`` is given; its
        ``last_record_ms`` is then the last consume time to within a sampling interval."""
        self.entries_out = 0
        self._redeliver: RateMeter | None = None
        self._ack: RateMeter | None = None
        self._flow: RateMeter | None = None

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

    __slots__ = (
        "_born_s",
        "_clock",
        "_expired",
        "last_expire_ms",
        "last_mark_delete_advanced_ms",
        "msg_out",
    )

    expired = _LazyMeter()

    def __init__(self, clock: Clock, sampler: MeterSampler | None = None) -> None:
        now = clock.monotonic_s()
        self._clock = clock
        self._born_s = now
        self.msg_out = _in_rate(clock, sampler, now)
        """Every message sent to any consumer of the subscription, present or past."""
        self._expired: RateMeter | None = None
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
