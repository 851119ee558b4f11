"""The perf latency histogram and meter against naive models (sorted lists)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from magnetar.cli.perf.histogram import (
    SUB_BUCKETS,
    VALUE_MAX,
    LatencyHistogram,
    bucket_highest,
    bucket_index,
)
from magnetar.cli.perf.meter import PerfMeter

values = st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300)
percentiles = st.sampled_from([1.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0])


def nearest_rank(sorted_values: list[int], p: float) -> int:
    return sorted_values[max(1, math.ceil(p / 100 * len(sorted_values))) - 1]


@given(st.integers(min_value=0, max_value=VALUE_MAX))
def test_bucket_holds_its_value_within_relative_width(v: int) -> None:
    i = bucket_index(v)
    assert bucket_highest(i) >= v
    assert i == 0 or bucket_highest(i - 1) < v
    assert bucket_highest(i) - v <= max(0, v // SUB_BUCKETS)


@given(values, percentiles)
def test_percentile_is_nearest_rank_rounded_up_to_its_bucket(vs: list[int], p: float) -> None:
    h = LatencyHistogram()
    for v in vs:
        h.record(v)
    exact = nearest_rank(sorted(vs), p)
    got = h.value_at_percentile(p)
    assert exact <= got <= max(vs)
    assert got - exact <= exact // SUB_BUCKETS
    assert (h.count, h.min, h.max, h.total) == (len(vs), min(vs), max(vs), sum(vs))


@given(values, values)
def test_merge_equals_recording_everything(a: list[int], b: list[int]) -> None:
    ha, hb, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for v in a:
        ha.record(v)
        both.record(v)
    for v in b:
        hb.record(v)
        both.record(v)
    ha.merge(hb)
    for p in (50.0, 99.0, 99.9, 100.0):
        assert ha.value_at_percentile(p) == both.value_at_percentile(p)
    assert (ha.count, ha.min, ha.max, ha.total) == (both.count, both.min, both.max, both.total)


def test_out_of_range_values_are_clamped_and_empty_is_zero() -> None:
    h = LatencyHistogram()
    assert h.value_at_percentile(99) == 0 and h.mean == 0.0
    h.record(-5)
    h.record(VALUE_MAX * 4)
    assert h.min == 0 and h.max == VALUE_MAX and h.count == 2


def test_meter_windows_and_summary() -> None:
    meter = PerfMeter(start_s=100.0)
    for i in range(1000):
        meter.record(1024, 1000 + i)  # 1.000 .. 1.999 ms
    w1 = meter.interval(102.0)
    assert w1.messages == 1000 and w1.msg_per_s == 500.0
    assert abs(w1.mb_per_s - 1000 * 1024 / 2 / 1024 / 1024) < 1e-9
    assert 1.49 <= w1.latency_ms.p50 <= 1.51 and w1.latency_ms.max == 1.999
    meter.record(10, 50_000)
    meter.error()
    w2 = meter.interval(103.0)
    assert (w2.messages, w2.errors, w2.latency_ms.max) == (1, 1, 50.0)
    total = meter.summary(104.0)
    assert (total.messages, total.errors, total.bytes) == (1001, 1, 1000 * 1024 + 10)
    assert total.msg_per_s == 1001 / 4.0 and total.latency_ms.max == 50.0
    doc = total.to_json()
    assert set(doc["latencyMs"]) == {"mean", "p50", "p95", "p99", "p999", "max"}
