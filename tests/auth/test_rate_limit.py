"""The publish rate limiter at logical times: the accepted rate over long windows equals
the configured one, a burst of one second is allowed, bytes and messages both bind."""

from __future__ import annotations

import pytest

from magnetar.auth.rate_limit import PublishRate, PublishRateLimiter, TokenBucket


def _drive(limiter: PublishRateLimiter, msgs: int, size: int, seconds: float) -> int:
    """A publisher that sends whenever it is not paused; messages accepted in ``seconds``."""
    now_s, sent = 0.0, 0
    while now_s < seconds:
        pause_s = limiter.on_publish(msgs, size, now_s)
        sent += msgs
        now_s += pause_s if pause_s > 0 else 0.001  # 1000 sends/s when unthrottled
    return sent


@pytest.mark.parametrize("rate", [10, 100, 250])
def test_the_message_rate_holds_over_ten_seconds(rate: int) -> None:
    limiter = PublishRateLimiter()
    limiter.configure(PublishRate(msgs_per_s=rate), 0.0)
    sent = _drive(limiter, 1, 100, 10.0)
    # one second of burst on top of ten seconds at the rate, within one message
    assert rate * 10 <= sent <= rate * 11 + 1
    assert limiter.limited_times > 0


def test_the_byte_rate_binds_when_it_is_the_tighter_one() -> None:
    limiter = PublishRateLimiter()
    limiter.configure(PublishRate(msgs_per_s=10_000, bytes_per_s=10_000), 0.0)
    sent = _drive(limiter, 1, 1_000, 10.0)  # 10 messages/s of 1000 bytes
    assert 100 <= sent <= 111


def test_no_limit_never_pauses_and_reconfiguring_keeps_state() -> None:
    limiter = PublishRateLimiter()
    assert limiter.on_publish(1_000_000, 10**9, 0.0) == 0
    limiter.configure(PublishRate(msgs_per_s=1), 0.0)
    assert limiter.on_publish(1, 1, 0.0) == 0  # the burst
    assert limiter.on_publish(1, 1, 0.0) == pytest.approx(1.0)
    limiter.configure(PublishRate(msgs_per_s=1), 0.5)  # unchanged: still in debt
    assert limiter.on_publish(1, 1, 0.5) == pytest.approx(1.5)
    limiter.configure(PublishRate(), 0.5)
    assert limiter.on_publish(100, 1, 0.5) == 0
    assert limiter.limited_times == 2


def test_a_bucket_refills_up_to_one_second_of_tokens() -> None:
    bucket = TokenBucket(5, 0.0)
    assert bucket.consume(5, 0.0) == 0
    assert bucket.consume(5, 0.0) == pytest.approx(1.0)
    assert bucket.consume(0, 100.0) == 0 and bucket.tokens == 5
