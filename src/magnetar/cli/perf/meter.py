"""Throughput and latency accounting for a perf run (sans-IO: times are passed in).

A :class:`PerfMeter` counts messages, bytes, errors and latencies. :meth:`PerfMeter.interval`
closes the current reporting window and returns its rates and percentiles;
:meth:`PerfMeter.summary` returns the same over the whole run. Latencies are microseconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from magnetar.cli.perf.histogram import LatencyHistogram

#: The percentiles every report shows, as (label, percentile).
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p999", 99.9),
)
MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Latency in milliseconds."""

    mean: float
    p50: float
    p95: float
    p99: float
    p999: float
    max: float

    @classmethod
    def of(cls, h: LatencyHistogram) -> LatencyStats:
        pct = {label: h.value_at_percentile(p) / 1000.0 for label, p in PERCENTILES}
        return cls(mean=h.mean / 1000.0, max=h.max / 1000.0, **pct)


@dataclass(frozen=True, slots=True)
class Report:
    """A window's (or the whole run's) figures."""

    elapsed_s: float
    messages: int
    bytes: int
    errors: int
    msg_per_s: float
    mb_per_s: float
    latency_ms: LatencyStats

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {
            "elapsedSeconds": round(d["elapsed_s"], 3),
            "messages": d["messages"],
            "bytes": d["bytes"],
            "errors": d["errors"],
            "msgPerSecond": round(d["msg_per_s"], 1),
            "mbPerSecond": round(d["mb_per_s"], 3),
            "latencyMs": {k: round(v, 3) for k, v in d["latency_ms"].items()},
        }


class PerfMeter:
    """Counts since the start and since the last :meth:`interval`."""

    def __init__(self, start_s: float) -> None:
        self._start_s = start_s
        self._window_start_s = start_s
        self._total = LatencyHistogram()
        self.window = LatencyHistogram()
        self._messages = self._bytes = self._errors = 0
        self._w_messages = self._w_bytes = self._w_errors = 0

    def record(self, size_bytes: int, latency_us: int) -> None:
        """One message done (sent and acknowledged, or received) after ``latency_us``."""
        self._w_messages += 1
        self._w_bytes += size_bytes
        self.window.record(latency_us)

    def error(self) -> None:
        self._w_errors += 1

    @property
    def messages(self) -> int:
        """Messages recorded so far, in every window."""
        return self._messages + self._w_messages

    def _fold(self) -> None:
        self._total.merge(self.window)
        self._messages += self._w_messages
        self._bytes += self._w_bytes
        self._errors += self._w_errors

    def interval(self, now_s: float) -> Report:
        """Close the current window and report it."""
        elapsed = max(now_s - self._window_start_s, 1e-9)
        report = _report(elapsed, self._w_messages, self._w_bytes, self._w_errors, self.window)
        self._fold()
        self.window = LatencyHistogram()
        self._w_messages = self._w_bytes = self._w_errors = 0
        self._window_start_s = now_s
        return report

    def summary(self, now_s: float) -> Report:
        """The whole run so far (the open window included)."""
        self.interval(now_s)
        elapsed = max(now_s - self._start_s, 1e-9)
        return _report(elapsed, self._messages, self._bytes, self._errors, self._total)


def _report(elapsed: float, messages: int, size: int, errors: int, h: LatencyHistogram) -> Report:
    return Report(
        elapsed_s=elapsed,
        messages=messages,
        bytes=size,
        errors=errors,
        msg_per_s=messages / elapsed,
        mb_per_s=size / MB / elapsed,
        latency_ms=LatencyStats.of(h),
    )
