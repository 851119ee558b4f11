"""Publish rate limits as Pulsar applies them: throttling by pausing reads, not errors.

A :class:`TokenBucket` holds up to one second's worth of tokens and refills continuously at
``rate_per_s``. A publish always goes through and takes its tokens, possibly leaving the
bucket in debt; while in debt the publisher's connection stops being read (the client's
sends wait in its own queue and TCP buffers), for exactly as long as refilling the debt
takes. Over any window longer than a second the accepted rate is the configured rate.

:class:`PublishRateLimiter` combines a message bucket and a byte bucket (Pulsar's
``publishThrottlingRateInMsg`` / ``publishThrottlingRateInByte``; 0 or less = no limit) and
counts how often it throttled (``publishRateLimitedTimes``). Pure: callers pass the time.
"""

from __future__ import annotations

from dataclasses import dataclass


class TokenBucket:
    """``rate_per_s`` tokens per second, at most ``rate_per_s`` held (a one-second burst)."""

    def __init__(self, rate_per_s: float, now_s: float) -> None:
        assert rate_per_s > 0, "a bucket needs a positive rate"
        self.rate_per_s = rate_per_s
        self._tokens = rate_per_s
        self._at_s = now_s

    def _refill(self, now_s: float) -> None:
        elapsed_s = max(0.0, now_s - self._at_s)
        self._tokens = min(self.rate_per_s, self._tokens + elapsed_s * self.rate_per_s)
        self._at_s = max(self._at_s, now_s)

    def consume(self, amount: float, now_s: float) -> float:
        """Take ``amount`` tokens; the seconds until the bucket is out of debt (0: none)."""
        self._refill(now_s)
        self._tokens -= amount
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_per_s

    @property
    def tokens(self) -> float:
        return self._tokens


@dataclass(frozen=True, slots=True)
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
