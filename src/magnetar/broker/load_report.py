"""This broker's load report: what the controller's placement and load shedding read.

Every ``interval_ms`` a cluster broker rewrites its registration node
``/loadbalance/brokers/<id>`` with its URLs plus a ``load`` object (Pulsar keeps its
``LocalBrokerData`` at the same path, with some of the same names)::

    {"lastUpdate": ms, "cpu": {"usage": percent, "limit": 100.0},
     "msgRateIn": …, "msgRateOut": …, "numTopics": …, "numConnections": …,
     "bundleMsgRates": {"tenant/ns/0x…_0x…": rate in + out, …}}

CPU is this process's CPU time over the interval as a percentage of one core: a broker is
one event loop, so at 100 % it is saturated whatever the machine's other cores do.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from magnetar.broker.controller.load import LoadReport


class CpuMeter:
    """CPU use of this process between calls, in percent of one core. ``cpu_time_s`` and
    ``monotonic_s`` are injected (``time.process_time`` and the clock's)."""

    def __init__(self, cpu_time_s: Callable[[], float], monotonic_s: Callable[[], float]) -> None:
        self._cpu_time_s = cpu_time_s
        self._monotonic_s = monotonic_s
        self._last = (cpu_time_s(), monotonic_s())

    def sample(self) -> float:
        """Percent of one core used since the previous call (0 for an empty interval)."""
        cpu, now = self._cpu_time_s(), self._monotonic_s()
        last_cpu, last_now = self._last
        self._last = (cpu, now)
        if now <= last_now:
            return 0.0
        return max(0.0, 100.0 * (cpu - last_cpu) / (now - last_now))


def load_json(report: LoadReport) -> dict[str, Any]:
    return {
        "lastUpdate": report.reported_ms,
        "cpu": {"usage": report.cpu_percent, "limit": 100.0},
        "msgRateIn": report.msg_rate_in,
        "msgRateOut": report.msg_rate_out,
        "numTopics": report.topics,
        "numConnections": report.connections,
        "bundleMsgRates": dict(sorted(report.bundle_msg_rates.items())),
    }


def with_load(registration: bytes, report: LoadReport) -> bytes:
    """The registration JSON with ``report`` as its ``load`` object."""
    body = json.loads(registration)
    body["load"] = load_json(report)
    return json.dumps(body, sort_keys=True).encode()


def report_of(broker: str, registration: bytes) -> LoadReport | None:
    """The load report in a registration node, ``None`` when it has none or an unreadable
    one (a broker that has not reported yet counts as idle)."""
    try:
        load = json.loads(registration).get("load")
        if not isinstance(load, Mapping):
            return None
        rates = load.get("bundleMsgRates", {})
        return LoadReport(
            broker=broker,
            reported_ms=int(load["lastUpdate"]),
            cpu_percent=float(load["cpu"]["usage"]),
            msg_rate_in=float(load["msgRateIn"]),
            msg_rate_out=float(load["msgRateOut"]),
            topics=int(load["numTopics"]),
            connections=int(load["numConnections"]),
            bundle_msg_rates={str(k): float(v) for k, v in rates.items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
