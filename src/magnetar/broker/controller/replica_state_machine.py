"""The controller's ledger replica state machine (Kafka's replica state machine), sans-IO.

It drives autorecovery: when a bookie's registration vanishes, every ledger with a sealed
fragment on it (:mod:`magnetar.ledger.fragments`) becomes UNDER_REPLICATED, and the missing
replicas are copied, one fragment replica at a time per ledger, by the replication worker
of a target bookie, until every sealed fragment names only live bookies again.

:class:`ReplicaStateMachine` takes events — bookie joined / left (its registration appeared /
vanished), ledger changed (created, ensemble changed, closed, or rewritten by a worker; with
the metadata node's version) and deleted, a worker's answer to a task (replicated / failed),
a newer controller epoch, clock ticks — each with the caller's clock reading ``now_ms``, and
returns *effects* for the shell to execute in order:

* :class:`WriteReplicaState`, :class:`DeleteReplicaState` — metadata writes (at
  ``/controller_state/ledgers/L<id>``), applied in one transaction fenced by the epoch
  before any command of the same call;
* :class:`~.replica_state.ReplicateFragment` — a command to the target bookie's worker.

Every effect carries the controller's epoch. Answers stamped with an older epoch raise
:class:`StaleControllerEpoch`; once a newer epoch was seen every input raises
:class:`ControllerDeposed`. The epoch keeps a deposed controller's *state* writes out; the
*data* stays safe whoever asked for a copy, because a worker replaces a replica only by a
compare-and-set on the ledger metadata after the copy is complete.

Rules:

* A ledger's state follows from its metadata and the live bookies: HEALTHY when every
  sealed fragment names only live bookies, else UNDER_REPLICATED, or REREPLICATING while a
  task for it is in flight. A bookie that comes back before its replicas were copied makes
  its ledgers healthy again (its data is still there).
* At most one task per ledger (its metadata CAS would otherwise race itself) and at most
  ``tasks_in_flight_max`` in all; waiting ledgers get slots in ledger-id order.
* The target of a task is a live bookie not in that fragment's ensemble that runs a
  replication worker (when the caller tracks workers: ``workers``); among them, first the
  ones with which the fragment's ensemble meets the placement policy
  (:attr:`ReplicaPolicy.placement`, over the bookies' ``racks``:
  :func:`magnetar.ledger.placement.replacements`), or falls least short of it, then the one
  with the fewest tasks in flight towards it, then by id: a bookie that just joined takes
  part at once.
* A failed task, or one unanswered for ``task_timeout_ms``, is retried after a backoff that
  doubles from ``retry_backoff_initial_ms`` up to ``retry_backoff_max_ms``. A task whose
  target left is reassigned at once (not the task's fault).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from magnetar.broker.controller.epoch_fence import EpochFenced
from magnetar.broker.controller.replica_state import (
    ReplicaRecord,
    ReplicaState,
    ReplicateFragment,
)
from magnetar.ledger.fragments import fragment_at, missing_replicas
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.ledger.placement import PlacementPolicy, replacements

DEFAULT_TASKS_IN_FLIGHT_MAX = 16
DEFAULT_TASK_TIMEOUT_MS = 120_000
DEFAULT_RETRY_BACKOFF_INITIAL_MS = 1_000
DEFAULT_RETRY_BACKOFF_MAX_MS = 60_000


@dataclass(frozen=True, slots=True)
class WriteReplicaState:
    """Persist ``record`` as the replica state of ledger ``ledger_id``."""

    ledger_id: int
    record: ReplicaRecord
    epoch: int


@dataclass(frozen=True, slots=True)
class DeleteReplicaState:
    """Remove the persisted replica state of a ledger that is healthy again or deleted."""

    ledger_id: int
    epoch: int


ReplicaEffect = WriteReplicaState | DeleteReplicaState | ReplicateFragment


@dataclass(frozen=True, slots=True)
class ReplicaPolicy:
    tasks_in_flight_max: int = DEFAULT_TASKS_IN_FLIGHT_MAX
    """Bound on re-replication tasks running at once, over all ledgers and bookies."""
    task_timeout_ms: int = DEFAULT_TASK_TIMEOUT_MS
    """A task unanswered this long counts as failed (its command or worker was lost)."""
    retry_backoff_initial_ms: int = DEFAULT_RETRY_BACKOFF_INITIAL_MS
    retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    """The policy a replacement keeps the ensemble within (the brokers' ensemble placement)."""

    def __post_init__(self) -> None:
        if self.tasks_in_flight_max < 1:
            raise ValueError("tasks_in_flight_max must be at least 1")
        if not 0 < self.retry_backoff_initial_ms <= self.retry_backoff_max_ms:
            raise ValueError("need 0 < retry_backoff_initial_ms <= retry_backoff_max_ms")

    def backoff_ms(self, failures: int) -> int:
        """Delay before the next try after ``failures`` (>= 1) consecutive failures."""
        doubled = self.retry_backoff_initial_ms << min(failures - 1, 30)
        return min(doubled, self.retry_backoff_max_ms)


class ReplicaStateMachine(EpochFenced[ReplicaEffect]):
    """Replica states of every ledger, for the controller of one ``epoch``.

    Construct it with the ledgers' metadata and node versions, the records the previous
    controllers persisted and the bookies registered now, then call :meth:`start` once and
    run its effects. Raises :class:`StaleControllerEpoch` if a record was written at a newer
    epoch. Holds the ensembles of every ledger in memory (what BookKeeper's auditor reads).
    """

    def __init__(
        self,
        epoch: int,
        *,
        policy: ReplicaPolicy | None = None,
        ledgers: Mapping[int, tuple[LedgerMetadata, int]] | None = None,
        records: Mapping[int, ReplicaRecord] | None = None,
        live_bookies: Iterable[str] = (),
        workers: Iterable[str] | None = None,
        racks: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(epoch)
        self.policy = policy or ReplicaPolicy()
        self._live: set[str] = set(live_bookies)
        self._racks: dict[str, str] = dict(racks or {})
        """Bookie -> rack (``/region/rack``; absent: the default rack)."""
        self._workers: set[str] | None = None if workers is None else set(workers)
        """Bookies running a replication worker; ``None``: every live bookie does."""
        self._ledgers: dict[int, LedgerMetadata] = {}
        self._versions: dict[int, int] = {}
        self._on_bookie: dict[str, set[int]] = {}
        self._records: dict[int, ReplicaRecord] = {}
        self._waiting: set[int] = set()
        """UNDER_REPLICATED ledgers (no task in flight)."""
        self._in_flight: dict[int, int] = {}
        """Ledger -> when its task was sent."""
        self._target_load: dict[str, int] = {}
        self._failures: dict[int, int] = {}
        self._retry_at_ms: dict[int, int] = {}
        for ledger_id, (metadata, version) in (ledgers or {}).items():
            if metadata.ledger_id != ledger_id:
                raise ValueError(f"the metadata of ledger {metadata.ledger_id} as {ledger_id}")
            self._index(metadata, version)
        for ledger_id, record in (records or {}).items():
            self._check_resumable(f"ledger {ledger_id}", record.epoch)
            self._records[ledger_id] = record

    # --- queries -------------------------------------------------------------------------

    @property
    def live_bookies(self) -> frozenset[str]:
        return frozenset(self._live)

    @property
    def workers(self) -> frozenset[str] | None:
        """Bookies known to run a replication worker (``None``: not tracked, all do)."""
        return None if self._workers is None else frozenset(self._workers)

    def state_of(self, ledger_id: int) -> ReplicaState:
        record = self._records.get(ledger_id)
        return ReplicaState.HEALTHY if record is None else record.state

    @property
    def records(self) -> dict[int, ReplicaRecord]:
        """The records of every ledger not healthy (a copy)."""
        return dict(self._records)

    @property
    def tasks_in_flight(self) -> list[ReplicateFragment]:
        tasks = [self._records[lid].task for lid in sorted(self._in_flight)]
        return [t for t in tasks if t is not None]

    def metadata(self, ledger_id: int) -> LedgerMetadata | None:
        return self._ledgers.get(ledger_id)

    # --- events --------------------------------------------------------------------------

    def start(self, now_ms: int) -> list[ReplicaEffect]:
        """Take over the persisted states: records of deleted ledgers are removed; tasks in
        flight that still apply (target live, the fragment still naming the missing bookie)
        are restamped with this epoch and sent again, the others replaced; every ledger is checked against the live bookies. Call once, first."""
        self._begin_start()
        effects: list[ReplicaEffect] = []
        for ledger_id in sorted(self._records):
            record = self._records[ledger_id]
            if ledger_id not in self._ledgers:
                del self._records[ledger_id]
                effects.append(DeleteReplicaState(ledger_id, self.epoch))
            elif record.task is None:
                self._waiting.add(ledger_id)
            elif self._still_applies(record.task):
                task = replace(record.task, epoch=self.epoch)
                self._start_task(ledger_id, task, now_ms, effects, since_ms=record.since_ms)
            else:
                self._records[ledger_id] = ReplicaRecord(
                    ReplicaState.UNDER_REPLICATED, record.epoch, record.since_ms
                )
                self._waiting.add(ledger_id)
                self._evaluate(ledger_id, now_ms, effects, force_write=True)
        for ledger_id in sorted(self._ledgers):
            self._evaluate(ledger_id, now_ms, effects)
        return effects

    def bookie_joined(self, bookie: str, now_ms: int) -> list[ReplicaEffect]:
        """A bookie registered (new, or back with its data)."""
        self._check_alive()
        if bookie in self._live:
            return []
        self._live.add(bookie)
        effects: list[ReplicaEffect] = []
        for ledger_id in sorted(self._on_bookie.get(bookie, ())):
            self._evaluate(ledger_id, now_ms, effects)
        self._fill(now_ms, effects)
        return effects

    def bookie_left(self, bookie: str, now_ms: int) -> list[ReplicaEffect]:
        """A bookie's registration vanished: its replicas count as missing, and tasks
        towards it are reassigned."""
        self._check_alive()
        if bookie not in self._live:
            return []
        self._live.discard(bookie)
        effects: list[ReplicaEffect] = []
        for ledger_id in sorted(self._in_flight):
            task = self._records[ledger_id].task
            if task is not None and task.target_bookie == bookie:
                self._stop_task(ledger_id)
                self._evaluate(ledger_id, now_ms, effects, force_write=True)
        for ledger_id in sorted(self._on_bookie.get(bookie, ())):
            self._evaluate(ledger_id, now_ms, effects)
        self._fill(now_ms, effects)
        return effects

    def racks_changed(self, racks: Mapping[str, str]) -> None:
        """The bookies' racks are now ``racks`` (a bookie labelled or placed anew); tasks
        chosen from now on follow them, tasks in flight are kept."""
        self._check_alive()
        self._racks = dict(racks)

    def workers_changed(self, workers: Iterable[str], now_ms: int) -> list[ReplicaEffect]:
        """The bookies running a replication worker are now ``workers`` (a bookie started
        with autorecovery off runs none, so it cannot be a target). Tasks towards a bookie
        whose worker went are reassigned at once, as for a departed bookie; waiting ledgers
        may get a new worker as target."""
        self._check_alive()
        new = set(workers)
        if new == self._workers:
            return []
        self._workers = new
        effects: list[ReplicaEffect] = []
        for ledger_id in sorted(self._in_flight):
            task = self._records[ledger_id].task
            if task is not None and task.target_bookie not in new:
                self._stop_task(ledger_id)
                self._evaluate(ledger_id, now_ms, effects, force_write=True)
        self._fill(now_ms, effects)
        return effects

    def ledger_changed(
        self, metadata: LedgerMetadata, version: int, now_ms: int
    ) -> list[ReplicaEffect]:
        """The metadata of a ledger was created or written (ensemble change, close,
        recovery, a worker's replacement); ``version`` is its node's version, so an older
        view arriving late is ignored."""
        self._check_alive()
        if not self._index(metadata, version):
            return []
        effects: list[ReplicaEffect] = []
        self._evaluate(metadata.ledger_id, now_ms, effects)
        return effects

    def ledger_deleted(self, ledger_id: int, now_ms: int) -> list[ReplicaEffect]:
        """The ledger is gone (trimmed or deleted): its state goes, and a task in flight
        for it is forgotten (its answer will be ignored)."""
        self._check_alive()
        metadata = self._ledgers.pop(ledger_id, None)
        self._versions.pop(ledger_id, None)
        if metadata is not None:
            self._unindex(metadata)
        effects: list[ReplicaEffect] = []
        if ledger_id in self._records:
            self._stop_task(ledger_id)
            self._forget(ledger_id, effects)
            self._fill(now_ms, effects)
        return effects

    def fragment_replicated(
        self, task: ReplicateFragment, metadata: LedgerMetadata, version: int, now_ms: int
    ) -> list[ReplicaEffect]:
        """The worker finished ``task``: the replica is on the target and ``metadata``
        (node ``version``) is what the worker wrote, or found when there was nothing to do.
        The ledger goes on with its next missing replica or becomes HEALTHY."""
        self._check_epoch(task.epoch)
        effects: list[ReplicaEffect] = []
        current = self._records.get(task.ledger_id)
        if current is None or current.task != task:
            # A repeated or superseded answer: only the metadata it carries is news.
            if self._index(metadata, version):
                self._evaluate(task.ledger_id, now_ms, effects)
            return effects
        self._stop_task(task.ledger_id)
        self._failures.pop(task.ledger_id, None)
        self._retry_at_ms.pop(task.ledger_id, None)
        self._index(metadata, version)
        self._evaluate(task.ledger_id, now_ms, effects, force_write=True)
        self._fill(now_ms, effects)
        return effects

    def fragment_failed(self, task: ReplicateFragment, now_ms: int) -> list[ReplicaEffect]:
        """The worker could not finish ``task`` (no surviving replica answered, the target
        refused, the CAS found the fragment changed): retried after the backoff."""
        self._check_epoch(task.epoch)
        current = self._records.get(task.ledger_id)
        if current is None or current.task != task:
            return []
        effects: list[ReplicaEffect] = []
        self._fail(task.ledger_id, now_ms, effects)
        self._fill(now_ms, effects)
        return effects

    def tick(self, now_ms: int) -> list[ReplicaEffect]:
        """Tasks unanswered for ``task_timeout_ms`` fail; waiting ledgers whose backoff is
        over get tasks, within the bound."""
        self._check_alive()
        effects: list[ReplicaEffect] = []
        for ledger_id in sorted(self._in_flight):
            if now_ms - self._in_flight[ledger_id] >= self.policy.task_timeout_ms:
                self._fail(ledger_id, now_ms, effects)
        self._fill(now_ms, effects)
        return effects

    # --- internals -----------------------------------------------------------------------

    def _index(self, metadata: LedgerMetadata, version: int) -> bool:
        """Keep ``metadata`` if newer than what is known; ``True`` if it was."""
        ledger_id = metadata.ledger_id
        if version <= self._versions.get(ledger_id, -1):
            return False
        old = self._ledgers.get(ledger_id)
        if old is not None:
            self._unindex(old)
        self._ledgers[ledger_id] = metadata
        self._versions[ledger_id] = version
        for _, ensemble in metadata.ensembles:
            for bookie in ensemble:
                self._on_bookie.setdefault(bookie, set()).add(ledger_id)
        return True

    def _unindex(self, metadata: LedgerMetadata) -> None:
        for _, ensemble in metadata.ensembles:
            for bookie in ensemble:
                ledgers = self._on_bookie.get(bookie)
                if ledgers is not None:
                    ledgers.discard(metadata.ledger_id)
                    if not ledgers:
                        del self._on_bookie[bookie]

    def _put(self, ledger_id: int, record: ReplicaRecord, effects: list[ReplicaEffect]) -> None:
        self._records[ledger_id] = record
        if record.state is ReplicaState.UNDER_REPLICATED:
            self._waiting.add(ledger_id)
        else:
            self._waiting.discard(ledger_id)
        effects.append(WriteReplicaState(ledger_id, record, self.epoch))

    def _forget(self, ledger_id: int, effects: list[ReplicaEffect]) -> None:
        del self._records[ledger_id]
        self._waiting.discard(ledger_id)
        self._failures.pop(ledger_id, None)
        self._retry_at_ms.pop(ledger_id, None)
        effects.append(DeleteReplicaState(ledger_id, self.epoch))

    def _start_task(
        self,
        ledger_id: int,
        task: ReplicateFragment,
        now_ms: int,
        effects: list[ReplicaEffect],
        since_ms: int,
    ) -> None:
        self._put(
            ledger_id,
            ReplicaRecord(ReplicaState.REREPLICATING, self.epoch, since_ms, task),
            effects,
        )
        self._in_flight[ledger_id] = now_ms
        self._target_load[task.target_bookie] = self._target_load.get(task.target_bookie, 0) + 1
        effects.append(task)

    def _stop_task(self, ledger_id: int) -> None:
        """Forget the task in flight (in memory; the caller writes the new state)."""
        if self._in_flight.pop(ledger_id, None) is None:
            return
        record = self._records[ledger_id]
        assert record.task is not None
        target = record.task.target_bookie
        self._target_load[target] -= 1
        if not self._target_load[target]:
            del self._target_load[target]
        self._records[ledger_id] = ReplicaRecord(
            ReplicaState.UNDER_REPLICATED, record.epoch, record.since_ms
        )
        self._waiting.add(ledger_id)

    def _fail(self, ledger_id: int, now_ms: int, effects: list[ReplicaEffect]) -> None:
        failures = self._failures.get(ledger_id, 0) + 1
        self._failures[ledger_id] = failures
        self._retry_at_ms[ledger_id] = now_ms + self.policy.backoff_ms(failures)
        self._stop_task(ledger_id)
        self._evaluate(ledger_id, now_ms, effects, force_write=True)

    def _evaluate(
        self, ledger_id: int, now_ms: int, effects: list[ReplicaEffect], force_write: bool = False
    ) -> None:
        """Bring the ledger's state in line with its metadata and the live bookies, and give
        it a task if it needs one and may have one. ``force_write``: the in-memory record
        changed without being written (a task stopped), so an unchanged UNDER_REPLICATED
        state is written too."""
        metadata = self._ledgers.get(ledger_id)
        record = self._records.get(ledger_id)
        if metadata is None:
            return
        if ledger_id in self._in_flight:
            return  # its answer (or timeout) re-evaluates it
        missing = missing_replicas(metadata, self._live)
        if not missing:
            if record is not None:
                self._forget(ledger_id, effects)
            return
        since_ms = now_ms if record is None else record.since_ms
        task = self._next_task(ledger_id, metadata, now_ms)
        if task is not None:
            self._start_task(ledger_id, task, now_ms, effects, since_ms=since_ms)
        elif record is None or force_write:
            self._put(
                ledger_id,
                ReplicaRecord(ReplicaState.UNDER_REPLICATED, self.epoch, since_ms),
                effects,
            )

    def _next_task(
        self, ledger_id: int, metadata: LedgerMetadata, now_ms: int
    ) -> ReplicateFragment | None:
        if len(self._in_flight) >= self.policy.tasks_in_flight_max:
            return None
        if now_ms < self._retry_at_ms.get(ledger_id, now_ms):
            return None
        for fragment, index in missing_replicas(metadata, self._live):
            candidates = replacements(
                self.policy.placement,
                sorted(self._targets(), key=lambda b: (self._target_load.get(b, 0), b)),
                fragment.ensemble,
                index,
                metadata.write_quorum,
                self._racks,
            )
            if candidates:
                return ReplicateFragment(
                    ledger_id=ledger_id,
                    first_entry=fragment.first_entry,
                    bookie_index=index,
                    missing_bookie=fragment.ensemble[index],
                    target_bookie=candidates[0],
                    epoch=self.epoch,
                    attempt=self._failures.get(ledger_id, 0) + 1,
                )
        return None

    def _still_applies(self, task: ReplicateFragment) -> bool:
        """``task`` may be sent again as it is: its target lives and the fragment still
        names the missing bookie (a worker may have finished it after the last record was
        written), and not the target."""
        metadata = self._ledgers.get(task.ledger_id)
        fragment = None if metadata is None else fragment_at(metadata, task.first_entry)
        return (
            task.target_bookie in self._targets()
            and task.missing_bookie not in self._live
            and fragment is not None
            and fragment.sealed
            and task.bookie_index < len(fragment.ensemble)
            and fragment.ensemble[task.bookie_index] == task.missing_bookie
            and task.target_bookie not in fragment.ensemble
        )

    def _targets(self) -> set[str]:
        """Bookies a task may target: live, and running a worker if workers are tracked."""
        return set(self._live) if self._workers is None else self._live & self._workers

    def _fill(self, now_ms: int, effects: list[ReplicaEffect]) -> None:
        """Give waiting ledgers tasks while slots are free, in ledger-id order."""
        for ledger_id in sorted(self._waiting):
            if len(self._in_flight) >= self.policy.tasks_in_flight_max:
                return
            self._evaluate(ledger_id, now_ms, effects)
