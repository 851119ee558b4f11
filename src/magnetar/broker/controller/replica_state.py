"""The persisted replica state of one ledger (Kafka's replica state, per ledger).

States and what each promises::

    HEALTHY ──bookie left──▶ UNDER_REPLICATED ──task assigned──▶ REREPLICATING
       ▲                          ▲    │                              │
       │                          │    └─ bookie back / fragment ─┐   │ failed, timed out,
       │                          └───────────────────────────────┼───┘ target left
       └──────────── every sealed fragment on live bookies ◀──────┴── fragment done

* ``HEALTHY`` — every sealed fragment's ensemble names only registered bookies, so each
  entry has its write quorum of live replicas. Nothing is persisted for a healthy ledger
  (a node per ledger would double the metadata); its record is deleted.
* ``UNDER_REPLICATED`` — some sealed fragment names a bookie whose registration vanished;
  no re-replication runs for it now (waiting for a slot, a target or a retry backoff).
* ``REREPLICATING`` — ``task`` was assigned to the target bookie's replication worker.

Every record carries the epoch of the controller that wrote it; a task carries it too.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from magnetar.broker.controller.bundle_state import CorruptRecord
from magnetar.ledger.replication_task import ReplicateFragment

__all__ = ["ReplicaRecord", "ReplicaState", "ReplicateFragment"]


class ReplicaState(enum.Enum):
    HEALTHY = "Healthy"
    UNDER_REPLICATED = "UnderReplicated"
    REREPLICATING = "Rereplicating"


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    state: ReplicaState
    epoch: int
    """Epoch of the controller that wrote this record."""
    since_ms: int
    """When the ledger entered ``state`` (the controller's clock)."""
    task: ReplicateFragment | None = None
    """The task in flight: set exactly in REREPLICATING."""

    def __post_init__(self) -> None:
        if (self.state is ReplicaState.REREPLICATING) != (self.task is not None):
            raise ValueError(f"a {self.state.value} record with task {self.task!r}")

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "state": self.state.value,
            "epoch": self.epoch,
            "sinceMs": self.since_ms,
        }
        if self.task is not None:
            body["task"] = self.task.to_json()
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ReplicaRecord:
        """Raises :class:`CorruptRecord`."""
        try:
            body = json.loads(data)
            task = body.get("task")
            return cls(
                state=ReplicaState(body["state"]),
                epoch=int(body["epoch"]),
                since_ms=int(body["sinceMs"]),
                task=None if task is None else ReplicateFragment.from_json(task),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptRecord(f"undecodable replica record {data[:80]!r}: {exc}") from None
