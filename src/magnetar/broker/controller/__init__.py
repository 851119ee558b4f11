"""The cluster controller (DESIGN.md section 3): pure cores plus the election shell.

* :mod:`.bundles` — namespace bundles (hash ranges of topic names), lookup and split;
* :mod:`.bundle_state` — the persisted state of one bundle;
* :mod:`.load` — load reports and the choice of a broker;
* :mod:`.epoch_fence` — the epoch fence both state machines keep (stale answers, deposed);
* :mod:`.bundle_state_machine` — the sans-IO bundle state machine (events in, effects out);
* :mod:`.replica_state` — the persisted replica state of one ledger, the re-replication task;
* :mod:`.replica_state_machine` — the sans-IO ledger replica state machine (autorecovery);
* :mod:`.election` — :class:`ControllerElection`, the shell that wins ``/controller``,
  resumes the persisted states and applies effects as epoch-fenced metadata writes.
"""

from magnetar.broker.controller.bundle_state import BundleRecord, BundleState, CorruptRecord
from magnetar.broker.controller.bundle_state_machine import (
    AssignBundle,
    BrokerCommand,
    BundleStateMachine,
    ControllerEffect,
    ControllerPolicy,
    DeleteBundleState,
    ReleaseBundle,
    WriteBundleState,
    WriteNamespaceBundles,
)
from magnetar.broker.controller.bundles import (
    BundleId,
    BundleRange,
    InvalidBundle,
    NamespaceBundles,
    topic_hash,
)
from magnetar.broker.controller.errors import (
    BundleBusy,
    ControllerDeposed,
    NamespaceLimitReached,
    StaleControllerEpoch,
    UnknownBundle,
)
from magnetar.broker.controller.load import LoadPolicy, LoadReport
from magnetar.broker.controller.replica_state import (
    ReplicaRecord,
    ReplicaState,
    ReplicateFragment,
)
from magnetar.broker.controller.replica_state_machine import (
    DeleteReplicaState,
    ReplicaEffect,
    ReplicaPolicy,
    ReplicaStateMachine,
    WriteReplicaState,
)

__all__ = [
    "AssignBundle",
    "BrokerCommand",
    "BundleBusy",
    "BundleId",
    "BundleRange",
    "BundleRecord",
    "BundleState",
    "BundleStateMachine",
    "ControllerDeposed",
    "ControllerEffect",
    "ControllerPolicy",
    "CorruptRecord",
    "DeleteBundleState",
    "DeleteReplicaState",
    "InvalidBundle",
    "LoadPolicy",
    "LoadReport",
    "NamespaceBundles",
    "NamespaceLimitReached",
    "ReleaseBundle",
    "ReplicaEffect",
    "ReplicaPolicy",
    "ReplicaRecord",
    "ReplicaState",
    "ReplicaStateMachine",
    "ReplicateFragment",
    "StaleControllerEpoch",
    "UnknownBundle",
    "WriteBundleState",
    "WriteNamespaceBundles",
    "WriteReplicaState",
    "topic_hash",
]
