"""Publish rate limits as Pulsar applies them: throttling by pausing reads, not errors.

A :class:`TokenBucket` holds up to :data:`BURST_MS` worth of tokens (at least one) and
refills continuously at ``rate_per_s``. A publish always goes through and takes its tokens,
possibly leaving the bucket in debt; while in debt the publisher's connection stops being
read (the client's sends wait in its own queue and TCP buffers), for exactly as long as
refilling the debt takes. So over any window of T seconds at most ``rate * (T + BURST_MS /
1000)`` plus one publish goes through: within 1 % (plus one batch) over 10 s windows.

:class:`PublishRateLimiter` combines a message bucket and a byte bucket (Pulsar's
``publishThrottlingRateInMsg`` / ``publishThrottlingRateInByte``; 0 or less = no limit) and
counts how often it throttled (``publishRateLimitedTimes``). Pure: callers pass the time.

:class:`DispatchRateLimiter` does the same for what a topic (or one subscription) sends to
its consumers (Pulsar's ``dispatchRate`` / ``subscriptionDispatchRate``): the dispatcher
reads no more than the rate allows and waits while it is used up.

:class:`SubscribeRateLimiter` holds back SUBSCRIBEs from one client address beyond
Pulsar's ``subscribeRate`` (per period, 30 s by default).
"""

from __future__ import annotations

from magnetar.common.frozen_struct import frozen_struct

BURST_MS = 100
"""How much of its rate a limit lets through at once after an idle spell (what a bucket
holds when full). Pulsar's buckets hold a whole second; a tenth keeps every 10 s window
within 1 % of the rate instead of 10 %, while a paused publisher that resumes a little late
(a busy event loop) still loses none of its rate."""


class TokenBucket:
    """``rate_per_s`` tokens per second, at most ``capacity`` held (default: :data:`BURST_MS`
    of the rate, at least one token, so a low rate still lets one message through); starts
    full."""

    __slots__ = ("_at_s", "_tokens", "capacity", "rate_per_s")

    def __init__(self, rate_per_s: float, now_s: float, capacity: float | None = None) -> None:
        assert rate_per_s > 0, "a bucket needs a positive rate"
        self.rate_per_s = rate_per_s
        self.capacity = max(1.0, rate_per_s * BURST_MS / 1000) if capacity is None else capacity
        self._tokens = self.capacity
        self._at_s = now_s

    def _refill(self, now_s: float) -> None:
        elapsed_s = max(0.0, now_s - self._at_s)
        self._tokens = min(self.capacity, self._tokens + elapsed_s * self.rate_per_s)
        self._at_s = max(self._at_s, now_s)

    def set_rate(self, rate_per_s: float, now_s: float) -> None:
        """Refill at the old rate up to ``now_s``, then go on at ``rate_per_s`` (with the
        default capacity of that rate); the tokens held (or the debt) carry over."""
        assert rate_per_s > 0, "a bucket needs a positive rate"
        self._refill(now_s)
        self.rate_per_s = rate_per_s
        self.capacity = max(1.0, rate_per_s * BURST_MS / 1000)
        self._tokens = min(self._tokens, self.capacity)

    def is_full(self, now_s: float) -> bool:
        self._refill(now_s)
        return self._tokens >= self.capacity

    def consume(self, amount: float, now_s: float) -> float:
        """Take ``amount`` tokens; the seconds until the bucket is out of debt (0: none)."""
        self._refill(now_s)
        self._tokens -= amount
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_per_s

    @property
    def tokens(self) -> float:
        return self._tokens


@frozen_struct(kw_only=False)
class PublishRate:
    """Pulsar's ``PublishRate``; values of 0 or less mean no limit."""

    msgs_per_s: int = 0
    bytes_per_s: int = 0

    @property
    def limited(self) -> bool:
        return self.msgs_per_s > 0 or self.bytes_per_s > 0


NO_LIMIT = PublishRate()


class PublishRateLimiter:
    """The publish limit of one topic."""

    __slots__ = ("_bytes", "_msgs", "limited_times", "rate")

    def __init__(self) -> None:
        self.rate = NO_LIMIT
        self._msgs: TokenBucket | None = None
        self._bytes: TokenBucket | None = None
        self.limited_times = 0
        """How many publishes found the topic over its rate (Pulsar's
        ``publishRateLimitedTimes``)."""

    def configure(self, rate: PublishRate, now_s: float) -> None:
        """Apply a (changed) rate; an unchanged one keeps the buckets' state."""
        if rate == self.rate:
            return
        self.rate = rate
        self._msgs = TokenBucket(rate.msgs_per_s, now_s) if rate.msgs_per_s > 0 else None
        self._bytes = TokenBucket(rate.bytes_per_s, now_s) if rate.bytes_per_s > 0 else None

    def on_publish(self, messages: int, size_bytes: int, now_s: float) -> float:
        """Account one publish; the seconds the publisher must pause (0: none)."""
        pause_s = 0.0
        if self._msgs is not None:
            pause_s = self._msgs.consume(messages, now_s)
        if self._bytes is not None:
            pause_s = max(pause_s, self._bytes.consume(size_bytes, now_s))
        if pause_s > 0:
            self.limited_times += 1
        return pause_s


@frozen_struct(kw_only=False)
class DispatchRate:
    """Pulsar's ``DispatchRate``: ``msgs`` messages and ``size_bytes`` bytes per
    ``period_s`` seconds (0 or less: no limit on that measure)."""

    msgs: int = 0
    size_bytes: int = 0
    period_s: int = 1
    relative_to_publish_rate: bool = False
    """Pulsar's ``relativeToPublishRate``: the limit is the topic's publish rate plus
    ``msgs`` / ``size_bytes`` (see :meth:`DispatchRateLimiter.follow_publish_rate`)."""

    @property
    def limited(self) -> bool:
        return self.msgs > 0 or self.size_bytes > 0


NO_DISPATCH_LIMIT = DispatchRate()
_ROUNDING = 1e-6
"""Refills are sums of float products: 0.999999... tokens count as one message, so that
waiting :meth:`DispatchRateLimiter.pause_s` (to one whole token) always makes progress."""


class DispatchRateLimiter:
    """The dispatch limit of one topic (all its subscriptions together) or of one
    subscription, as Pulsar's ``DispatchRateLimiter``: a dispatcher asks
    :meth:`permits` before reading — how many messages it may read now (None: no limit), or
    0 and :meth:`pause_s` to wait — and reports what it sent with :meth:`on_dispatch`. A
    read may overshoot (an entry is a whole batch; bytes are known only once read): the
    bucket goes into debt and the next read waits for it to be refilled, so over any window
    the dispatched rate is the configured one, plus :data:`BURST_MS` of it and one entry. Pure: callers pass the
    time."""

    __slots__ = (
        "_bytes",
        "_bytes_per_msg",
        "_last_entries",
        "_msgs",
        "_msgs_per_entry",
        "rate",
        "throttled_bytes_events",
        "throttled_msg_events",
    )

    def __init__(self) -> None:
        self.rate = NO_DISPATCH_LIMIT
        self._msgs: TokenBucket | None = None
        self._bytes: TokenBucket | None = None
        self.throttled_msg_events = 0
        """Reads held back because the message rate was used up (Pulsar's
        ``dispatchThrottledMsgEvents…``)."""
        self.throttled_bytes_events = 0
        """Reads held back because the byte rate was used up."""
        self._msgs_per_entry: float | None = None
        self._last_entries = 1
        """Messages per entry of the last dispatch (batches), to turn permits into entries."""
        self._bytes_per_msg = 0.0
        """Average message size of the last dispatch (to turn bytes left into messages)."""

    def configure(self, rate: DispatchRate, now_s: float) -> None:
        """Apply a (changed) rate; an unchanged one keeps the buckets' state."""
        if rate == self.rate:
            return
        self.rate = rate
        period_s = max(1, rate.period_s)
        self._msgs = TokenBucket(rate.msgs / period_s, now_s) if rate.msgs > 0 else None
        self._bytes = (
            TokenBucket(rate.size_bytes / period_s, now_s) if rate.size_bytes > 0 else None
        )

    def follow_publish_rate(self, msgs_per_s: float, bytes_per_s: float, now_s: float) -> None:
        """With ``relative_to_publish_rate``, set the limits to the topic's publish rate now
        (messages and bytes per second, as its meters measure them) plus the configured
        rates, as Pulsar's ``DispatchRateLimiter`` does at each rate period; otherwise
        nothing. A dispatcher calls it before :meth:`permits`."""
        rate = self.rate
        if not rate.relative_to_publish_rate:
            return
        period_s = max(1, rate.period_s)
        if self._msgs is not None:
            self._msgs.set_rate(rate.msgs / period_s + max(0.0, msgs_per_s), now_s)
        if self._bytes is not None:
            self._bytes.set_rate(rate.size_bytes / period_s + max(0.0, bytes_per_s), now_s)

    def permits(self, now_s: float) -> int | None:
        """Messages the dispatcher may read now: None for no message limit, 0 when it must
        wait :meth:`pause_s` (counted as a throttling event)."""
        by_bytes: int | None = None
        if self._bytes is not None:
            if self._bytes.consume(0, now_s) > 0:
                self.throttled_bytes_events += 1
                return 0
            if self._bytes_per_msg > 0:  # what the bytes left allow, at the sizes seen
                by_bytes = max(1, int(self._bytes.tokens / self._bytes_per_msg))
        if self._msgs is None:
            return by_bytes
        self._msgs.consume(0, now_s)
        available = int(self._msgs.tokens + _ROUNDING)
        if available <= 0:
            self.throttled_msg_events += 1
            return 0
        return available if by_bytes is None else min(available, by_bytes)

    def pause_s(self, now_s: float) -> float:
        """Seconds until both buckets hold at least one message's / byte's worth."""
        pause_s = 0.0
        for bucket in (self._msgs, self._bytes):
            if bucket is not None:
                bucket.consume(0, now_s)
                missing = 1.0 - bucket.tokens
                if missing > _ROUNDING:
                    pause_s = max(pause_s, missing / bucket.rate_per_s)
        return pause_s

    def entries_for(self, messages: int) -> int:
        """How many entries to read for ``messages`` permits, at the messages per entry
        (batch size) seen so far — as Pulsar reads ``permits / avgMessagesPerEntry``; at
        least one, and one until a dispatch has shown the batch size; at most twice as
        many as the last dispatch sent."""
        if self._msgs_per_entry is None:
            return 1  # one entry first, to learn the batch size before reading more
        by_size = max(1, int(messages / self._msgs_per_entry))
        # batch sizes vary (a producer's first batches are small): grow reads at most
        # twofold from one dispatch to the next, so one misjudged size overshoots little
        return min(by_size, 2 * self._last_entries)

    def on_dispatch(self, messages: int, size_bytes: int, now_s: float, entries: int = 1) -> None:
        """Account what was sent to consumers (``entries`` entries holding ``messages``)."""
        if entries > 0 and messages > 0:
            self._msgs_per_entry = messages / entries
            self._last_entries = entries
        if self._msgs is not None:
            self._msgs.consume(messages, now_s)
        if self._bytes is not None:
            self._bytes.consume(size_bytes, now_s)
            if messages > 0:
                self._bytes_per_msg = size_bytes / messages


@frozen_struct(kw_only=False)
class SubscribeRate:
    """Pulsar's ``SubscribeRate``: ``per_consumer`` subscribes per ``period_s`` seconds from
    one client address (0 or less: no limit)."""

    per_consumer: int = 0
    period_s: int = 30

    @property
    def limited(self) -> bool:
        return self.per_consumer > 0


NO_SUBSCRIBE_LIMIT = SubscribeRate()
SUBSCRIBE_BUCKETS_MAX = 10_000
"""Client addresses a topic's subscribe limiter tracks at most; beyond, the fullest buckets
(those nearest to holding nothing back) are dropped first."""


class SubscribeRateLimiter:
    """The subscribe rate of one topic, per client address (Pulsar's ``subscribeRate``):
    a SUBSCRIBE over the rate is held back — answered once the rate allows it — rather than
    refused. One bucket per address, holding one period's worth; a bucket refilled to the
    full is forgotten (no state for addresses that stopped subscribing). Pure: callers pass
    the time."""

    __slots__ = ("_buckets", "limited_times", "rate")

    def __init__(self) -> None:
        self.rate = NO_SUBSCRIBE_LIMIT
        self._buckets: dict[str, TokenBucket] | None = None
        """By address (None until a limited rate's first SUBSCRIBE: most topics have none)."""
        self.limited_times = 0
        """SUBSCRIBEs held back since the topic was loaded."""

    def configure(self, rate: SubscribeRate) -> None:
        """Apply a (changed) rate; a changed one starts every address afresh."""
        if rate != self.rate:
            self.rate = rate
            self._buckets = None

    def on_subscribe(self, address: str, now_s: float) -> float:
        """Account one SUBSCRIBE from ``address``; the seconds it must wait (0: none)."""
        rate = self.rate
        if not rate.limited:
            return 0.0
        buckets = self._buckets
        if buckets is None:
            buckets = self._buckets = {}
        self._forget_full(buckets, now_s)
        bucket = buckets.get(address)
        if bucket is None:
            period_s = max(1, rate.period_s)
            bucket = TokenBucket(rate.per_consumer / period_s, now_s, rate.per_consumer)
            buckets[address] = bucket
        wait_s = bucket.consume(1, now_s)
        if wait_s > 0:
            self.limited_times += 1
        return wait_s

    @staticmethod
    def _forget_full(buckets: dict[str, TokenBucket], now_s: float) -> None:
        if len(buckets) < 64:
            return
        for address in [a for a, b in buckets.items() if b.is_full(now_s)]:
            del buckets[address]
        while len(buckets) >= SUBSCRIBE_BUCKETS_MAX:
            del buckets[max(buckets, key=lambda a: buckets[a].tokens)]

    @property
    def tracked_addresses(self) -> int:
        return 0 if self._buckets is None else len(self._buckets)
