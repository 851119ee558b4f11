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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.functions.errors import FunctionsWorkerError, MembershipUnavailable, NotLeader
    from magnetar.functions.leadership import LeadershipChanged, LeadershipState
    from magnetar.functions.membership_view import MembershipView, membership_from_stats
    from magnetar.functions.worker import FunctionsWorker
    from magnetar.functions.worker_config import (
        DEFAULT_ASSIGNMENTS_TOPIC,
        DEFAULT_COORDINATION_SUBSCRIPTION,
        DEFAULT_COORDINATION_TOPIC,
        InvalidWorkerConfig,
        WorkerConfig,
    )
    from magnetar.functions.worker_info import InvalidWorkerInfo, WorkerInfo

_MODULE_OF = {
    "FunctionsWorkerError": "errors",
    "MembershipUnavailable": "errors",
    "NotLeader": "errors",
    "LeadershipChanged": "leadership",
    "LeadershipState": "leadership",
    "MembershipView": "membership_view",
    "membership_from_stats": "membership_view",
    "FunctionsWorker": "worker",
    "DEFAULT_ASSIGNMENTS_TOPIC": "worker_config",
    "DEFAULT_COORDINATION_SUBSCRIPTION": "worker_config",
    "DEFAULT_COORDINATION_TOPIC": "worker_config",
    "InvalidWorkerConfig": "worker_config",
    "WorkerConfig": "worker_config",
    "InvalidWorkerInfo": "worker_info",
    "WorkerInfo": "worker_info",
}


def __getattr__(name: str) -> Any:
    # Each name is imported from its module when first asked for: a host imports the
    # package for one light module (the REST routes' ServiceSlot, at start), and
    # FunctionsWorker brings the client library.
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
