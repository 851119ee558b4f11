"""The replication task: the controller's command to a bookie's replication worker, and
the worker's answer (autorecovery).

The command channel is the metadata store, as for bundles: the controller's replica record
of a ledger, ``/controller_state/ledgers/L<id>`` (written in the controller's epoch-fenced
transaction), holds the task in flight under ``"task"``; the worker of ``targetBookie``
watches those records and runs the tasks naming it. Its answer is a
:class:`ReplicationOutcome` at ``/autorecovery/outcomes/L<id>``, which the controller reads,
feeds to its replica state machine and deletes.

Defined here, below the broker, because both sides read it: the controller
(:mod:`magnetar.broker.controller`) and the worker in ``magnetar bookie``
(:mod:`magnetar.ledger.replication_worker`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final

REPLICA_RECORDS_PATH: Final = "/controller_state/ledgers"
"""The controller's replica records, one per ledger not healthy (``L<id:010d>``)."""
AUTORECOVERY_ROOT: Final = "/autorecovery"
OUTCOMES_PATH: Final = "/autorecovery/outcomes"
"""The workers' answers, one per ledger (``L<id:010d>``), deleted once read."""
WORKERS_PATH: Final = "/autorecovery/workers"
"""One ephemeral node per bookie running a replication worker, named by its bookie id: only
those bookies are made targets of tasks."""


def record_name(ledger_id: int) -> str:
    """The node name of a ledger's replica record and outcome: ``L<id:010d>``."""
    return f"L{ledger_id:010d}"


def ledger_id_of(name: str) -> int | None:
    """The ledger id of a node named by :func:`record_name`; ``None`` for any other name."""
    if name.startswith("L") and name[1:].isdigit():
        return int(name[1:])
    return None


@dataclass(frozen=True, slots=True)
class ReplicateFragment:
    """Command to ``target_bookie``'s replication worker: copy the entries that bookie
    index ``bookie_index`` of the fragment starting at ``first_entry`` holds onto the target,
    then replace ``missing_bookie`` by the target there in the ledger metadata (CAS); see
    :mod:`magnetar.ledger.fragments`. Answered by
    :meth:`~magnetar.broker.controller.replica_state_machine.ReplicaStateMachine.fragment_replicated`
    or ``fragment_failed`` with this very command."""

    ledger_id: int
    first_entry: int
    bookie_index: int
    missing_bookie: str
    target_bookie: str
    epoch: int
    attempt: int = 1
    """1 for the first try of this ledger's current trouble, counting retries after failures."""

    def same_work(self, other: ReplicateFragment) -> bool:
        """True if ``other`` asks for the same copy, whichever controller epoch stamped it
        (a new controller restamps the tasks it resumes)."""
        return replace(other, epoch=self.epoch) == self

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "firstEntry": self.first_entry,
            "bookieIndex": self.bookie_index,
            "missingBookie": self.missing_bookie,
            "targetBookie": self.target_bookie,
            "epoch": self.epoch,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ReplicateFragment:
        """Raises ``KeyError``, ``TypeError``, ``ValueError`` on a malformed body."""
        return cls(
            ledger_id=int(body["ledgerId"]),
            first_entry=int(body["firstEntry"]),
            bookie_index=int(body["bookieIndex"]),
            missing_bookie=str(body["missingBookie"]),
            target_bookie=str(body["targetBookie"]),
            epoch=int(body["epoch"]),
            attempt=int(body["attempt"]),
        )


def task_of_record(data: bytes) -> ReplicateFragment | None:
    """The task in flight in a replica record's bytes (``None`` when it has none). Raises
    ``ValueError`` (also for JSON errors), ``KeyError``, ``TypeError`` on a malformed one."""
    body = json.loads(data)
    if not isinstance(body, dict):
        raise TypeError("a replica record is a JSON object")
    task = body.get("task")
    return None if task is None else ReplicateFragment.from_json(task)


@dataclass(frozen=True, slots=True)
class ReplicationOutcome:
    """A worker's answer to ``task``: ``ok`` once the replica is copied and the metadata
    names the target (or the replica was found replaced already), else ``error`` says why."""

    task: ReplicateFragment
    ok: bool
    error: str = ""

    def to_bytes(self) -> bytes:
        body = {"task": self.task.to_json(), "ok": self.ok, "error": self.error}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ReplicationOutcome:
        """Raises ``ValueError``, ``KeyError``, ``TypeError`` on a malformed answer."""
        body = json.loads(data)
        if not isinstance(body, dict):
            raise TypeError("an outcome is a JSON object")
        return cls(
            task=ReplicateFragment.from_json(body["task"]),
            ok=bool(body["ok"]),
            error=str(body.get("error", "")),
        )
