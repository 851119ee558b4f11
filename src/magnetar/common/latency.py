"""A latency histogram with fixed bucket bounds, cheap to record into on hot paths."""

from __future__ import annotations

from bisect import bisect_left

LATENCY_BOUNDS_MS: tuple[float, ...] = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
"""Pulsar's write-latency buckets (``_le_0_5`` … ``_le_1000``, then ``_overflow``)."""


class LatencyHistogram:
    """Observations in milliseconds, counted per bucket of :data:`LATENCY_BOUNDS_MS`
    (plus an overflow bucket), with their sum."""

    __slots__ = ("bounds_ms", "counts", "sum_ms")

    def __init__(self, bounds_ms: tuple[float, ...] = LATENCY_BOUNDS_MS) -> None:
        self.bounds_ms = bounds_ms
        self.counts = [0] * (len(bounds_ms) + 1)
        """Per bucket, not cumulative; the last is the overflow bucket."""
        self.sum_ms = 0.0

    def observe(self, latency_ms: float, times: int = 1) -> None:
        """Count ``times`` observations of ``latency_ms``."""
        # the first bucket whose bound is >= the latency (the overflow bucket past them all)
        self.counts[bisect_left(self.bounds_ms, latency_ms)] += times
        self.sum_ms += latency_ms * times

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merge(self, other: LatencyHistogram) -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum_ms += other.sum_ms
