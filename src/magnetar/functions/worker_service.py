"""A whole Functions Worker: membership and leadership (:class:`FunctionsWorker`) plus its
managers — metadata (:class:`FunctionRegistry` fed by a :class:`TopicTail` of ``metadata``),
scheduler (leader only), runtime (:class:`RuntimeManager` fed by a tail of ``assignments``) —
and the operations the REST API exposes.

Writes: only the leader writes ``metadata``, ``assignments`` and ``packages`` (fenced exclusive
producers). A definition change is checked against the leader's registry and written under
one lock, then the leader waits until its own tail has read the record back
(read-your-writes), so the answer to a REST call reflects it. A change that reaches a
follower is forwarded to the leader by the REST layer (:meth:`WorkerService.leader_url`).

Leader readiness: a new leader writes a marker record (key ``__leader__``) to ``metadata``
and ``assignments`` through its fenced producers and waits until its tails read both back:
it then knows everything an earlier leader wrote, and only then changes anything
(:attr:`WorkerService.leader_ready`).

Scheduling runs on the leader after every definition change, every
``schedule_interval_ms`` (membership is read from the coordination topic's stats then),
and when a departed worker's grace period ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from magnetar.admin_client import AdminClient, AdminConflict, AdminError, AdminNotFound
from magnetar.client import MessageId
from magnetar.client import Timeout as ClientTimeout
from magnetar.common.clock import Clock, SystemClock, Timer
from magnetar.common.errors import InvalidTopicName, MagnetarError, ProducerFenced
from magnetar.common.names import TopicName
from magnetar.functions.admin_stats import TopicStatsReader
from magnetar.functions.assignment_table import AssignmentTable, assignment_payload
from magnetar.functions.connectors.connector import InvalidConnectorConfig
from magnetar.functions.connectors.registry import builtin_name
from magnetar.functions.errors import (
    FunctionExists,
    FunctionNotFound,
    InvalidRequest,
    LeaderUnavailable,
    MembershipUnavailable,
    NotLeader,
    TriggerTimeout,
)
from magnetar.functions.function_config import ComponentKind, FunctionConfig
from magnetar.functions.function_registry import (
    MARKER_KEY_PREFIX,
    FunctionRecord,
    FunctionRegistry,
    PackageRef,
)
from magnetar.functions.instance import INPUT_MESSAGE_ID_PROPERTY
from magnetar.functions.instance_status import InstanceStatus
from magnetar.functions.leadership import LeadershipChanged
from magnetar.functions.membership_view import MembershipView
from magnetar.functions.package_store import fetch_package, package_id_for, write_package
from magnetar.functions.runtime_manager import RuntimeFactory, RuntimeManager, runtime_factory
from magnetar.functions.scheduler import AssignmentChange, Scheduler
from magnetar.functions.topic_tail import TopicTail
from magnetar.functions.worker import FunctionsWorker
from magnetar.functions.worker_config import WorkerConfig
from magnetar.functions.worker_info import WorkerInfo

log = logging.getLogger(__name__)

LEADER_MARKER_KEY = f"{MARKER_KEY_PREFIX}leader__"
LEADER_POLL_MS = 100
"""How often a worker looks for the leader while the broker names none (an election)."""


def default_runtime_factory() -> RuntimeFactory:
    return runtime_factory("thread")


class WorkerService:
    """One worker with all its managers. ``runtime_factory`` runs instances (default: the
    thread runtime)."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        runtime_factory: RuntimeFactory | None = None,
        clock: Clock | None = None,
        topic_stats: TopicStatsReader | None = None,
    ) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self.worker = FunctionsWorker(config, clock=self._clock, topic_stats=topic_stats)
        self.registry = FunctionRegistry()
        self.assignments = AssignmentTable()
        self.scheduler = Scheduler(config.reschedule_grace_ms)
        client = self.worker.client
        self._metadata_tail = TopicTail(
            client, config.metadata_topic, self._on_metadata, self._clock
        )
        self._assignments_tail = TopicTail(
            client, config.assignments_topic, self._on_assignment, self._clock
        )
        work_dir = Path(config.work_dir)
        self.runtime = RuntimeManager(
            worker_id=config.worker.worker_id,
            factory=runtime_factory or default_runtime_factory(),
            fetch_package=self._fetch_package,
            service_url=config.service_url,
            admin_url=config.admin_url,
            work_dir=work_dir,
            client_credentials=config.client_credentials,
        )
        self._auth_headers = config.client_credentials.http_headers()
        self._admin = AdminClient(
            config.admin_url,
            timeout_s=config.admin_request_timeout_ms / 1000,
            headers=self._auth_headers,
        )
        self._work_dir = work_dir
        self._write_lock = asyncio.Lock()
        self._ready_term = 0
        self._members: tuple[WorkerInfo, ...] = ()
        self._wake = asyncio.Event()
        self._ready_event = asyncio.Event()
        self._reconcile_wanted = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._timer: Timer | None = None
        self._last_compaction_s = self._clock.monotonic_s()
        self._closed = False

    # ------------------------------------------------------------ state

    @property
    def worker_id(self) -> str:
        return self.config.worker.worker_id

    @property
    def leader_ready(self) -> bool:
        """Whether this worker leads, holds the leader's producers and has read both
        leader-written topics to their end in this term."""
        return self.worker.holds_assignments and self._ready_term == self.worker.term

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Read the topics, then join the worker cluster. Raises the client's or broker's
        error (e.g. the namespace of a topic does not exist)."""
        try:
            await self._metadata_tail.start()
            await self._assignments_tail.start()
            self.worker.add_leadership_listener(self._on_leadership)
            await self.worker.start()
        except BaseException:
            await self.close()
            raise
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._leader_loop(), name=f"leader-loop {self.worker_id}"),
            loop.create_task(self._runtime_loop(), name=f"runtime-loop {self.worker_id}"),
        ]

    async def close(self) -> None:
        """Leave the cluster and stop this worker's instances. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.runtime.close()
        await self._metadata_tail.close()
        await self._assignments_tail.close()
        await self.worker.close()

    async def __aenter__(self) -> WorkerService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ membership

    async def members(self) -> MembershipView:
        """Raises :class:`MembershipUnavailable`."""
        return await self.worker.members()

    async def leader_url(self) -> str | None:
        """Where a change should go: None when this worker leads (or the broker has made it
        leader and it is about to hear so), else the leader's HTTP base URL. Waits (at most
        ``write_timeout_ms``) while the broker names no leader, or names this worker before
        it was told. Raises :class:`LeaderUnavailable` when that wait runs out."""
        deadline_s = self._clock.monotonic_s() + self.config.write_timeout_ms / 1000
        reason = "no worker leads right now"
        while True:
            if self.worker.is_leader:
                return None
            try:
                leader = (await self.members()).leader
            except MembershipUnavailable as exc:
                leader, reason = None, f"the leader cannot be found: {exc}"
            if self.worker.is_leader:
                return None
            if leader is not None and leader != self.config.worker:
                return f"http://{leader.host}:{leader.port}"
            if self._clock.monotonic_s() >= deadline_s:
                raise LeaderUnavailable(f"{reason}; try again")
            await self._clock.sleep(LEADER_POLL_MS / 1000)

    # ------------------------------------------------------------ definitions (leader)

    async def create(
        self, config: FunctionConfig, package: tuple[str, bytes] | None
    ) -> FunctionRecord:
        """Store a new definition (and its package). Raises :class:`FunctionExists`,
        :class:`InvalidRequest`, :class:`NotLeader`, :class:`LeaderUnavailable`."""
        async with self._write_lock:
            await self._await_ready()
            if self.registry.get(config.fqfn) is not None:
                raise FunctionExists(f"{_title(config.kind)} {config.name} already exists")
            await self._check_namespace(config.tenant, config.namespace)
            ref = await self._store_package(config, package, 1)
            if ref is None and config.kind is ComponentKind.FUNCTION:
                raise InvalidRequest("Function package is not provided")
            if ref is None:
                _check_builtin(config)
            if ref is not None:
                config = replace(config, package=ref.file_name)
            record = FunctionRecord(config=config, package=ref)
            await self._write_record(record.fqfn, record.to_payload())
            return record

    async def update(
        self, config: FunctionConfig, package: tuple[str, bytes] | None
    ) -> FunctionRecord:
        """Replace a definition (keeping its package unless a new one comes); its instances
        restart. Raises :class:`FunctionNotFound`, :class:`InvalidRequest`, ..."""
        async with self._write_lock:
            await self._await_ready()
            old = self._existing(config.fqfn, config.kind)
            ref = await self._store_package(config, package, old.generation + 1)
            if ref is None:
                ref = old.package
            if ref is None:
                _check_builtin(config)
            if ref is not None:
                config = replace(config, package=ref.file_name)
            record = old.next(config=config, package=ref, generation=old.generation + 1)
            await self._write_record(record.fqfn, record.to_payload())
            return record

    async def delete(self, fqfn: str, kind: ComponentKind) -> None:
        async with self._write_lock:
            await self._await_ready()
            self._existing(fqfn, kind)
            await self._write_record(fqfn, b"")

    async def set_running(
        self, fqfn: str, kind: ComponentKind, instance_id: int | None, running: bool
    ) -> None:
        """``start``/``stop`` one instance, or all (``instance_id`` None)."""
        async with self._write_lock:
            await self._await_ready()
            old = self._existing(fqfn, kind)
            ids = self._instance_ids(old, instance_id)
            stopped = set(old.stopped_instances)
            stopped = stopped - ids if running else stopped | ids
            if frozenset(stopped) == old.stopped_instances:
                return
            record = old.next(stopped_instances=frozenset(stopped))
            await self._write_record(fqfn, record.to_payload())

    async def restart(self, fqfn: str, kind: ComponentKind, instance_id: int | None) -> None:
        """Restart the running instances (one, or all): a new generation of the definition;
        stopped instances are started too, as Pulsar's restart does."""
        async with self._write_lock:
            await self._await_ready()
            old = self._existing(fqfn, kind)
            ids = self._instance_ids(old, instance_id)
            record = old.next(
                generation=old.generation + 1, stopped_instances=old.stopped_instances - ids
            )
            await self._write_record(fqfn, record.to_payload())

    async def rebalance(self) -> int:
        """Spread every instance anew over the members; returns how many moved."""
        async with self._write_lock:
            await self._await_ready()
            view = await self.members()
            changes = self.scheduler.rebalance(
                self._wanted_instances(),
                self.assignments.snapshot(),
                [m.worker_id for m in view.members],
            )
            await self._write_assignments(changes)
            return len(changes)

    async def drain(self, worker_id: str) -> int:
        """Move ``worker_id``'s instances to other members; it gets none until it leaves."""
        async with self._write_lock:
            await self._await_ready()
            view = await self.members()
            if worker_id not in {m.worker_id for m in view.members}:
                raise FunctionNotFound(f"Worker {worker_id} is not a member of this cluster")
            self.scheduler.drain(worker_id)
            return await self._schedule_locked(view)

    # ------------------------------------------------------------ reads (any worker)

    def get(self, fqfn: str, kind: ComponentKind) -> FunctionRecord:
        return self._existing(fqfn, kind)

    def local_status(self, instance_key: str) -> InstanceStatus | None:
        """The status of an instance assigned to this worker (None when it is not)."""
        if self.assignments.owner(instance_key) != self.worker_id:
            return None
        status = self.runtime.status(instance_key)
        if status is not None:
            return status
        fqfn, _, index = instance_key.rpartition(":")
        record = self.registry.get(fqfn)
        stopped = record is not None and int(index) in record.stopped_instances
        return InstanceStatus(
            instance_id=int(index),
            running=False,
            worker_id=self.worker_id,
            error="" if stopped else "starting",
        )

    async def status(self, fqfn: str, kind: ComponentKind, instance_id: int) -> InstanceStatus:
        """One instance's status: from this worker's runtime, or asked from the worker the
        instance is assigned to."""
        record = self._existing(fqfn, kind)
        self._instance_ids(record, instance_id)
        key = f"{fqfn}:{instance_id}"
        owner = self.assignments.owner(key)
        if owner is None:
            return InstanceStatus(instance_id=instance_id, running=False, error="not assigned")
        if owner == self.worker_id:
            local = self.local_status(key)
            assert local is not None
            return local
        return await self._remote_status(record, instance_id, owner)

    async def statuses(self, fqfn: str, kind: ComponentKind) -> list[InstanceStatus]:
        record = self._existing(fqfn, kind)
        return list(
            await asyncio.gather(
                *(self.status(fqfn, kind, i) for i in range(record.config.parallelism))
            )
        )

    async def trigger(
        self, fqfn: str, kind: ComponentKind, value: bytes, topic: str | None, timeout_ms: int
    ) -> bytes | None:
        """Publish ``value`` to one of the function's inputs and return what the function
        published for it on its output (None when it has no output topic). Raises
        :class:`InvalidRequest` for a topic that is not an input (or none given when there
        are several), :class:`TriggerTimeout` when no output came within ``timeout_ms``."""
        record = self._existing(fqfn, kind)
        inputs = record.config.inputs
        if topic is None:
            if len(inputs) != 1:
                raise InvalidRequest("the function has several inputs (or a pattern): give a topic")
            topic = inputs[0]
        else:
            try:
                topic = str(TopicName.parse(topic))
            except InvalidTopicName as exc:
                raise InvalidRequest(str(exc)) from None
            if topic not in inputs:
                raise InvalidRequest(f"{topic} is not an input of {record.config.name}")
        client = self.worker.client
        output = record.config.output
        reader = None
        if output is not None:
            reader = await client.create_reader(
                output, MessageId.latest, subscription_role_prefix="trigger"
            )
        try:
            producer = await client.create_producer(topic, batching_enabled=False)
            try:
                sent = await producer.send(value)
            finally:
                with contextlib.suppress(MagnetarError):
                    await producer.close()
            if reader is None:
                return None
            deadline_s = self._clock.monotonic_s() + timeout_ms / 1000
            while True:
                remaining_ms = int((deadline_s - self._clock.monotonic_s()) * 1000)
                if remaining_ms <= 0:
                    raise TriggerTimeout(
                        f"{record.config.name} published nothing for the value within "
                        f"{timeout_ms} ms"
                    )
                try:
                    msg = await reader.read_next(remaining_ms)
                except ClientTimeout:
                    continue
                if _answers(msg.properties().get(INPUT_MESSAGE_ID_PROPERTY), sent):
                    return msg.data()
        finally:
            if reader is not None:
                with contextlib.suppress(MagnetarError):
                    await reader.close()

    # ------------------------------------------------------------ internals

    async def _await_ready(self) -> None:
        """Raises :class:`NotLeader` on a follower; on a leader still catching up, waits
        for it (at most ``write_timeout_ms``), then raises :class:`LeaderUnavailable`."""
        if not self.worker.is_leader:
            raise NotLeader(f"worker {self.worker_id} is not the leader")
        if self.leader_ready:
            return
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready_event.wait(), self.config.write_timeout_ms / 1000)
        if not self.leader_ready:
            raise LeaderUnavailable(
                f"worker {self.worker_id} leads but is still reading the cluster's state; try again"
            )

    def _existing(self, fqfn: str, kind: ComponentKind) -> FunctionRecord:
        record = self.registry.get(fqfn)
        if record is None or record.kind is not kind:
            name = fqfn.rsplit("/", 1)[-1]
            raise FunctionNotFound(f"{_title(kind)} {name} doesn't exist")
        return record

    @staticmethod
    def _instance_ids(record: FunctionRecord, instance_id: int | None) -> set[int]:
        if instance_id is None:
            return set(range(record.config.parallelism))
        if not 0 <= instance_id < record.config.parallelism:
            raise FunctionNotFound(
                f"{_title(record.kind)} {record.config.name} has no instance {instance_id} "
                f"(parallelism {record.config.parallelism})"
            )
        return {instance_id}

    async def _check_namespace(self, tenant: str, namespace: str) -> None:
        try:
            names = await asyncio.to_thread(self._admin.namespaces, tenant)
        except AdminNotFound:
            raise InvalidRequest(f"Tenant {tenant} does not exist") from None
        except AdminError as exc:
            raise LeaderUnavailable(f"the namespaces of {tenant} cannot be read ({exc})") from None
        if f"{tenant}/{namespace}" not in names:
            raise InvalidRequest(f"Namespace {tenant}/{namespace} does not exist")

    async def _store_package(
        self, config: FunctionConfig, package: tuple[str, bytes] | None, generation: int
    ) -> PackageRef | None:
        if package is None:
            return None
        file_name, data = package
        if not data:
            raise InvalidRequest("the uploaded package is empty")
        try:
            return await write_package(
                self.worker.packages_producer,
                package_id_for(config.fqfn, data, generation),
                file_name,
                data,
                self.config.package_bytes_max,
            )
        except ProducerFenced:
            self.worker.note_fenced()
            raise

    async def _write_record(self, key: str, payload: bytes) -> None:
        mid = await self.worker.write_metadata(key, payload)
        if not await self._metadata_tail.wait_for(mid.position, self.config.write_timeout_ms):
            raise LeaderUnavailable(
                f"the change of {key} was written but not read back within "
                f"{self.config.write_timeout_ms} ms"
            )
        self._wake.set()

    async def _write_assignments(self, changes: list[AssignmentChange]) -> None:
        last = None
        for change in changes:
            payload = b"" if change.worker_id is None else assignment_payload(change.worker_id)
            last = await self.worker.write_assignment(change.instance_key, payload)
            log.info(
                "leader %s assigned %s to %s",
                self.worker_id,
                change.instance_key,
                change.worker_id or "(removed)",
            )
        if last is not None:
            await self._assignments_tail.wait_for(last.position, self.config.write_timeout_ms)

    def _wanted_instances(self) -> list[str]:
        return [key for record in self.registry for key in record.instance_keys()]

    async def _schedule_locked(self, view: MembershipView) -> int:
        self._members = view.members
        changes = self.scheduler.plan(
            self._wanted_instances(),
            self.assignments.snapshot(),
            [m.worker_id for m in view.members],
            int(self._clock.monotonic_s() * 1000),
        )
        await self._write_assignments(changes)
        return len(changes)

    async def _become_ready(self) -> None:
        term = self.worker.term
        marker = json.dumps({"leader": self.config.worker.consumer_name, "term": term}).encode()
        mid_m = await self.worker.write_metadata(LEADER_MARKER_KEY, marker)
        mid_a = await self.worker.write_assignment(LEADER_MARKER_KEY, marker)
        timeout_ms = self.config.write_timeout_ms
        if not (
            await self._metadata_tail.wait_for(mid_m.position, timeout_ms)
            and await self._assignments_tail.wait_for(mid_a.position, timeout_ms)
        ):
            raise LeaderUnavailable("the leader's topics were not read to their end in time")
        if self.worker.term == term:
            self._ready_term = term
            self._ready_event.set()
            log.info(
                "worker %s leads (term %d) and has read the cluster's state", self.worker_id, term
            )

    async def _leader_loop(self) -> None:
        interval_s = self.config.schedule_interval_ms / 1000
        while True:
            self._wake.clear()
            try:
                await self._leader_step()
            except (MagnetarError, OSError) as exc:
                log.warning("leader %s: scheduling failed (%s); trying again", self.worker_id, exc)
            self._timer = self._clock.call_later(interval_s, self._wake.set)
            await self._wake.wait()
            self._timer.cancel()

    async def _leader_step(self) -> None:
        if not self.worker.holds_assignments:
            return
        if not self.leader_ready:
            await self._become_ready()
            if not self.leader_ready:
                return
        async with self._write_lock:
            if not self.leader_ready:
                return
            await self._schedule_locked(await self.members())
        now_s = self._clock.monotonic_s()
        if now_s - self._last_compaction_s >= self.config.compaction_interval_ms / 1000:
            self._last_compaction_s = now_s
            await self.compact()

    async def compact(self) -> None:
        """Ask the broker to compact ``metadata`` and ``assignments`` (in the background;
        a compaction already running is left alone)."""
        for topic in (self.config.metadata_topic, self.config.assignments_topic):
            try:
                await asyncio.to_thread(self._admin.trigger_compaction, topic)
            except AdminConflict:
                pass  # one is running already
            except AdminError as exc:
                log.warning("compacting %s: %s", topic, exc)

    async def _runtime_loop(self) -> None:
        while True:
            await self._reconcile_wanted.wait()
            self._reconcile_wanted.clear()
            try:
                await self.runtime.reconcile(self.registry, self.assignments)
            except Exception:
                log.exception("worker %s: running its instances failed", self.worker_id)

    def _on_metadata(self, key: str, payload: bytes) -> None:
        if self.registry.apply(key, payload):
            self._reconcile_wanted.set()
            self._wake.set()

    def _on_assignment(self, key: str, payload: bytes) -> None:
        if self.assignments.apply(key, payload):
            self._reconcile_wanted.set()

    def _on_leadership(self, change: LeadershipChanged) -> None:
        if not change.is_leader:
            self._ready_term = 0
        self._ready_event.clear()
        self._wake.set()

    async def _fetch_package(self, ref: PackageRef) -> Path:
        return await fetch_package(
            self.worker.client, self.config.packages_topic, ref, self._work_dir
        )

    async def _remote_status(
        self, record: FunctionRecord, instance_id: int, owner: str
    ) -> InstanceStatus:
        try:
            members = (await self.members()).members
        except MembershipUnavailable:
            members = self._members
        target = next((m for m in members if m.worker_id == owner), None)
        if target is None:
            return InstanceStatus(
                instance_id=instance_id,
                running=False,
                worker_id=owner,
                error=f"worker {owner} is not a member of the cluster",
            )
        c = record.config
        path = (
            f"/admin/v3/{c.kind.value}s/{c.tenant}/{c.namespace}/{c.name}/{instance_id}"
            "/status?local=true"
        )
        other = AdminClient(
            f"http://{target.host}:{target.port}",
            timeout_s=self.config.admin_request_timeout_ms / 1000,
            headers=self._auth_headers,
        )
        try:
            body = await asyncio.to_thread(other.get, path)
        except AdminError as exc:
            body = exc
        if not isinstance(body, dict):
            return InstanceStatus(
                instance_id=instance_id,
                running=False,
                worker_id=owner,
                error=f"worker {owner} did not answer ({body})",
            )
        return status_from_json(body, owner)


def status_from_json(body: dict[str, Any], owner: str) -> InstanceStatus:
    """An instance status as another worker answered it (Pulsar's instance-status JSON,
    either bare or wrapped in ``{"instanceId", "status"}``)."""
    inner = body.get("status", body) if isinstance(body.get("status"), dict) else body
    return InstanceStatus(
        instance_id=int(body.get("instanceId", inner.get("instanceId", 0)) or 0),
        running=bool(inner.get("running", False)),
        worker_id=str(inner.get("workerId") or owner),
        error=str(inner.get("error") or ""),
        num_restarts=int(inner.get("numRestarts") or 0),
        num_received=int(inner.get("numReceived") or 0),
        num_successfully_processed=int(inner.get("numSuccessfullyProcessed") or 0),
        num_user_exceptions=int(inner.get("numUserExceptions") or 0),
        num_system_exceptions=int(inner.get("numSystemExceptions") or 0),
        average_latency_ms=float(inner.get("averageLatency") or 0.0),
        last_invocation_time_ms=int(inner.get("lastInvocationTime") or 0),
    )


def _answers(property_value: str | None, sent: MessageId) -> bool:
    """Whether an output's ``__pfn_input_msg_id__`` names the message ``sent``."""
    if not property_value:
        return False
    try:
        got = MessageId.deserialize(base64.b64decode(property_value))
    except ValueError:
        return False
    return got.position == sent.position


def _title(kind: ComponentKind) -> str:
    return kind.value.capitalize()


def _check_builtin(config: FunctionConfig) -> None:
    """A source or sink without a package must name a built-in connector."""
    try:
        builtin_name(config)
    except InvalidConnectorConfig as exc:
        raise InvalidRequest(str(exc)) from None
