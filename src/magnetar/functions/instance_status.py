"""What one running instance reports, in the shape of Pulsar's ``FunctionStatus`` JSON
(``functions status`` prints it): the runtime fills it, the worker's REST API serves it.

    InstanceStatus(instance_id=0, running=True, worker_id="w1").to_json()
    -> {"instanceId": 0, "status": {"running": true, "error": "", "numRestarts": 0, ...}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LATEST_EXCEPTIONS_MAX = 10
"""How many recent exceptions an instance keeps to report (Pulsar keeps 10)."""


@dataclass(frozen=True, slots=True)
class ExceptionReport:
    message: str
    timestamp_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"exceptionString": self.message, "msSinceEpoch": self.timestamp_ms}


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceStatus:
    """A snapshot; ``error`` is why the instance is not running (an import error, a
    malformed package, a failed requirements install, the last crash), else empty."""

    instance_id: int
    running: bool
    worker_id: str = ""
    error: str = ""
    num_restarts: int = 0
    num_received: int = 0
    num_successfully_processed: int = 0
    num_user_exceptions: int = 0
    num_system_exceptions: int = 0
    latest_user_exceptions: tuple[ExceptionReport, ...] = field(default_factory=tuple)
    latest_system_exceptions: tuple[ExceptionReport, ...] = field(default_factory=tuple)
    average_latency_ms: float = 0.0
    last_invocation_time_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "instanceId": self.instance_id,
            "status": {
                "running": self.running,
                "error": self.error,
                "numRestarts": self.num_restarts,
                "numReceived": self.num_received,
                "numSuccessfullyProcessed": self.num_successfully_processed,
                "numUserExceptions": self.num_user_exceptions,
                "latestUserExceptions": [e.to_json() for e in self.latest_user_exceptions],
                "numSystemExceptions": self.num_system_exceptions,
                "latestSystemExceptions": [e.to_json() for e in self.latest_system_exceptions],
                "averageLatency": self.average_latency_ms,
                "lastInvocationTime": self.last_invocation_time_ms,
                "workerId": self.worker_id,
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InstanceStatus:
        """The inverse of :meth:`to_json` (the process runtime reads its instance's status
        this way). Raises KeyError, TypeError or ValueError for a malformed document."""
        s = data["status"]

        def reports(items: list[dict[str, Any]]) -> tuple[ExceptionReport, ...]:
            return tuple(
                ExceptionReport(str(e["exceptionString"]), int(e["msSinceEpoch"])) for e in items
            )

        return cls(
            instance_id=int(data["instanceId"]),
            running=bool(s["running"]),
            worker_id=str(s.get("workerId", "")),
            error=str(s.get("error", "")),
            num_restarts=int(s.get("numRestarts", 0)),
            num_received=int(s.get("numReceived", 0)),
            num_successfully_processed=int(s.get("numSuccessfullyProcessed", 0)),
            num_user_exceptions=int(s.get("numUserExceptions", 0)),
            num_system_exceptions=int(s.get("numSystemExceptions", 0)),
            latest_user_exceptions=reports(s.get("latestUserExceptions", [])),
            latest_system_exceptions=reports(s.get("latestSystemExceptions", [])),
            average_latency_ms=float(s.get("averageLatency", 0.0)),
            last_invocation_time_ms=int(s.get("lastInvocationTime", 0)),
        )


def function_status_json(instances: list[InstanceStatus]) -> dict[str, Any]:
    """Pulsar's ``FunctionStatus``: the instances plus ``numInstances`` / ``numRunning``."""
    return {
        "numInstances": len(instances),
        "numRunning": sum(1 for i in instances if i.running),
        "instances": [i.to_json() for i in sorted(instances, key=lambda i: i.instance_id)],
    }
