"""A latency histogram with fixed bucket bounds, cheap to record into on hot paths."""

from __future__ import annotations

from bisect import bisect_left

LATENCY_BOUNDS_MS: tuple[float, ...] = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
"""Pulsar's write-latency buckets (``_le_0_5`` … ``_le_1000``, then ``_overflow``)."""


class LatencyHistogram:
    """Observations in milliseconds, counted per bucket of :data:`LATENCY_BOUNDS_MS`
    (plus an overflow bucket), with their sum. Holds no buckets until the first
    observation (most histograms of a broker with many idle topics never get one)."""

    __slots__ = ("_counts", "bounds_ms", "sum_ms")

    def __init__(self, bounds_ms: tuple[float, ...] = LATENCY_BOUNDS_MS) -> None:
        self.bounds_ms = bounds_ms
        self._counts: list[int] | None = None
        self.sum_ms = 0.0

    @property
    def counts(self) -> list[int]:
        """Per bucket, not cumulative; the last is the overflow bucket (a copy of zeros
        before the first observation: write through :meth:`observe` or :meth:`merge`)."""
        if self._counts is None:
            return [0] * (len(self.bounds_ms) + 1)
        return self._counts

    def _buckets(self) -> list[int]:
        if self._counts is None:
            self._counts = [0] * (len(self.bounds_ms) + 1)
        return self._counts

    def observe(self, latency_ms: float, times: int = 1) -> None:
        """Count ``times`` observations of ``latency_ms``."""
        # the first bucket whose bound is >= the latency (the overflow bucket past them all)
        counts = self._counts if self._counts is not None else self._buckets()
        counts[bisect_left(self.bounds_ms, latency_ms)] += times
        self.sum_ms += latency_ms * times

    @property
    def count(self) -> int:
        return 0 if self._counts is None else sum(self._counts)

    def merge(self, other: LatencyHistogram) -> None:
        if other._counts is None:
            return
        counts = self._buckets()
        for i, c in enumerate(other._counts):
            counts[i] += c
        self.sum_ms += other.sum_ms
