"""The controller election shell: a broker runs for controller; the winner resumes the
persisted bundle states and applies the state machine's effects as fenced metadata writes.

:class:`ControllerElection` wraps :class:`~magnetar.metadata.election.LeaderElection` at
``/controller`` (ephemeral, holding the broker id) with ``/controller_epoch`` incremented in
the same transaction. On winning it reads, from the metadata store:

* ``<state_root>/namespaces/<quoted tenant/namespace>`` — a namespace's bundle boundaries;
* ``<state_root>/bundles/<quoted tenant/namespace/range>`` — one :class:`BundleRecord`;
* the children of ``registrations_path`` — the broker ids registered now;

builds a :class:`BundleStateMachine` at its epoch and runs :meth:`~BundleStateMachine.start`.
Beside it, for autorecovery, it reads

* ``<state_root>/ledgers/L<id>`` — one :class:`ReplicaRecord` per ledger not healthy;
* ``/ledgers/L<id>`` — every ledger's metadata and node version (undecodable ones are
  logged and skipped: they are not the controller's to judge);
* the bookies registered now (:func:`registered_bookies`, read-only ones included: their
  data is still there), their racks (re-read when a bookie joins and when the rack
  placement changes: :meth:`ControllerElection.racks_changed`), and the ones running a
  replication worker (``/autorecovery/workers``: only they are targets);

and builds and starts a :class:`ReplicaStateMachine` at the same epoch. Its record writes go
into the same fenced transactions; its :class:`ReplicateFragment` commands are delivered by
the record itself (the target bookie's worker watches the records), so nothing is sent.
(Names are percent-quoted into one path segment so each directory is flat.)

Each event method calls the machine, then applies the returned metadata writes in one
:func:`~magnetar.metadata.election.fenced_multi` on the epoch node (the epoch check alone
when there are only commands), and only then hands the broker commands to the
:class:`CommandSink`, in order. Events are applied one at a time. The check and the
delivery are not atomic, so brokers must still refuse commands of an older epoch.

Once a write fails, or the election reports the leadership lost, this object is done: the
machine's memory may be ahead of the store, so every later call raises
:class:`ControllerDeposed`; make a new :class:`ControllerElection` (on a new store if the
session was lost), whose campaign reloads from the store. A deposed controller's write
fails with :class:`FencedByEpoch` (another controller won) or :class:`SessionExpired`, and
changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import quote, unquote

from magnetar.broker.controller.bundle_state import BundleRecord, CorruptRecord
from magnetar.broker.controller.bundle_state_machine import (
    BrokerCommand,
    BundleStateMachine,
    ControllerEffect,
    ControllerPolicy,
    DeleteBundleState,
    WriteBundleState,
    WriteNamespaceBundles,
)
from magnetar.broker.controller.bundles import BundleId, NamespaceBundles
from magnetar.broker.controller.errors import ControllerDeposed
from magnetar.broker.controller.load import LoadReport
from magnetar.broker.controller.replica_state import ReplicaRecord
from magnetar.broker.controller.replica_state_machine import (
    DeleteReplicaState,
    ReplicaEffect,
    ReplicaPolicy,
    ReplicaStateMachine,
    WriteReplicaState,
)
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError
from magnetar.common.names import TopicName
from magnetar.ledger.client import bookie_racks
from magnetar.ledger.metadata import (
    AVAILABLE_PATH,
    LEDGERS_PATH,
    READONLY_NAME,
    LedgerMetadata,
)
from magnetar.ledger.replication_task import (
    WORKERS_PATH,
    ReplicateFragment,
    ReplicationOutcome,
    ledger_id_of,
    record_name,
)
from magnetar.metadata import path as paths
from magnetar.metadata.election import LeaderElection, Leadership
from magnetar.metadata.store import (
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NodeExists,
    NotFound,
    Op,
    SetOp,
)

CONTROLLER_PATH = "/controller"
STATE_ROOT = "/controller_state"
REGISTRATIONS_PATH = "/loadbalance/brokers"
"""Where brokers register (ephemeral node named by broker id), as Pulsar's brokers do."""

log = logging.getLogger(__name__)


async def registered_bookies(store: MetadataStore) -> set[str]:
    """The bookies registered now, writable (``/ledgers/available/<id>``) or read-only
    (``/ledgers/available/readonly/<id>``): a read-only bookie still serves its replicas."""
    found: set[str] = set()
    for path in (AVAILABLE_PATH, paths.join(AVAILABLE_PATH, READONLY_NAME)):
        with contextlib.suppress(NotFound):
            found.update(n for n in await store.children(path) if n != READONLY_NAME)
    return found


async def read_ledger(store: MetadataStore, ledger_id: int) -> tuple[LedgerMetadata, int] | None:
    """A ledger's metadata and node version; ``None`` if it is gone. Raises ``ValueError``
    (and ``KeyError``, ``TypeError``) for metadata it cannot decode."""
    try:
        got = await store.get(paths.join(LEDGERS_PATH, record_name(ledger_id)))
    except NotFound:
        return None
    return LedgerMetadata.from_bytes(got.value), got.stat.version


async def list_ledgers(store: MetadataStore) -> set[int]:
    """The ids of every ledger with metadata under ``/ledgers``."""
    try:
        names = await store.children(LEDGERS_PATH)
    except NotFound:
        return set()
    return {i for i in map(ledger_id_of, names) if i is not None}


class CommandSink(Protocol):
    """Where the controller's commands to brokers go (the broker transport)."""

    async def send(self, command: BrokerCommand) -> None:
        """Deliver ``command`` to ``command.broker``; a lost command is resent by a later
        tick, so delivery may be best effort."""
        ...


def _segment(name: str) -> str:
    return quote(name, safe="")


class ControllerElection:
    """One broker's candidacy for controller, and its controller once it wins.

    Not re-entrant: one :meth:`campaign`; after :class:`ControllerDeposed` make a new one.
    """

    def __init__(
        self,
        store: MetadataStore,
        broker_id: str,
        *,
        commands: CommandSink,
        clock: Clock,
        policy: ControllerPolicy | None = None,
        replica_policy: ReplicaPolicy | None = None,
        path: str = CONTROLLER_PATH,
        state_root: str = STATE_ROOT,
        registrations_path: str = REGISTRATIONS_PATH,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.election = LeaderElection(store, path, broker_id.encode())
        self._commands = commands
        self._clock = clock
        self._policy = policy or ControllerPolicy()
        self._replica_policy = replica_policy or ReplicaPolicy()
        self.state_root = paths.validate(state_root)
        self.namespaces_path = paths.join(self.state_root, "namespaces")
        self.bundles_path = paths.join(self.state_root, "bundles")
        self.ledgers_path = paths.join(self.state_root, "ledgers")
        self.registrations_path = paths.validate(registrations_path)
        self._machine: BundleStateMachine | None = None
        self._replicas: ReplicaStateMachine | None = None
        self._existing: set[str] = set()
        self._broken = False
        self._lock = asyncio.Lock()

    # --- paths ---------------------------------------------------------------------------

    def namespace_path(self, namespace: str) -> str:
        return paths.join(self.namespaces_path, _segment(namespace))

    def bundle_path(self, bundle: BundleId) -> str:
        return paths.join(self.bundles_path, _segment(bundle.name))

    def replica_path(self, ledger_id: int) -> str:
        return paths.join(self.ledgers_path, record_name(ledger_id))

    # --- leadership ----------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        return self.election.epoch

    @property
    def machine(self) -> BundleStateMachine:
        """The state machine of this controller; raises :class:`ControllerDeposed` before
        winning and once done."""
        self._check_usable()
        assert self._machine is not None
        return self._machine

    @property
    def replicas(self) -> ReplicaStateMachine:
        """The ledger replica state machine of this controller; raises
        :class:`ControllerDeposed` before winning and once done."""
        self._check_usable()
        assert self._replicas is not None
        return self._replicas

    async def campaign(self) -> int:
        """Compete until this broker is controller, resume the persisted states, apply the
        effects of taking over; return the epoch. Raises what
        :meth:`LeaderElection.campaign` raises, :class:`CorruptRecord` for persisted state
        it cannot decode, and :class:`ControllerDeposed` if taking over was fenced; after
        any of these it has resigned, so another candidate may win."""
        epoch = await self.election.campaign()
        try:
            async with self._lock:
                machine = await self._resume(epoch)
                replicas = await self._resume_replicas(epoch)
                # Both at once: a reader between the two awaits must not see half a controller.
                self._machine, self._replicas = machine, replicas
                now_ms = self._clock.now_ms()
                await self._apply([*self._machine.start(now_ms), *self._replicas.start(now_ms)])
        except BaseException:
            # Leading without a usable state would block every other candidate.
            self._broken = True
            await self.election.resign()
            raise
        return epoch

    async def _resume(self, epoch: int) -> BundleStateMachine:
        """Read the persisted states and the registrations; raises :class:`CorruptRecord`
        (or :class:`UnknownBundle`) on state this controller cannot trust."""
        for directory in (self.namespaces_path, self.bundles_path):
            with contextlib.suppress(NodeExists):
                await self.store.create(directory, b"")
        namespaces = [
            await self._load_namespace(n) for n in await self._children(self.namespaces_path)
        ]
        records: dict[BundleId, BundleRecord] = {}
        for name in await self._children(self.bundles_path):
            path = paths.join(self.bundles_path, name)
            try:
                bundle = BundleId.parse(unquote(name))
            except MagnetarError as exc:
                raise CorruptRecord(f"{path}: not a bundle name: {exc}") from None
            try:
                records[bundle] = BundleRecord.from_bytes((await self.store.get(path)).value)
            except CorruptRecord as exc:
                raise CorruptRecord(f"{path}: {exc}") from None
            self._existing.add(path)
        live = await self._children(self.registrations_path)
        return BundleStateMachine(
            epoch,
            policy=self._policy,
            namespaces=namespaces,
            records=records,
            live_brokers=live,
        )

    async def _resume_replicas(self, epoch: int) -> ReplicaStateMachine:
        """Read the persisted replica records, every ledger's metadata and the registered
        bookies; raises :class:`CorruptRecord` for a record it cannot decode."""
        with contextlib.suppress(NodeExists):
            await self.store.create(self.ledgers_path, b"")
        records: dict[int, ReplicaRecord] = {}
        for name in await self._children(self.ledgers_path):
            path = paths.join(self.ledgers_path, name)
            ledger_id = ledger_id_of(name)
            if ledger_id is None:
                raise CorruptRecord(f"{path}: not a ledger record name")
            try:
                records[ledger_id] = ReplicaRecord.from_bytes((await self.store.get(path)).value)
            except NotFound:
                continue
            except CorruptRecord as exc:
                raise CorruptRecord(f"{path}: {exc}") from None
            self._existing.add(path)
        ledgers: dict[int, tuple[LedgerMetadata, int]] = {}
        for ledger_id in sorted(await list_ledgers(self.store)):
            try:
                found = await read_ledger(self.store, ledger_id)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("ledger %d: undecodable metadata, not watched: %s", ledger_id, exc)
                continue
            if found is not None:
                ledgers[ledger_id] = found
        live = await registered_bookies(self.store)
        return ReplicaStateMachine(
            epoch,
            policy=self._replica_policy,
            ledgers=ledgers,
            records=records,
            live_bookies=live,
            workers=await self._children(WORKERS_PATH),
            racks=await bookie_racks(self.store, live),
        )

    async def resign(self) -> None:
        """Stop being controller (idempotent)."""
        self._broken = True
        await self.election.resign()

    # --- events (see BundleStateMachine for each) ----------------------------------------

    async def broker_joined(self, broker: str) -> None:
        await self._run(lambda m, now: m.broker_joined(broker, now))

    async def broker_left(self, broker: str) -> None:
        await self._run(lambda m, now: m.broker_left(broker, now))

    async def load_reported(self, report: LoadReport) -> None:
        await self._run(lambda m, now: m.load_reported(report, now))

    async def namespace_added(self, bundles: NamespaceBundles) -> None:
        await self._run(lambda m, now: m.namespace_added(bundles, now))

    async def lookup(self, topic: TopicName | str) -> str | None:
        """Make sure ``topic``'s bundle is (being) assigned; return its owner if OWNED."""
        await self._run(lambda m, now: m.lookup(topic, now))
        bundle = self.machine.bundle_of(topic)
        return None if bundle is None else self.machine.owner_of(bundle)

    async def ownership_acquired(self, bundle: BundleId, broker: str, epoch: int) -> None:
        await self._run(lambda m, now: m.ownership_acquired(bundle, broker, epoch, now))

    async def ownership_released(self, bundle: BundleId, broker: str, epoch: int) -> None:
        await self._run(lambda m, now: m.ownership_released(bundle, broker, epoch, now))

    async def ownership_lost(self, bundle: BundleId, broker: str) -> None:
        await self._run(lambda m, now: m.ownership_lost(bundle, broker, now))

    async def unload(self, bundle: BundleId) -> None:
        await self._run(lambda m, now: m.unload_requested(bundle, now))

    async def split(self, bundle: BundleId) -> None:
        await self._run(lambda m, now: m.split_requested(bundle, now))

    async def tick(self) -> None:
        await self._run(lambda m, now: m.tick(now))
        await self._run_replicas(lambda m, now: m.tick(now))

    # --- replica events (see ReplicaStateMachine for each) -------------------------------

    async def bookie_joined(self, bookie: str) -> None:
        # racks re-read first: the newcomer's label, and placements set since
        racks = await bookie_racks(self.store, {*self.replicas.live_bookies, bookie})
        self.replicas.racks_changed(racks)
        await self._run_replicas(lambda m, now: m.bookie_joined(bookie, now))

    async def racks_changed(self) -> None:
        """The rack placement changed: the live bookies' racks are read again; the tasks
        chosen from now on follow them (tasks in flight are kept)."""
        racks = await bookie_racks(self.store, self.replicas.live_bookies)
        self.replicas.racks_changed(racks)

    async def bookie_left(self, bookie: str) -> None:
        await self._run_replicas(lambda m, now: m.bookie_left(bookie, now))

    async def workers_changed(self, workers: frozenset[str]) -> None:
        await self._run_replicas(lambda m, now: m.workers_changed(workers, now))

    async def ledger_changed(self, metadata: LedgerMetadata, version: int) -> None:
        await self._run_replicas(lambda m, now: m.ledger_changed(metadata, version, now))

    async def ledger_deleted(self, ledger_id: int) -> None:
        await self._run_replicas(lambda m, now: m.ledger_deleted(ledger_id, now))

    async def replication_answered(
        self, outcome: ReplicationOutcome, current: tuple[LedgerMetadata, int] | None
    ) -> None:
        """A worker's answer, with the ledger's metadata read after it (``None``: the
        ledger is gone). An answer to the task in flight for that ledger counts even if an
        earlier controller stamped it (this one restamped the same work when it resumed);
        any other answer only brings the metadata."""

        def answer(machine: ReplicaStateMachine, now_ms: int) -> list[ReplicaEffect]:
            ledger_id = outcome.task.ledger_id
            record = machine.records.get(ledger_id)
            task = None if record is None else record.task
            if current is None:
                return machine.ledger_deleted(ledger_id, now_ms)
            if task is None or not task.same_work(outcome.task):
                return machine.ledger_changed(current[0], current[1], now_ms)
            if outcome.ok:
                return machine.fragment_replicated(task, current[0], current[1], now_ms)
            log.warning("re-replication of %s failed: %s", task, outcome.error)
            return machine.fragment_failed(task, now_ms)

        await self._run_replicas(answer)

    # --- internals -----------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self.election.leadership is Leadership.DEPOSED and self._machine is not None:
            self._machine.epoch_changed((self.election.epoch or 0) + 1)
            if self._replicas is not None:
                self._replicas.epoch_changed((self.election.epoch or 0) + 1)
            self._broken = True
        if self._machine is None or self._replicas is None or self._broken:
            raise ControllerDeposed(f"{self.broker_id} is not the controller")

    async def _run(self, event: _Event) -> None:
        async with self._lock:
            machine = self.machine
            await self._apply(event(machine, self._clock.now_ms()))

    async def _run_replicas(self, event: _ReplicaEvent) -> None:
        async with self._lock:
            machine = self.replicas
            await self._apply(event(machine, self._clock.now_ms()))

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.children(path)
        except NotFound:
            return []

    async def _load_namespace(self, name: str) -> NamespaceBundles:
        path = paths.join(self.namespaces_path, name)
        value = (await self.store.get(path)).value
        try:
            bundles = NamespaceBundles.from_names(unquote(name), json.loads(value)["boundaries"])
        except (ValueError, KeyError, TypeError, MagnetarError) as exc:
            raise CorruptRecord(f"{path}: undecodable bundle boundaries: {exc}") from None
        self._existing.add(path)
        return bundles

    def _ops(
        self, effects: Sequence[ControllerEffect | ReplicaEffect], epoch: int
    ) -> tuple[list[Op], set[str]]:
        existing = set(self._existing)
        ops: list[Op] = []

        def write(path: str, value: bytes) -> None:
            ops.append(SetOp(path, value) if path in existing else CreateOp(path, value))
            existing.add(path)

        for effect in effects:
            if isinstance(effect, WriteBundleState):
                write(self.bundle_path(effect.bundle), effect.record.to_bytes())
            elif isinstance(effect, WriteNamespaceBundles):
                body = {"boundaries": effect.bundles.to_names(), "epoch": epoch}
                write(self.namespace_path(effect.bundles.namespace), json.dumps(body).encode())
            elif isinstance(effect, DeleteBundleState):
                path = self.bundle_path(effect.bundle)
                if path in existing:
                    ops.append(DeleteOp(path))
                    existing.discard(path)
            elif isinstance(effect, WriteReplicaState):
                write(self.replica_path(effect.ledger_id), effect.record.to_bytes())
            elif isinstance(effect, DeleteReplicaState):
                path = self.replica_path(effect.ledger_id)
                if path in existing:
                    ops.append(DeleteOp(path))
                    existing.discard(path)
        return ops, existing

    async def _apply(self, effects: Sequence[ControllerEffect | ReplicaEffect]) -> None:
        epoch = self.election.epoch
        assert epoch is not None
        ops, existing = self._ops(effects, epoch)
        if effects:
            # With commands but no writes, the multi is the epoch check alone: a deposed
            # controller that has not noticed yet sends nothing.
            try:
                await self.election.fenced_multi(epoch, ops)
            except MetadataStoreError as exc:
                # Whatever the cause, the machine is now ahead of the store: stop here.
                self._broken = True
                if self._machine is not None:
                    self._machine.epoch_changed(epoch + 1)
                if self._replicas is not None:
                    self._replicas.epoch_changed(epoch + 1)
                raise ControllerDeposed(
                    f"controller write at epoch {epoch} failed: {type(exc).__name__}: {exc}"
                ) from exc
            self._existing = existing
        for effect in effects:
            if isinstance(effect, BrokerCommand):
                await self._commands.send(effect)
            elif isinstance(effect, ReplicateFragment):
                # Delivered by its record, written above: the target's worker watches it.
                log.info("replication task %s", effect)


class _Event(Protocol):
    def __call__(self, machine: BundleStateMachine, now_ms: int) -> list[ControllerEffect]: ...


class _ReplicaEvent(Protocol):
    def __call__(self, machine: ReplicaStateMachine, now_ms: int) -> list[ReplicaEffect]: ...
