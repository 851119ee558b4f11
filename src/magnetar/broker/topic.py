"""A persistent topic (or one partition of a partitioned topic) owned by this broker.

Owns its managed ledger, its producers (admitted by
:class:`~magnetar.broker.producer_access.ProducerAccess`), its subscriptions, and, when
deduplication is on, a :class:`~magnetar.broker.deduplication.DeduplicationState` whose
snapshot is stored in the metadata store at ``/magnetar/dedup/<managed ledger name>``
together with the last position it covers; on open the snapshot is restored and entries
written after that position are replayed into it, so dedup survives restarts and crashes.

The producer topic epoch (moved by exclusive producers, reference §6.2) is stored at
``/magnetar/topic-epoch/<managed ledger name>`` = ``{"topic_epoch": N}`` before the producer
that moved it is answered, and read back when the topic opens (unless the open created its
managed ledger), so a producer fenced before a restart stays fenced after it (Java keeps it
in the managed ledger's properties).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer
from magnetar.broker.deduplication import DeduplicationState, SnapshotError, is_checked_send
from magnetar.broker.policies import (
    BacklogQuotaPolicy,
    EffectivePolicies,
    broker_defaults,
    ml_config_for,
    resolve,
)
from magnetar.broker.producer import Producer
from magnetar.broker.producer_access import (
    AccessMode,
    CloseProducer,
    FailWaitingProducer,
    ProducerAccess,
    ProducerEffect,
    ProducerKey,
    ProducerReady,
    ProducerRequest,
)
from magnetar.broker.rate_limit import (
    DispatchRateLimiter,
    PublishRateLimiter,
    SubscribeRateLimiter,
)
from magnetar.broker.replicated_subscription import set_replicated
from magnetar.broker.stats import SubscriptionMeters, TopicMeters
from magnetar.broker.subscription import Subscription
from magnetar.common.errors import (
    ConsumerBusy,
    MagnetarError,
    ProducerBlockedQuotaExceeded,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerFenced,
    ProtocolError,
    TopicTerminated,
    wire_error,
)
from magnetar.common.lazy_lock import lazy_lock
from magnetar.common.names import TopicName
from magnetar.managed_ledger.errors import CursorNotFound
from magnetar.managed_ledger.managed_ledger import ManagedLedger, RunCallback
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata.store import NotFound
from magnetar.protocol import (
    Entry,
    Error,
    InitialPosition,
    MessageId,
    ProducerSuccess,
    SchemaType,
    Subscribe,
    Success,
)
from magnetar.protocol import Producer as ProducerCommand

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

DEDUP_ROOT = "/magnetar/dedup"
TOPIC_EPOCH_ROOT = "/magnetar/topic-epoch"


_NO_WAITING: dict[ProducerKey, tuple[ServerConnection, ProducerCommand, Producer]] = {}
"""The waiting producers of every topic with none (never added to); most have none."""


class Topic:
    """Created by :meth:`BrokerService.get_topic`; one instance per topic per broker."""

    # Slots: thousands of idle topics per broker; a dict per instance is ~1.6 KB of each.
    __slots__ = (
        "__weakref__",
        "_batch_size_of",
        "_dedup_position",
        "_dedup_saved",
        "_dedup_switch",
        "_dedup_task",
        "_epoch_lock",
        "_epoch_saved",
        "_last_entry_batch_size",
        "_loaded_last_entry",
        "_sub_lock",
        "_waiting",
        "access",
        "closed",
        "created_ms",
        "dedup",
        "dispatch_limiter",
        "full_name",
        "may_hold_markers",
        "meters",
        "ml",
        "name",
        "namespace_publish_limiter",
        "partition_index",
        "policies",
        "producers",
        "publish_limited",
        "publish_limiter",
        "service",
        "subscribe_limiter",
        "subscription_meters",
        "subscriptions",
    )

    def __init__(
        self,
        service: BrokerService,
        name: TopicName,
        ml: ManagedLedger,
        policies: EffectivePolicies | None = None,
    ) -> None:
        self.service = service
        self.policies = policies or resolve(broker_defaults(service.config), None)
        """What applies now; replaced by :meth:`apply_policies` when an admin changes it."""
        self.publish_limiter = PublishRateLimiter()
        """The topic's publish rate (policy ``publishRate``): over it, the publishing
        connection stops being read for a while (``magnetar.broker.rate_limit``)."""
        self.namespace_publish_limiter = service.namespace_publish_limiters.setdefault(
            str(name.namespace_name), PublishRateLimiter()
        )
        """The namespace's ``namespacePublishRate``, shared with its other topics here."""
        self.dispatch_limiter = DispatchRateLimiter()
        """The topic's dispatch rate (policy ``dispatchRate``), shared by its subscriptions."""
        self.subscribe_limiter = SubscribeRateLimiter()
        """SUBSCRIBEs per client address (policy ``subscribeRate``): over it, a SUBSCRIBE
        waits until the rate allows it."""
        self.publish_limited = False
        """Whether any publish rate (topic, namespace, per producer) is set: without one, a
        SEND reads no clock and touches no limiter (set with the limiters)."""
        self.name = name
        self.full_name = name.full_name
        self.partition_index = name.partition_index
        self.ml = ml
        self.access = ProducerAccess()
        self._epoch_saved: int | None = None
        self._epoch_lock: asyncio.Lock | None = None
        """Made at first use (:func:`lazy_lock`), as ``_dedup_switch``."""
        self.producers: dict[ProducerKey, Producer] = {}
        self._configure_limiters(self.policies)
        self._waiting: dict[ProducerKey, tuple[ServerConnection, ProducerCommand, Producer]] = (
            _NO_WAITING
        )
        """Producers queued for exclusive access (the shared empty table, never added to,
        until the first waits)."""
        self.subscriptions: dict[str, Subscription] = {}
        self._sub_lock = asyncio.Lock()
        self._dedup_switch: asyncio.Lock | None = None
        self.dedup: DeduplicationState | None = None
        self._dedup_position: Position | None = None
        self._dedup_saved: Position | None = None
        self._dedup_task: asyncio.Task[None] | None = None
        self._loaded_last_entry: bytes | None = None
        """The last entry as read at load (before this broker appended any)."""
        self._batch_size_of: bytes | None = None
        self._last_entry_batch_size: int | None = None
        self.closed = False
        self.may_hold_markers = False
        """Whether marker entries may be in the log (replicated subscriptions run here):
        the dispatchers then look for them (:mod:`magnetar.broker.marker_filter`)."""
        self.meters = TopicMeters(service.clock, service.meter_sampler)
        self.created_ms = service.clock.now_ms()
        self.subscription_meters: dict[str, SubscriptionMeters] = {}
        """Per subscription name (kept across the Subscription objects of one name)."""
        ml.expiry_listener = self.count_expired

    def meters_of_subscription(self, name: str) -> SubscriptionMeters:
        """The meters of subscription ``name``, made at first use (by a consumer, an expiry
        or stats) and kept across the Subscription objects of that name."""
        meters = self.subscription_meters.get(name)
        if meters is None:
            meters = self.subscription_meters[name] = SubscriptionMeters(
                self.service.clock, self.service.meter_sampler
            )
        return meters

    def count_expired(self, subscription: str, messages: int) -> None:
        """``messages`` of ``subscription`` expired (message TTL, or an admin expiry):
        stats' ``msgRateExpired``, ``totalMsgExpired`` and ``lastExpireTimestamp``."""
        meters = self.meters_of_subscription(subscription)
        meters.expired.record(messages)
        meters.last_expire_ms = self.service.clock.now_ms()

    @classmethod
    async def open(
        cls,
        service: BrokerService,
        name: TopicName,
        ml: ManagedLedger,
        policies: EffectivePolicies | None = None,
    ) -> Topic:
        """The topic over ``ml``, with its stored state loaded. The topic owns ``ml`` from
        here on: if loading fails or is cancelled, ``ml`` is closed before this raises (no
        managed ledger stays open without an owner)."""
        topic = cls(service, name, ml, policies)
        try:
            await topic._load_last_entry()
            await topic._load_topic_epoch()
            if topic.policies.deduplication_enabled:
                await topic._load_dedup()
            for hook in service.topic_hooks:
                await hook.topic_loaded(topic)
        except BaseException:
            await topic._abandon()
            raise
        return topic

    async def _abandon(self) -> None:
        """Loading failed: stop what it started and close the managed ledger, without
        storing anything (the state is not fully loaded). Finishes even if the caller is
        cancelled again meanwhile."""
        self.closed = True
        if self._dedup_task is not None:
            self._dedup_task.cancel()
        closing = asyncio.get_running_loop().create_task(self._release())
        self.service.track(closing)
        try:
            await asyncio.shield(closing)
        except Exception as exc:  # the load's own error is the one to raise
            log.warning("%s: closing after a failed load: %s", self.full_name, exc)

    async def _release(self) -> None:
        for hook in self.service.topic_hooks:  # a hook may have started work at load
            await hook.topic_closing(self)
        await self.ml.close()

    # --- policies ------------------------------------------------------------------------

    def _configure_limiters(self, policies: EffectivePolicies) -> None:
        """Give the rate limiters the rates ``policies`` set (at load and on every change)."""
        now_s = self.service.clock.monotonic_s()
        self.publish_limiter.configure(policies.publish_rate, now_s)
        self.namespace_publish_limiter.configure(policies.namespace_publish_rate, now_s)
        for producer in self.producers.values():
            producer.publish_limiter.configure(policies.producer_publish_rate, now_s)
        self.publish_limited = (
            policies.publish_rate.limited
            or policies.namespace_publish_rate.limited
            or policies.producer_publish_rate.limited
        )
        self.dispatch_limiter.configure(policies.dispatch_rate, now_s)
        self.subscribe_limiter.configure(policies.subscribe_rate)

    def apply_policies(self, policies: EffectivePolicies) -> None:
        """Take a changed policy into effect on this live topic: retention, TTL and backlog
        quota and offload (the managed ledger reads its config at each maintenance round;
        the offloader follows the offload policy's driver), quorums of
        ledgers created from now on, deduplication on/off, and dispatch limits."""
        old, self.policies = self.policies, policies
        self._configure_limiters(policies)
        self.ml.config = ml_config_for(self.ml.config, policies)
        self.ml.offloader = self.service.offloaders.get(policies.offload.driver)
        if isinstance(self.ml.storage, LedgerClientStorage):
            self.ml.storage = self.service.ledger_storage_for(policies)
        if policies.deduplication_enabled != old.deduplication_enabled:
            self.service.spawn(self._switch_dedup())
        for sub in list(self.subscriptions.values()):
            sub.wake()
        for hook in self.service.topic_hooks:
            hook.policies_applied(self)

    async def _switch_dedup(self) -> None:
        async with lazy_lock(self, "_dedup_switch"):
            enabled = self.policies.deduplication_enabled
            if self.closed or enabled == (self.dedup is not None):
                return
            if enabled:
                await self._load_dedup()
                for producer in self.producers.values():
                    assert self.dedup is not None
                    self.dedup.producer_added(producer.name)
                return
            if self._dedup_task is not None:
                self._dedup_task.cancel()
                self._dedup_task = None
            self.dedup = None
            # a stale snapshot must not come back if dedup is switched on again later
            with contextlib.suppress(NotFound):
                await self.service.store.delete(self._dedup_path)
            self._dedup_position = self._dedup_saved = None

    async def _load_last_entry(self) -> None:
        last = self.ml.last_confirmed
        if last[1] < 0:
            return
        data = await self.ml.read_range(last[0], last[1], last[1], read_ahead=False)
        if data:
            self._loaded_last_entry = data[0]

    @property
    def last_entry_batch_size(self) -> int | None:
        """``num_messages_in_batch`` of the last stored entry (None: not a batch, or no
        entry). Read from the entry when asked, not on every publish."""
        data = self.ml.last_added_data
        if data is None:
            data = self._loaded_last_entry
        if data is not self._batch_size_of:
            self._batch_size_of = data
            self._last_entry_batch_size = None
            if data is not None:
                with contextlib.suppress(ProtocolError):
                    self._last_entry_batch_size = Entry(data).metadata.num_messages_in_batch
        return self._last_entry_batch_size

    # --- deduplication -------------------------------------------------------------------

    @property
    def _dedup_path(self) -> str:
        return f"{DEDUP_ROOT}/{self.ml.name}"

    async def _load_dedup(self) -> None:
        state = DeduplicationState(self.service.clock)
        after: Position | None = None
        try:
            got = await self.service.store.get(self._dedup_path)
            body = json.loads(got.value)
            state.restore(body["snapshot"].encode())
            after = Position(*body["position"])
        except NotFound:
            pass
        except (SnapshotError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable dedup snapshot (%s); rebuilding", self.full_name, exc)
            state = DeduplicationState(self.service.clock)
        ledgers = self.ml.ledgers
        for seg in list(ledgers):
            if seg.entries <= 0:
                continue
            first = 0
            if after is not None:
                if seg.ledger_id < after[0]:
                    continue
                if seg.ledger_id == after[0]:
                    first = after[1] + 1
            step = 1000
            for start in range(first, seg.entries, step):
                datas = await self.ml.read_range(
                    seg.ledger_id, start, min(start + step, seg.entries) - 1, read_ahead=False
                )
                for data in datas:
                    try:
                        md = Entry(data).metadata
                        if is_checked_send(md.chunk_id, md.num_chunks_from_msg):
                            state.replay_entry(
                                md.producer_name, md.sequence_id, md.highest_sequence_id
                            )
                    except ProtocolError:
                        continue
        self.dedup = state
        self._dedup_position = ledgers.last_confirmed
        self._dedup_task = asyncio.get_running_loop().create_task(self._dedup_loop())

    def dedup_advanced(self, position: Position) -> None:
        if self._dedup_position is None or position > self._dedup_position:
            self._dedup_position = position

    async def _dedup_loop(self) -> None:
        interval_s = self.service.config.dedup_snapshot_interval_ms / 1000
        while not self.closed:
            await self.service.clock.sleep(interval_s)
            try:
                await self.save_dedup()
            except MagnetarError as exc:
                log.warning("%s: dedup snapshot failed: %s", self.full_name, exc)

    async def save_dedup(self) -> None:
        """Purge inactive producers (bounded work per call), then store the snapshot if
        anything changed. Called every ``dedup_snapshot_interval_ms`` and at close."""
        if self.dedup is None or self._dedup_position is None:
            return
        purged = self.dedup.purge_inactive()
        if not purged and self._dedup_saved == self._dedup_position:
            return
        position = self._dedup_position
        body = {"position": list(position), "snapshot": self.dedup.snapshot().decode()}
        await self.service.store.put(self._dedup_path, json.dumps(body).encode())
        self._dedup_saved = position

    def last_sequence_id(self, producer_name: str) -> int:
        return -1 if self.dedup is None else self.dedup.last_sequence_id(producer_name)

    # --- publishing ----------------------------------------------------------------------

    def publish(self, data: bytes, messages: int) -> asyncio.Future[Position]:
        """Append one entry holding ``messages`` messages; the future gives its position
        (stored by an ack quorum)."""
        self.meters.msg_in.record(messages, len(data))
        return self.ml.add_entry_nowait(data, messages)

    def publish_run(
        self,
        datas: list[bytes],
        counts: list[int],
        messages: int,
        size_bytes: int,
        callback: RunCallback,
    ) -> None:
        """:meth:`publish` of a run of entries without a future (the producers' hot path):
        ``datas[i]`` holds ``counts[i]`` messages, ``messages`` and ``size_bytes`` are
        their sums. The outcome goes to ``callback`` in pieces, in append order and never
        before this method returns (:data:`~magnetar.managed_ledger.managed_ledger.RunCallback`)."""
        self.meters.msg_in.record(messages, size_bytes)
        self.ml.add_run(datas, counts, callback)

    def last_message_id(self) -> MessageId:
        last = self.ml.last_confirmed
        batch_index = -1
        if last[1] >= 0 and self.last_entry_batch_size is not None:
            batch_index = self.last_entry_batch_size - 1
        return MessageId(last[0], last[1], self.partition_index, batch_index)

    # --- producers -----------------------------------------------------------------------

    async def add_producer(
        self, conn: ServerConnection, cmd: ProducerCommand, *, schema_version: bytes | None = None
    ) -> None:
        """Admit a producer and answer PRODUCER_SUCCESS (maybe ready=false first), carrying
        ``schema_version`` (the version of the producer's schema, checked before).
        Raises ProducerBusy / ProducerFenced, or the managed ledger's storage error while
        storage fails (see :meth:`ManagedLedger.wait_writable`)."""
        name = cmd.producer_name or self.service.new_producer_name()
        mode = AccessMode(int(cmd.producer_access_mode))
        key = ProducerKey(conn.connection_id, cmd.producer_id)
        if self.ml.is_terminated:
            raise TopicTerminated(f"Topic {self.full_name} is terminated")
        await self.ml.wait_writable()  # storage failing: refused (PersistenceError), retried
        self._check_producer_limits(key)
        admission = self.access.add(ProducerRequest(key, name, mode, cmd.epoch, cmd.topic_epoch))
        producer = Producer(
            self, conn, cmd.producer_id, name, mode, cmd.epoch, admission.topic_epoch,
            dict(cmd.metadata), schema_version, key,
        )  # fmt: skip
        self._apply_effects(admission.effects)
        if not admission.ready:
            if self._waiting is _NO_WAITING:
                self._waiting = {}
            self._waiting[key] = (conn, cmd, producer)
            conn.queued_producers[cmd.producer_id] = producer
            conn.send_command(producer.success_response(cmd.request_id, ready=False))
            return
        self._register(conn, producer)
        if self.access.topic_epoch != self._epoch_saved:
            await self._answer_after_epoch_saved(conn, cmd.request_id, producer)
            return
        conn.send_command(producer.success_response(cmd.request_id))

    async def _load_topic_epoch(self) -> None:
        if self.ml.created:
            # none stored for a managed ledger this open created (Java keeps the epoch in
            # the managed ledger's properties, which start empty)
            return
        try:
            got = await self.service.store.get(self._epoch_path)
            epoch = int(json.loads(got.value)["topic_epoch"])
        except NotFound:
            return
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable topic epoch (%s); starting without", self.full_name, exc)
            return
        self.access = ProducerAccess(topic_epoch=epoch)
        self._epoch_saved = epoch

    @property
    def _epoch_path(self) -> str:
        return f"{TOPIC_EPOCH_ROOT}/{self.ml.name}"

    async def _save_topic_epoch(self) -> None:
        """Store the current topic epoch unless already stored. Epochs only grow, and each
        call writes the value current when it holds the lock, so the stored one never goes
        back. Raises the metadata store's errors."""
        async with lazy_lock(self, "_epoch_lock"):
            epoch = self.access.topic_epoch
            if epoch is None or (self._epoch_saved is not None and epoch <= self._epoch_saved):
                return
            body = json.dumps({"topic_epoch": epoch}).encode()
            await self.service.store.put(self._epoch_path, body)
            self._epoch_saved = epoch

    async def _answer_after_epoch_saved(
        self, conn: ServerConnection, request_id: int, producer: Producer
    ) -> None:
        """PRODUCER_SUCCESS (ready) once the epoch ``producer`` moved is stored; if storing
        fails, the producer is removed and the error raised (the request answers ERROR)."""
        try:
            await self._save_topic_epoch()
        except MagnetarError:
            self.remove_producer(producer)
            if conn.producers.get(producer.producer_id) is producer:
                del conn.producers[producer.producer_id]
            raise
        if producer.closed:  # fenced or disconnected meanwhile
            raise ProducerFenced("Fenced out")
        conn.send_command(producer.success_response(request_id))

    def _check_producer_limits(self, key: ProducerKey) -> None:
        """Java's order: max producers, then backlog quota. Raises ProducerBusy (as Java's
        ``ProducerBusyException``) or ProducerBlockedQuotaExceeded[Exception]."""
        limit = self.policies.max_producers_per_topic
        if limit > 0 and key not in self.producers and len(self.producers) >= limit:
            raise ProducerBusy("Topic reached max producers limit")
        policy = self.policies.backlog_quota_policy
        if policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
            return
        self.ml.apply_backlog_quota()
        if self.ml.backlog_quota_exceeded:
            if policy is BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD:
                raise ProducerBlockedQuotaExceeded(
                    f"Cannot create producer on topic with backlog quota exceeded: {self.full_name}"
                )
            raise ProducerBlockedQuotaExceededException(
                f"Cannot create producer on topic with backlog quota exceeded: {self.full_name}"
            )
        self._check_namespace_storage_quota()

    def backlog_bytes(self) -> int:
        """Bytes not yet consumed by the slowest durable subscription (0: none)."""
        ml = self.ml
        return max((ml.backlog_size_bytes(c) for c in ml.cursors.values() if c.durable), default=0)

    def _check_namespace_storage_quota(self) -> None:
        """The namespace's storage quota in all (``namespaceStorageQuota``): the sum of the
        backlogs of its topics on this broker. Raises as the backlog quota does."""
        quota = self.policies.namespace_storage_quota
        if quota is None:
            return
        namespace = self.name.namespace_name
        total = sum(
            t.backlog_bytes()
            for t in self.service.loaded_topics()
            if t.name.namespace_name == namespace
        )
        if total <= quota.limit_size_bytes:
            return
        message = (
            f"Cannot create producer: namespace {namespace} stores {total} bytes of backlog, "
            f"over its storage quota of {quota.limit_size_bytes} bytes"
        )
        if quota.policy is BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD:
            raise ProducerBlockedQuotaExceeded(message)
        raise ProducerBlockedQuotaExceededException(message)

    def _register(self, conn: ServerConnection, producer: Producer) -> None:
        self.producers[producer.key] = producer
        conn.producers[producer.producer_id] = producer
        if self.dedup is not None:
            self.dedup.producer_added(producer.name)

    def remove_producer(self, producer: Producer) -> None:
        producer.closed = True
        if self._waiting.pop(producer.key, None) is not None:
            producer.connection.queued_producers.pop(producer.producer_id, None)
        if self.producers.get(producer.key) is producer:
            del self.producers[producer.key]
            if self.dedup is not None:
                self.dedup.producer_removed(producer.name)
        self._apply_effects(self.access.remove(producer.key))

    def _apply_effects(self, effects: tuple[ProducerEffect, ...] | list[ProducerEffect]) -> None:
        for effect in effects:
            match effect:
                case CloseProducer(key=key, notify_client=notify):
                    old = self.producers.pop(key, None)
                    if old is not None:
                        old.closed = True
                        if notify:
                            old.connection.producer_closed_by_broker(old)
                        elif old.connection.producers.get(old.producer_id) is old:
                            del old.connection.producers[old.producer_id]
                case FailWaitingProducer(key=key, error=error):
                    waiting = self._waiting.pop(key, None)
                    if waiting is not None:
                        conn, cmd, failed = waiting
                        failed.closed = True
                        conn.queued_producers.pop(cmd.producer_id, None)
                        code, message = wire_error(error)
                        conn.send_command(
                            Error(request_id=cmd.request_id, error=code, message=message)
                        )
                case ProducerReady(key=key, topic_epoch=epoch):
                    waiting = self._waiting.pop(key, None)
                    if waiting is not None:
                        conn, cmd, producer = waiting
                        conn.queued_producers.pop(cmd.producer_id, None)
                        producer.topic_epoch = epoch
                        if conn.closed:
                            self._apply_effects(self.access.remove(key))
                            continue
                        self._register(conn, producer)
                        if epoch != self._epoch_saved:
                            self.service.spawn(self._ready_after_epoch_saved(conn, cmd, producer))
                        else:
                            conn.send_command(self._ready_response(cmd.request_id, producer))

    def _ready_response(self, request_id: int, producer: Producer) -> ProducerSuccess:
        """The second PRODUCER_SUCCESS of a queued WaitForExclusive producer."""
        return ProducerSuccess(
            request_id=request_id,
            producer_name=producer.name,
            last_sequence_id=self.last_sequence_id(producer.name),
            topic_epoch=producer.topic_epoch,
            producer_ready=True,
            schema_version=producer.schema_version,
        )

    async def _ready_after_epoch_saved(
        self, conn: ServerConnection, cmd: ProducerCommand, producer: Producer
    ) -> None:
        try:
            await self._save_topic_epoch()
        except MagnetarError as exc:
            log.warning("%s: storing the topic epoch failed: %s", self.full_name, exc)
            self.remove_producer(producer)
            if conn.producers.get(producer.producer_id) is producer:
                del conn.producers[producer.producer_id]
            code, message = wire_error(exc)
            conn.send_command(Error(request_id=cmd.request_id, error=code, message=message))
            return
        if not producer.closed:
            conn.send_command(self._ready_response(cmd.request_id, producer))

    # --- subscriptions -------------------------------------------------------------------

    async def subscribe(self, conn: ServerConnection, cmd: Subscribe) -> Consumer:
        """Create the subscription if needed and attach a consumer; answers SUCCESS.
        Raises ConsumerBusy / ConsumerAssignError / storage errors. Over the topic's
        subscribe rate for the client's address, waits until the rate allows it first.
        While a seek resets the subscription's cursor, waits for the reset to end."""
        clock = self.service.clock
        wait_s = self.subscribe_limiter.on_subscribe(conn.peer_ip, clock.monotonic_s())
        if wait_s > 0:
            await clock.sleep(wait_s)
        async with self._sub_lock:
            sub = self.subscriptions.get(cmd.subscription)
            while sub is not None and sub.resetting:
                # attach to the reset cursor, never to the read position it replaces
                await sub.wait_for_reset()
                sub = self.subscriptions.get(cmd.subscription)
            read_compacted = await self.service.compactor.prepare_read_compacted(self, cmd)
            self._check_consumer_limits(sub)
            if sub is None:
                sub = await self._create_subscription(cmd)
            if cmd.replicate_subscription_state:
                await set_replicated(sub.cursor, True)
            if not sub.consumers:
                sub.read_compacted = read_compacted
            consumer = Consumer(
                sub,
                conn,
                cmd.consumer_id,
                cmd.consumer_name or "",
                cmd.priority_level or 0,
                cmd.sub_type,
                cmd.consumer_epoch,
                dict(cmd.metadata),
                auto_consume=cmd.schema is not None and cmd.schema.type == SchemaType.AutoConsume,
            )
            try:
                sub.add_consumer(consumer, cmd.key_shared_meta)
            except MagnetarError:
                if not sub.consumers and not sub.durable:
                    await self.drop_subscription(sub)
                raise
            if conn.closed:
                await sub.remove_consumer(consumer)
                return consumer
            conn.consumers[cmd.consumer_id] = consumer
            conn.send_command(Success(request_id=cmd.request_id))
            return consumer

    def _check_consumer_limits(self, sub: Subscription | None) -> None:
        """Raises ConsumerBusy with Java's messages."""
        limit = self.policies.max_consumers_per_topic
        if limit > 0 and sum(len(s.consumers) for s in self.subscriptions.values()) >= limit:
            raise ConsumerBusy("Topic reached max consumers limit")
        limit = self.policies.max_consumers_per_subscription
        if limit > 0 and sub is not None and len(sub.consumers) >= limit:
            raise ConsumerBusy("Subscription reached max consumers limit")

    async def _create_subscription(self, cmd: Subscribe) -> Subscription:
        ml = self.ml
        # one string for the name the topics of a broker often share (its cursor, its
        # subscription, the tables keyed by it)
        name = sys.intern(cmd.subscription)
        if cmd.durable:
            cursor = await ml.open_cursor(
                name, earliest=cmd.initial_position is InitialPosition.Earliest
            )
        else:
            start = cmd.start_message_id
            if start is None:
                earliest = cmd.initial_position is InitialPosition.Earliest
                cursor = await ml.open_cursor(name, durable=False, earliest=earliest)
            elif start.is_earliest or start.ledger_id < 0:
                cursor = await ml.open_cursor(name, durable=False, earliest=True)
            elif start.is_latest:
                cursor = await ml.open_cursor(name, durable=False)
            else:
                # the start entry itself is delivered; the client filters it (§6.5)
                position = Position(start.ledger_id, max(start.entry_id, 0))
                if position > ml.ledgers.end_position:
                    position = ml.ledgers.end_position
                first = ml.ledgers.first_position
                position = max(position, first) if ml.ledgers.exists(first) else position
                cursor = await ml.open_cursor(name, durable=False, start=position)
        sub = Subscription(self, name, cursor, cmd.durable, cmd.sub_type)
        self.subscriptions[name] = sub
        return sub

    async def drop_subscription(self, sub: Subscription) -> None:
        """Forget a non-durable subscription whose last consumer left."""
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        await sub.close()
        with contextlib.suppress(CursorNotFound):
            await self.ml.delete_cursor(sub.name)

    async def delete_subscription(self, sub: Subscription) -> None:
        """UNSUBSCRIBE: delete the subscription and its stored cursor."""
        await self.drop_subscription(sub)

    def subscription_for_cursor(self, name: str) -> Subscription | None:
        return self.subscriptions.get(name)

    # --- closing -------------------------------------------------------------------------

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for hook in self.service.topic_hooks:
            await hook.topic_closing(self)
        for sub in list(self.subscriptions.values()):
            await sub.close()
        for producer in list(self.producers.values()):
            await producer.drain()
        if self._dedup_task is not None:
            self._dedup_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dedup_task
        with contextlib.suppress(MagnetarError):
            await self.save_dedup()
        await self.ml.close()
