"""The Functions Worker (see ``docs/functions.md``): membership and leader election through a
Failover subscription (:class:`FunctionsWorker`), and the whole worker with its metadata,
scheduler and runtime managers (:class:`magnetar.functions.worker_service.WorkerService`,
imported from its module: it brings the instance runtime).

::

    from magnetar.functions import WorkerConfig, WorkerInfo
    from magnetar.functions.worker_service import WorkerService

    config = WorkerConfig(worker=WorkerInfo("w1", "127.0.0.1", 6750),
                          service_url="pulsar://127.0.0.1:6650", admin_url="http://127.0.0.1:8080")
    async with WorkerService(config) as worker:
        ...
"""

from typing import TYPE_CHECKING, Any

from magnetar.functions.errors import FunctionsWorkerError, MembershipUnavailable, NotLeader
from magnetar.functions.leadership import LeadershipChanged, LeadershipState
from magnetar.functions.membership_view import MembershipView, membership_from_stats
from magnetar.functions.worker_config import (
    DEFAULT_ASSIGNMENTS_TOPIC,
    DEFAULT_COORDINATION_SUBSCRIPTION,
    DEFAULT_COORDINATION_TOPIC,
    InvalidWorkerConfig,
    WorkerConfig,
)
from magnetar.functions.worker_info import InvalidWorkerInfo, WorkerInfo

if TYPE_CHECKING:
    from magnetar.functions.worker import FunctionsWorker


def __getattr__(name: str) -> Any:
    # FunctionsWorker brings the client library; the REST routes and the configuration
    # (imported by the standalone at start) do not need it.
    if name == "FunctionsWorker":
        from magnetar.functions.worker import FunctionsWorker

        return FunctionsWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_ASSIGNMENTS_TOPIC",
    "DEFAULT_COORDINATION_SUBSCRIPTION",
    "DEFAULT_COORDINATION_TOPIC",
    "FunctionsWorker",
    "FunctionsWorkerError",
    "InvalidWorkerConfig",
    "InvalidWorkerInfo",
    "LeadershipChanged",
    "LeadershipState",
    "MembershipUnavailable",
    "MembershipView",
    "NotLeader",
    "WorkerConfig",
    "WorkerInfo",
    "membership_from_stats",
]
