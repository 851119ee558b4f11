"""A bounded log-linear latency histogram (the idea of HdrHistogram, two significant digits).

Values are non-negative integers (microseconds here). Values below ``2 * SUB_BUCKETS`` get a
bucket each; above, every power-of-two range is cut into ``SUB_BUCKETS`` equal buckets, so a
bucket's width is at most ``1 / SUB_BUCKETS`` (< 0.8 %) of its values. Values above
``VALUE_MAX`` are clamped to it (and still counted); the exact maximum, minimum and sum are
kept beside the buckets.

:meth:`LatencyHistogram.value_at_percentile` returns the highest value of the bucket that
holds the nearest-rank percentile (never above the exact maximum), so it is within one bucket
width above the exact nearest-rank value and never below it.
"""

from __future__ import annotations

import math

SUB_BUCKET_BITS = 7
SUB_BUCKETS = 1 << SUB_BUCKET_BITS  # 128
_LINEAR_LIMIT = 2 * SUB_BUCKETS  # values below it are exact
#: Clamp: about 12.7 days in microseconds; keeps the bucket array bounded (~4.6k slots).
VALUE_MAX = (1 << 40) - 1


def bucket_index(value: int) -> int:
    """The bucket of ``value`` (0 <= value <= VALUE_MAX)."""
    if value < _LINEAR_LIMIT:
        return value
    shift = value.bit_length() - (SUB_BUCKET_BITS + 1)
    return _LINEAR_LIMIT + (shift - 1) * SUB_BUCKETS + ((value >> shift) - SUB_BUCKETS)


def bucket_highest(index: int) -> int:
    """The highest value that falls in bucket ``index``."""
    if index < _LINEAR_LIMIT:
        return index
    shift = (index - _LINEAR_LIMIT) // SUB_BUCKETS + 1
    top = (index - _LINEAR_LIMIT) % SUB_BUCKETS + SUB_BUCKETS
    return ((top + 1) << shift) - 1


class LatencyHistogram:
    """Counts of values by bucket, plus exact count, sum, min and max. Not thread-safe."""

    __slots__ = ("_counts", "count", "max", "min", "total")

    def __init__(self) -> None:
        self._counts: list[int] = [0] * (bucket_index(VALUE_MAX) + 1)
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    def record(self, value: int) -> None:
        """Count one value; negative values count as 0, huge ones as VALUE_MAX."""
        if value < 0:
            value = 0
        elif value > VALUE_MAX:
            value = VALUE_MAX
        self._counts[value if value < _LINEAR_LIMIT else bucket_index(value)] += 1
        if self.count == 0 or value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.count += 1
        self.total += value

    def merge(self, other: LatencyHistogram) -> None:
        """Add every value counted by ``other`` (which is left unchanged)."""
        if other.count == 0:
            return
        counts = self._counts
        for i, n in enumerate(other._counts):
            if n:
                counts[i] += n
        self.min = other.min if self.count == 0 else min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count
        self.total += other.total

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def value_at_percentile(self, percentile: float) -> int:
        """The nearest-rank ``percentile`` (0 < p <= 100), rounded up to its bucket's
        highest value and capped at the exact maximum; 0 when empty."""
        if self.count == 0:
            return 0
        rank = max(1, math.ceil(percentile / 100.0 * self.count))
        seen = 0
        for i, n in enumerate(self._counts):
            if n:
                seen += n
                if seen >= rank:
                    return min(bucket_highest(i), self.max)
        return self.max
