"""The controller inside a broker process: run for ``/controller``, and while leading feed
the bundle state machine from the metadata store.

:class:`ControllerRunner` loops: a new :class:`ControllerElection` campaigns; once it wins,
:meth:`ControllerRunner._lead` watches

* ``/loadbalance/brokers`` — registrations: ``broker_joined`` / ``broker_left``, and each
  newer load report in them (:mod:`magnetar.broker.load_report`): ``load_reported``;
* ``/admin/policies/<tenant>/<ns>`` — every namespace gets its default bundles
  (``namespace_added``), so each bundle is assigned before any lookup asks;
* the cluster's namespace isolation policies (:mod:`.isolation`): read at every sync
  while leading, and every ``tick_interval_ms`` while campaigning, into
  :attr:`ControllerRunner.isolation`, which the machine's bundle assignment consults;
* ``/namespace/<tenant>/<ns>/<range>`` — ownership nodes: a node that appeared is the
  holder's acknowledgement (``ownership_acquired``), one that vanished its release
  (``ownership_released``). Both are facts observed by this controller now, so they are
  stamped with its own epoch; the broker fenced its node creation on the command's epoch.
  An OWNED bundle whose broker holds no node in the same reading is ``ownership_lost``
  (reassigned): this is how a controller resuming records of an older epoch gets bundles
  of restarted brokers (same ids, no nodes, the old epoch refused) served again. A
  RELEASING bundle whose broker holds no node was released before this controller looked
  (``ownership_released``).

It re-reads all three on every change and every ``tick_interval_ms`` (then also calling
``tick``: resends, assignment, load shedding). Beside the bundles it runs autorecovery: a
:class:`~.replica_feed.ReplicaFeed` gets the notifications under ``/ledgers``,
``/autorecovery`` and ``/bookies`` and feeds the replica state machine bookie registrations,
their racks, ledger metadata, the registered replication workers and their answers in the
same loop. The
command channel is the bundle record the election writes (brokers watch
``/controller_state/bundles``), so the :class:`CommandSink` delivers nothing itself. When the election reports the controller deposed, or a fenced
write fails, the runner drops that election and campaigns again with a new one, which
reloads the persisted state; after the store's session is lost it stops (the broker
process ends on a lost session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import replace

from magnetar.broker.controller.bundle_state import BundleState
from magnetar.broker.controller.bundle_state_machine import BrokerCommand, ControllerPolicy
from magnetar.broker.controller.bundles import BundleId, BundleRange, NamespaceBundles
from magnetar.broker.controller.election import REGISTRATIONS_PATH, ControllerElection
from magnetar.broker.controller.errors import NamespaceLimitReached
from magnetar.broker.controller.isolation import (
    BrokerIsolation,
    IsolationPolicies,
    isolation_policies_path,
)
from magnetar.broker.controller.replica_feed import WATCHED_PREFIXES, ReplicaFeed
from magnetar.broker.controller.replica_state import ReplicaState
from magnetar.broker.controller.replica_state_machine import ReplicaPolicy
from magnetar.broker.load_report import report_of
from magnetar.broker.policies import NAMESPACE_POLICIES_ROOT
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError, ServiceNotReady
from magnetar.common.names import NamespaceName
from magnetar.common.task_crash import report_crash
from magnetar.metadata import path as paths
from magnetar.metadata.notifications import NotificationStream
from magnetar.metadata.store import MetadataStore, MetadataStoreError, NotFound, SessionExpired

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"
DEFAULT_TICK_INTERVAL_MS = 1_000
DEFAULT_CAMPAIGN_RETRY_MS = 1_000


class _RecordIsTheCommand:
    """The bundle record written before a command is sent is the command itself."""

    async def send(self, command: BrokerCommand) -> None:
        log.debug("command %s (delivered by its bundle record)", command)


class ControllerRunner:
    """One broker's candidacy for controller, for the life of the broker."""

    def __init__(
        self,
        store: MetadataStore,
        broker_id: str,
        *,
        clock: Clock,
        policy: ControllerPolicy | None = None,
        replica_policy: ReplicaPolicy | None = None,
        tick_interval_ms: int = DEFAULT_TICK_INTERVAL_MS,
        campaign_retry_ms: int = DEFAULT_CAMPAIGN_RETRY_MS,
        cluster: str = "standalone",
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self._clock = clock
        self.isolation = BrokerIsolation()
        """The namespace isolation policies in force (of ``cluster``)."""
        self._isolation_path = isolation_policies_path(cluster)
        self._isolation_value: bytes | None = None
        self._leading = False
        """In :meth:`_lead`: its syncs read the isolation policies (the follower need not)."""
        self._policy = replace(
            policy or ControllerPolicy(), broker_candidates=self.isolation.candidates
        )
        self._replica_policy = replica_policy
        self.tick_interval_ms = tick_interval_ms
        self.campaign_retry_ms = campaign_retry_ms
        self.election: ControllerElection | None = None
        self._task: asyncio.Task[None] | None = None
        self._owners: dict[BundleId, str] = {}
        self._reported: dict[str, int] = {}
        """The latest load report fed to the machine per broker (its ``reported_ms``)."""
        self._namespace_limit_logged = False
        self._replica_feed: ReplicaFeed | None = None

    @property
    def epoch(self) -> int | None:
        """This broker's controller epoch while it leads, else ``None``."""
        election = self.election
        if election is None or not election.election.is_leader:
            return None
        return election.epoch

    def bundle_states(self) -> dict[str, int]:
        """Bundles per state while this broker leads (empty otherwise)."""
        election = self.election
        if self.epoch is None or election is None:
            return {}
        try:
            records = election.machine.records
        except MagnetarError:
            return {}
        counts = {state.value: 0 for state in BundleState}
        for record in records.values():
            counts[record.state.value] += 1
        return counts

    def ledger_states(self) -> dict[str, int]:
        """Ledgers per replica state other than Healthy while this broker leads (empty
        otherwise)."""
        election = self.election
        if self.epoch is None or election is None:
            return {}
        try:
            records = election.replicas.records
        except MagnetarError:
            return {}
        counts = {s.value: 0 for s in ReplicaState if s is not ReplicaState.HEALTHY}
        for record in records.values():
            counts[record.state.value] += 1
        return counts

    def replication_tasks_in_flight(self) -> int | None:
        """Re-replication tasks in flight while this broker leads, else ``None``."""
        election = self.election
        if self.epoch is None or election is None:
            return None
        try:
            return len(election.replicas.tasks_in_flight)
        except MagnetarError:
            return None

    async def unload(self, bundle: BundleId) -> None:
        """Move ``bundle`` off its broker (to another when one lives). Raises
        :class:`~magnetar.common.errors.ServiceNotReady` unless this broker is the
        controller, and what :meth:`BundleStateMachine.unload_requested` raises
        (:class:`UnknownBundle`, :class:`BundleBusy`)."""
        election = self.election
        if self.epoch is None or election is None:
            raise ServiceNotReady(f"{self.broker_id} is not the controller")
        await election.unload(bundle)

    async def split(self, bundle: BundleId) -> None:
        """Split ``bundle`` in two halves of its hash range (an owned bundle is released
        first; both halves are then assigned). Raises
        :class:`~magnetar.common.errors.ServiceNotReady` unless this broker is the
        controller, and what :meth:`BundleStateMachine.split_requested` raises
        (:class:`UnknownBundle`, :class:`BundleBusy`, :class:`InvalidBundle`)."""
        election = self.election
        if self.epoch is None or election is None:
            raise ServiceNotReady(f"{self.broker_id} is not the controller")
        await election.split(bundle)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller")
        self._task.add_done_callback(report_crash(log))

    async def close(self) -> None:
        """Stop campaigning; resign if leading (another broker takes over at once)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.election is not None:
            with contextlib.suppress(MagnetarError):
                await self.election.resign()

    async def _run(self) -> None:
        follower = asyncio.create_task(self._follow_isolation(), name="isolation policies")
        try:
            await self._campaign_forever()
        finally:
            follower.cancel()

    async def _follow_isolation(self) -> None:
        """Keep :attr:`isolation` current while campaigning, so a broker that wins assigns
        its first bundles by the policies in force (not by those of its start). While
        leading, every sync reads them: one read per tick is enough."""
        while True:
            if not self._leading:
                try:
                    await self._read_isolation()
                except SessionExpired:
                    return
            await self._clock.sleep(self.tick_interval_ms / 1000)

    async def _campaign_forever(self) -> None:
        while True:
            election = ControllerElection(
                self.store,
                self.broker_id,
                commands=_RecordIsTheCommand(),
                clock=self._clock,
                policy=self._policy,
                replica_policy=self._replica_policy,
            )
            self.election = election
            try:
                epoch = await election.campaign()
                log.info("%s is the controller at epoch %d", self.broker_id, epoch)
                await self._lead(election)
            except SessionExpired:
                log.warning("controller candidacy ends: the metadata session expired")
                return
            except MagnetarError as exc:
                log.warning("controller at %s stops: %s", self.broker_id, exc)
            finally:
                with contextlib.suppress(MagnetarError):
                    await election.resign()
            await self._clock.sleep(self.campaign_retry_ms / 1000)

    async def _lead(self, election: ControllerElection) -> None:
        self._owners = {}
        self._reported = {}
        feed = self._replica_feed = ReplicaFeed(self.store, clock=self._clock)
        changed = asyncio.Event()
        streams: list[NotificationStream] = []
        pumps: list[asyncio.Task[None]] = []

        async def pump(stream: NotificationStream) -> None:
            async for notification in stream:
                if feed.notified(notification):
                    changed.set()

        deposed = asyncio.create_task(election.election.wait_deposed())
        self._leading = True
        try:
            for prefix in (
                REGISTRATIONS_PATH,
                NAMESPACE_POLICIES_ROOT,
                OWNERSHIP_ROOT,
                self._isolation_path,
                *WATCHED_PREFIXES,
            ):
                stream = self.store.notifications(prefix)
                streams.append(stream)
                await stream.wait_ready()
                pumps.append(asyncio.create_task(pump(stream)))
            next_tick_s = self._clock.monotonic_s()
            while not deposed.done():
                changed.clear()
                await self._sync(election)
                await feed.sync(election)
                if self._clock.monotonic_s() >= next_tick_s:
                    await election.tick()
                    next_tick_s = self._clock.monotonic_s() + self.tick_interval_ms / 1000
                timer = self._clock.call_later(
                    max(next_tick_s - self._clock.monotonic_s(), 0.0), changed.set
                )
                try:
                    waiter = asyncio.create_task(changed.wait())
                    await asyncio.wait({waiter, deposed}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                finally:
                    timer.cancel()
            log.warning("%s is no longer the controller (epoch %s)", self.broker_id, election.epoch)
        finally:
            self._leading = False
            deposed.cancel()
            for stream in streams:
                stream.close()
            for task in pumps:
                task.cancel()

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.children(path)
        except NotFound:
            return []

    async def _read_isolation(self) -> None:
        """Take the stored isolation policies (none stored: none in force; a failed read
        keeps the last ones)."""
        try:
            value = (await self.store.get(self._isolation_path)).value
        except NotFound:
            value = b""
        except SessionExpired:
            raise
        except MetadataStoreError as exc:
            log.warning("reading the namespace isolation policies failed: %s", exc)
            return
        if value != self._isolation_value:
            self._isolation_value = value
            self.isolation.policies = IsolationPolicies.from_stored(value)
            log.info("namespace isolation policies: %s", sorted(self.isolation.policies.by_name))

    async def _sync(self, election: ControllerElection) -> None:
        """Feed the machine what changed in registrations, namespaces, isolation policies and
        ownership nodes."""
        await self._read_isolation()
        # Namespaces are listed before registrations: every broker registered before a
        # namespace was created is then known when its bundles are assigned (listed the
        # other way round, a namespace created just after a broker joined could be read
        # with registrations from before the join, and go to the older brokers only).
        created: list[str] = []
        for tenant in await self._children(NAMESPACE_POLICIES_ROOT):
            for local in await self._children(paths.join(NAMESPACE_POLICIES_ROOT, tenant)):
                try:
                    namespace = str(NamespaceName.parse(f"{tenant}/{local}"))
                except MagnetarError:
                    continue
                if election.machine.namespace(namespace) is None:
                    created.append(namespace)

        live = set(await self._children(REGISTRATIONS_PATH))
        known = election.machine.live_brokers
        for broker in sorted(live - known):
            await election.broker_joined(broker)
        for broker in sorted(known - live):
            await election.broker_left(broker)
            self._reported.pop(broker, None)
        for broker in sorted(live):
            try:
                got = await self.store.get(paths.join(REGISTRATIONS_PATH, broker))
            except NotFound:
                continue
            report = report_of(broker, got.value)
            if report is not None and report.reported_ms > self._reported.get(broker, -1):
                await election.load_reported(report)
                self._reported[broker] = report.reported_ms

        for namespace in created:
            try:
                await election.namespace_added(
                    NamespaceBundles.default(namespace, self._policy.default_bundle_count)
                )
            except NamespaceLimitReached as exc:
                if not self._namespace_limit_logged:
                    log.error("namespace %s gets no bundles: %s", namespace, exc)
                    self._namespace_limit_logged = True

        owners: dict[BundleId, str] = {}
        for ns in election.machine.namespaces:
            base = paths.join(OWNERSHIP_ROOT, ns.namespace)
            for range_name in await self._children(base):
                try:
                    bundle = BundleId(ns.namespace, BundleRange.parse(range_name))
                    got = await self.store.get(paths.join(base, range_name))
                    owners[bundle] = _broker_id_of(got.value)
                except NotFound:
                    continue
                except (MagnetarError, ValueError) as exc:
                    log.error("ignoring the ownership node %s/%s: %s", base, range_name, exc)
        epoch = election.machine.epoch
        for bundle, broker in sorted(self._owners.items()):
            if owners.get(bundle) != broker:
                await election.ownership_released(bundle, broker, epoch)
        for bundle, broker in sorted(owners.items()):
            if self._owners.get(bundle) != broker:
                await election.ownership_acquired(bundle, broker, epoch)
        self._owners = owners
        # An OWNED record whose broker holds no node (resumed from an older epoch after a
        # restart, or its node gone with an old session of a re-registered id) is served
        # by nobody and would stay so: reassign it. A RELEASING record whose broker holds
        # no node is a release already done: a controller that resumed the record after
        # the broker let go never saw the node vanish (its table of owners starts empty),
        # and without this would wait for that release forever, the bundle unserved.
        for bundle, record in sorted(election.machine.records.items()):
            if record.broker is None or owners.get(bundle) == record.broker:
                continue
            if record.state is BundleState.OWNED:
                await election.ownership_lost(bundle, record.broker)
            elif record.state is BundleState.RELEASING:
                await election.ownership_released(bundle, record.broker, epoch)


def _broker_id_of(value: bytes) -> str:
    body = json.loads(value)
    if not isinstance(body, dict) or not isinstance(body.get("brokerId"), str):
        raise ValueError("no brokerId")
    return str(body["brokerId"])
