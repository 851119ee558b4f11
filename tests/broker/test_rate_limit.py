"""The rate limiters at logical times: the accepted rate over long windows equals the
configured one, within 2 % (plus one entry) over every 10 s window, leaving most of the
10 % the limits promise to real processes; bytes and messages both bind."""

from __future__ import annotations

import pytest

from magnetar.broker.rate_limit import (
    BURST_MS,
    DispatchRate,
    DispatchRateLimiter,
    PublishRate,
    PublishRateLimiter,
    SubscribeRate,
    SubscribeRateLimiter,
    TokenBucket,
)


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


def test_a_bucket_refills_up_to_its_burst() -> None:
    bucket = TokenBucket(50, 0.0)
    burst = 50 * BURST_MS / 1000
    assert bucket.capacity == burst
    assert bucket.consume(burst, 0.0) == 0
    assert bucket.consume(5, 0.0) == pytest.approx(0.1)
    assert bucket.consume(0, 100.0) == 0 and bucket.tokens == burst
    assert TokenBucket(1, 0.0).capacity == 1  # at least one message at low rates


WINDOW_S = 10.0


def _busiest_window(sends: list[tuple[float, int]]) -> int:
    """The most messages sent within any ``WINDOW_S`` (windows start at a send)."""
    busiest, end, in_window = 0, 0, 0
    for start in range(len(sends)):
        while end < len(sends) and sends[end][0] < sends[start][0] + WINDOW_S:
            in_window += sends[end][1]
            end += 1
        busiest = max(busiest, in_window)
        in_window -= sends[start][1]
    return busiest


@pytest.mark.parametrize(("rate", "batch"), [(10, 1), (2000, 1), (2000, 20), (1000, 100)])
def test_the_publish_rate_holds_over_every_ten_second_window(rate: int, batch: int) -> None:
    limiter = PublishRateLimiter()
    limiter.configure(PublishRate(msgs_per_s=rate), 0.0)
    now_s, sends = 0.0, []
    while now_s < 3 * WINDOW_S:
        pause_s = limiter.on_publish(batch, 100 * batch, now_s)
        sends.append((now_s, batch))
        now_s += pause_s if pause_s > 0 else 0.0001  # a flood
    busiest = _busiest_window(sends)
    assert rate * WINDOW_S * 0.98 <= busiest <= rate * WINDOW_S * 1.02 + batch, busiest


@pytest.mark.parametrize(("rate", "entry_msgs"), [(10, 1), (1000, 1), (1000, 10), (1000, 100)])
def test_the_dispatch_rate_holds_over_every_ten_second_window(rate: int, entry_msgs: int) -> None:
    limiter = DispatchRateLimiter()
    limiter.configure(DispatchRate(msgs=rate), 0.0)
    now_s, sends = 0.0, []
    while now_s < 3 * WINDOW_S:
        permits = limiter.permits(now_s)
        if permits == 0:
            now_s += limiter.pause_s(now_s)
            continue
        entries = 100 if permits is None else min(100, limiter.entries_for(permits))
        limiter.on_dispatch(entries * entry_msgs, entries * 100, now_s, entries)
        sends.append((now_s, entries * entry_msgs))
        now_s += 0.001
    busiest = _busiest_window(sends)
    assert rate * WINDOW_S * 0.98 <= busiest <= rate * WINDOW_S * 1.02 + entry_msgs, busiest


def _drive_dispatch(
    limiter: DispatchRateLimiter, entry_msgs: int, size: int, seconds: float
) -> int:
    """A dispatcher reading up to 100 entries per round whenever the rate allows (entries of
    ``entry_msgs`` messages); messages dispatched in ``seconds``."""
    now_s, sent = 0.0, 0
    while now_s < seconds:
        permits = limiter.permits(now_s)
        if permits == 0:
            now_s += limiter.pause_s(now_s)
            continue
        entries = 100 if permits is None else min(100, limiter.entries_for(permits))
        limiter.on_dispatch(entries * entry_msgs, entries * size, now_s, entries)
        sent += entries * entry_msgs
        now_s += 0.001
    return sent


@pytest.mark.parametrize(
    ("rate", "entry_msgs"), [(10, 1), (500, 1), (500, 10), (2000, 7), (1000, 100)]
)
def test_the_dispatch_rate_holds_within_ten_percent_over_ten_seconds(
    rate: int, entry_msgs: int
) -> None:
    limiter = DispatchRateLimiter()
    limiter.configure(DispatchRate(msgs=rate), 0.0)
    sent = _drive_dispatch(limiter, entry_msgs, 100, 10.0)
    # ten seconds at the rate, one second of burst, one entry of overshoot at most
    assert rate * 10 * 0.9 <= sent <= rate * 11 + entry_msgs
    assert (sent - rate) / 10 <= rate * 1.1
    assert limiter.throttled_msg_events > 0


def test_the_dispatch_byte_rate_and_period() -> None:
    limiter = DispatchRateLimiter()
    limiter.configure(DispatchRate(msgs=-1, size_bytes=20_000, period_s=2), 0.0)  # 10 kB/s
    sent = _drive_dispatch(limiter, 1, 1_000, 10.0)  # 10 messages/s of 1000 bytes
    assert 90 <= sent <= 111
    assert limiter.throttled_bytes_events > 0 and limiter.throttled_msg_events == 0
    limiter.configure(DispatchRate(), 10.0)
    assert limiter.permits(10.0) is None and limiter.pause_s(10.0) == 0


def test_batches_are_read_by_the_entries_the_permits_cover() -> None:
    limiter = DispatchRateLimiter()
    limiter.configure(DispatchRate(msgs=10_000), 0.0)  # a burst of 1000
    assert limiter.entries_for(1000) == 1  # the batch size is not known yet
    limiter.on_dispatch(5, 500, 0.0, entries=1)  # a small first batch
    assert limiter.permits(0.0) == 995 and limiter.entries_for(995) == 2  # not 199
    limiter.on_dispatch(100, 10_000, 0.0, entries=2)  # the batches are bigger
    assert limiter.permits(0.0) == 895 and limiter.entries_for(895) == 4
    limiter.on_dispatch(200, 20_000, 0.0, entries=4)
    assert limiter.entries_for(695) == 8 and limiter.entries_for(40) == 1
    limiter.on_dispatch(695, 69_500, 0.0, entries=14)
    assert limiter.permits(0.0) == 0 and limiter.pause_s(0.0) == pytest.approx(0.0001)


def test_subscribes_per_address_hold_their_rate_and_idle_addresses_are_forgotten() -> None:
    limiter = SubscribeRateLimiter()
    limiter.configure(SubscribeRate(per_consumer=10, period_s=10))  # 1/s, a burst of 10
    now_s, accepted = 0.0, 0
    while now_s < 100.0:  # one address subscribing as fast as it is let
        now_s += limiter.on_subscribe("10.0.0.1", now_s)
        accepted += 1
    assert 100 * 0.9 <= accepted - 10 <= 100 * 1.1 + 1
    assert limiter.limited_times > 0
    assert limiter.on_subscribe("10.0.0.2", now_s) == 0  # other addresses are not held back
    for i in range(200):  # many addresses once each: buckets are dropped once full again
        limiter.on_subscribe(f"10.1.{i // 250}.{i % 250}", now_s + 100 + i * 0.01)
    limiter.on_subscribe("10.9.9.9", now_s + 1000)
    assert limiter.tracked_addresses < 64
    limiter.configure(SubscribeRate())
    assert limiter.on_subscribe("10.0.0.1", 0.0) == 0


def test_the_dispatch_rate_holds_when_batches_grow() -> None:
    """A producer's first batches are small, the later ones big: reading by the first
    batch's size must not overshoot the rate for long."""
    limiter = DispatchRateLimiter()
    limiter.configure(DispatchRate(msgs=1000), 0.0)
    sizes = iter([6] + [150] * 10_000)
    now_s, sent = 0.0, 0
    while now_s < 10.0:
        permits = limiter.permits(now_s)
        if permits == 0:
            now_s += limiter.pause_s(now_s)
            continue
        batch = [next(sizes) for _ in range(min(100, limiter.entries_for(permits)))]
        limiter.on_dispatch(sum(batch), 100 * sum(batch), now_s, len(batch))
        sent += sum(batch)
        now_s += 0.001
    assert 1000 * 10 * 0.9 <= sent - 1000 <= 1000 * 10 * 1.1


def test_a_dispatch_rate_relative_to_the_publish_rate_follows_it() -> None:
    """Pulsar's ``relativeToPublishRate``: the limit is the topic's publish rate plus the
    configured rate; an absolute limit ignores the publish rate."""
    relative = DispatchRateLimiter()
    relative.configure(DispatchRate(msgs=100, relative_to_publish_rate=True), 0.0)
    absolute = DispatchRateLimiter()
    absolute.configure(DispatchRate(msgs=100), 0.0)
    for limiter, publish_rate, expected in (
        (relative, 400.0, 500),
        (relative, 0.0, 100),
        (absolute, 400.0, 100),
    ):
        start_s = 100.0 + 100.0 * (publish_rate == 0.0) + 200.0 * (limiter is absolute)
        now_s, sends = start_s, []
        while now_s < start_s + 3 * WINDOW_S:
            limiter.follow_publish_rate(publish_rate, publish_rate * 100, now_s)
            permits = limiter.permits(now_s)
            if permits == 0:
                now_s += limiter.pause_s(now_s)
                continue
            entries = min(100, limiter.entries_for(permits or 100))
            limiter.on_dispatch(entries, entries * 100, now_s, entries)
            sends.append((now_s, entries))
            now_s += 0.001
        busiest = _busiest_window(sends)
        assert expected * WINDOW_S * 0.98 <= busiest <= expected * WINDOW_S * 1.02 + 1, (
            publish_rate,
            busiest,
        )
