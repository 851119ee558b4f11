"""Rate meters and latency histograms (``magnetar.broker.stats``) driven by a manual clock."""

from __future__ import annotations

import pytest

from magnetar.broker.stats import ConsumerMeters, MeterSampler, RateMeter, SampledRateMeter
from magnetar.common.clock import ManualClock
from magnetar.common.latency import LatencyHistogram


def test_rate_over_the_window_then_decays_to_zero() -> None:
    clock = ManualClock()
    meter = RateMeter(clock, window_s=10, buckets=10)
    for _ in range(20):  # 100 messages of 10 bytes per second for 20 s
        meter.record(100, 1000)
        clock.advance(1.0)
    assert meter.rate() == pytest.approx(100, rel=0.1)
    assert meter.throughput() == pytest.approx(1000, rel=0.1)
    assert meter.total_count == 2000 and meter.total_bytes == 20000
    clock.advance(11)
    assert meter.rate() == 0 and meter.throughput() == 0
    assert meter.total_count == 2000  # totals never decay


def test_young_meter_is_not_diluted_and_one_event_is_not_a_spike() -> None:
    clock = ManualClock()
    meter = RateMeter(clock, window_s=10, buckets=10)
    clock.advance(2.0)
    meter.record(50)
    assert meter.rate() == pytest.approx(25)  # 50 over the 2 s the meter has existed
    fresh = RateMeter(clock, window_s=10, buckets=10)
    fresh.record(1)
    assert fresh.rate() == pytest.approx(1.0)  # at least one bucket (1 s) of span


def test_touch_records_wall_clock_time() -> None:
    clock = ManualClock(start_ms=1_000_000)
    meter = RateMeter(clock)
    assert meter.last_record_ms == 0
    meter.touch()
    assert meter.last_record_ms == 1_000_000


def test_sampler_rounds_fold_what_each_meter_recorded_since_the_last() -> None:
    """Each round folds into the buckets what a meter recorded since the previous one,
    however often it recorded, and a meter that recorded nothing keeps reading zero."""
    clock = ManualClock(start_ms=5_000)
    sampler = MeterSampler()
    busy, idle = SampledRateMeter(clock, sampler), SampledRateMeter(clock, sampler)
    for second in range(10):
        for _ in range(4):
            busy.record(25, 250)
        clock.advance(1.0)
        sampler.sample_all()
        assert busy.total_count == 100 * (second + 1)
    assert (
        busy._window is not None and busy._window.counts == [100] * 10
    )  # one second's messages per bucket, none counted twice
    assert busy.rate() == pytest.approx(100, rel=0.15)  # the window spans 9-10 s
    assert busy.throughput() == pytest.approx(1000, rel=0.15)
    assert busy.last_record_ms == 15_000
    assert idle.rate() == 0 and idle.throughput() == 0 and idle.last_record_ms == 0
    clock.advance(10)
    sampler.sample_all()
    assert busy.rate() == 0 and busy.total_count == 1000


def test_latency_histogram_buckets() -> None:
    h = LatencyHistogram()
    for ms in (0.1, 0.5, 0.7, 3, 60, 5000):
        h.observe(ms)
    assert h.counts == [2, 1, 1, 0, 0, 0, 1, 0, 0, 1]
    assert h.count == 6 and h.sum_ms == pytest.approx(5064.3)
    other = LatencyHistogram()
    other.observe(2)
    h.merge(other)
    assert h.counts[2] == 2


def test_a_histogram_holds_no_buckets_until_its_first_observation() -> None:
    h = LatencyHistogram()
    empty = LatencyHistogram()
    h.merge(empty)
    assert h.counts == [0] * 10 and h.count == 0 and h._counts is None
    empty.observe(3)
    h.merge(empty)
    assert h.counts == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0] and h.sum_ms == 3


def test_a_consumers_meters_are_made_on_first_use_and_born_with_it() -> None:
    """An idle consumer holds no ack, flow or redelivery meter; one made later measures
    from the consumer's start, as one made with it would."""
    clock = ManualClock()
    meters = ConsumerMeters(clock)
    assert meters._ack is None and meters._flow is None and meters._redeliver is None
    clock.advance(5.0)
    meters.ack.record(50)
    assert meters.ack.rate() == pytest.approx(10, rel=0.01)
    assert meters._flow is None
