"""The OpenMessaging Benchmark's producer-rate control for workloads whose ``producerRate``
is 0: OMB does not publish as fast as it can, it looks for the maximum *sustainable* rate,
the fastest at which the consumers keep up. It starts at 10,000 msg/s and, every 3 s,
compares what was published (receipted) and received since the run began:

- more than 1,000 messages published and not yet received (a receive backlog), or more
  than 1,000 fewer published in the period than the rate asked for (a publish backlog):
  the next rate is 0.2 times the period's actual rate plus 0.8 times the rate that would have
  cleared that backlog, and the ramping factor halves (to at least 0.01);
- otherwise the rate grows by the ramping factor (which doubles, to at most 1), from
  10,000 msg/s upwards.

The figures of such a workload are those of the window after a warm-up, while the control
goes on. (OMB's own also lowers the rate on a target p99 latency, off by default.)"""

from __future__ import annotations

from typing import Final

CONTROL_PERIOD_S: Final = 3.0
START_RATE: Final = 10_000.0
"""Messages per second at the start."""


class RateController:
    """The next publish rate from the totals published and received so far (pure)."""

    def __init__(
        self,
        publish_backlog_limit: int = 1_000,
        receive_backlog_limit: int = 1_000,
        min_ramping_factor: float = 0.01,
        max_ramping_factor: float = 1.0,
    ) -> None:
        self.publish_backlog_limit = publish_backlog_limit
        self.receive_backlog_limit = receive_backlog_limit
        self.min_ramping_factor = min_ramping_factor
        self.max_ramping_factor = max_ramping_factor
        self.ramping_factor = max_ramping_factor
        self._published = 0
        self._received = 0

    def next_rate(
        self, rate: float, period_s: float, total_published: int, total_received: int
    ) -> float:
        """The rate (messages per second) for the next period, after a period of
        ``period_s`` at ``rate``, with ``total_published`` and ``total_received`` since the
        start."""
        expected = int(rate * period_s)
        published = total_published - self._published
        received = total_received - self._received
        self._published, self._received = total_published, total_received
        receive_backlog = total_published - total_received
        if receive_backlog > self.receive_backlog_limit:
            return self._corrected(period_s, received, expected, receive_backlog)
        publish_backlog = expected - published
        if publish_backlog > self.publish_backlog_limit:
            return self._corrected(period_s, published, expected, publish_backlog)
        self.ramping_factor = min(self.max_ramping_factor, self.ramping_factor * 2)
        return rate * (1 + self.ramping_factor)

    def _corrected(self, period_s: float, actual: int, expected: int, backlog: int) -> float:
        self.ramping_factor = max(self.min_ramping_factor, self.ramping_factor / 2)
        return 0.2 * actual / period_s + 0.8 * max(0, expected - backlog) / period_s
