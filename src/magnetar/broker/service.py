"""The broker service: topics owned by this broker, lookups, and the binary-protocol server.

Usage::

    service = BrokerService(config, store, storage)   # storage: managed-ledger LedgerStorage
    await service.start()                             # listens on config.host:config.port
    ...                                               # service.port, service.service_url
    await service.close()

Metadata layout (besides the managed ledgers' own ``/managed-ledgers/...``):

* ``/admin/policies/<tenant>`` and ``/admin/policies/<tenant>/<namespace>``: JSON, created
  for ``public``, ``public/default`` and ``public/functions`` at start when missing;
* ``/admin/partitioned-topics/<tenant>/<namespace>/<domain>/<quoted local name>``:
  ``{"partitions": N}``;
* ``/magnetar/dedup/...``: dedup snapshots (see :mod:`magnetar.broker.topic`);
* ``/magnetar/producer-name-generation``: bumped at each start, so broker-assigned producer
  names ``<cluster>-<generation>-<n>`` never repeat across restarts (Java's
  ``DistributedIdGenerator`` does the same).

Without ``ownership`` (``magnetar standalone``) this broker owns every topic and LOOKUP
always answers Connect with its advertised URL. With a
:class:`~magnetar.broker.ownership.ClusterOwnership` (``magnetar broker``) it serves only
topics of the bundles it holds (others: ServiceNotReady) and LOOKUP answers Redirect with
the owner's URLs when another broker holds the topic's bundle (docs/cluster.md). Either
way, the TLS field carries ``pulsar+ssl://host:tls_port`` when the TLS listener is on
(``config.tls_port``, same protocol inside TLS; see :mod:`magnetar.broker.tls`), else the
plain URL again. With advertised listeners
(:mod:`magnetar.broker.listeners`) a LOOKUP naming one gets that listener's URLs, one
without a name gets the internal listener's, and one naming a listener the broker lacks
fails with ServiceNotReady "the broker do not have <name> listener", as in Pulsar.
PARTITIONED_METADATA carries no listener name and is answered the same either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from magnetar.auth import AuthenticationService
from magnetar.broker.access import AccessControl
from magnetar.broker.compactor import Compactor
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerConnection
from magnetar.broker.connection_limit import ConnectionLimiter
from magnetar.broker.inactive_topics import (
    InactivityTracker,
    activity_of,
    deletable,
    has_clients,
)
from magnetar.broker.offloaders import Offloaders
from magnetar.broker.partial_frames import PartialFrameBudget
from magnetar.broker.policies import PolicyCache, broker_defaults, ml_config_for
from magnetar.broker.policies.resolution import EffectivePolicies
from magnetar.broker.publish_buffer import PublishBuffer
from magnetar.broker.rate_limit import PublishRateLimiter
from magnetar.broker.stats import MeterSampler
from magnetar.broker.tls import TLS_HANDSHAKE_TIMEOUT_S, server_ssl_context
from magnetar.broker.topic import Topic
from magnetar.broker.topic_deletion import delete_topic_storage
from magnetar.broker.topic_hooks import TopicHooks
from magnetar.broker.topic_schemas import TopicSchemas
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MagnetarError, ServiceNotReady, TopicNotFound
from magnetar.common.names import NamespaceName, TopicDomain, TopicName, check_subscription_name
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.entry_cache import EntryCacheBudget
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.metadata_layout import ROOT as ML_ROOT
from magnetar.managed_ledger.storage import LedgerClientStorage, LedgerStorage
from magnetar.metadata.store import (
    MUST_NOT_EXIST,
    BadVersion,
    MetadataStore,
    NodeExists,
    NotFound,
)
from magnetar.protocol import (
    GetTopicsOfNamespace,
    GetTopicsOfNamespaceResponse,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    MetadataResult,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
    Producer,
    Subscribe,
    TopicsMode,
)
from magnetar.protocol.entry import entry_message_count, entry_publish_time_ms

if TYPE_CHECKING:  # cluster mode's: the standalone imports neither
    from magnetar.broker.controller.bundles import BundleId
    from magnetar.broker.ownership import ClusterOwnership

log = logging.getLogger(__name__)

METER_SAMPLE_INTERVAL_S = 1.0
"""How often the hot-path rate meters fold their counts into their windows."""
POLICIES_ROOT = "/admin/policies"
PARTITIONED_ROOT = "/admin/partitioned-topics"
GENERATION_PATH = "/magnetar/producer-name-generation"
GENERATION_UPDATE_ATTEMPTS_MAX = 100
SERVING_SOON_TIMEOUT_MS = 5_000
"""How long a topic request waits for a bundle this broker is taking before refusing it."""


def managed_ledger_name(topic: TopicName) -> str:
    """``tenant/namespace/domain/<quoted local name>``: one path segment per part."""
    return (
        f"{topic.tenant}/{topic.namespace}/{topic.domain.value}/{quote(topic.local_name, safe='')}"
    )


def partitioned_path(topic: TopicName) -> str:
    return (
        f"{PARTITIONED_ROOT}/{topic.tenant}/{topic.namespace}/{topic.domain.value}/"
        f"{quote(topic.local_name, safe='')}"
    )


class BrokerService:
    """Owns the topics, the listening socket and every client connection."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        storage: LedgerStorage,
        *,
        clock: Clock | None = None,
        ml_config: ManagedLedgerConfig | None = None,
        ownership: ClusterOwnership | None = None,
    ) -> None:
        self.config = config
        self.ownership = ownership
        """Cluster mode: which bundles this broker holds (``None``: it owns every topic,
        as ``magnetar standalone``)."""
        self.store = store
        self.storage = storage
        self.clock: Clock = clock or SystemClock()
        self.ml_config = ml_config or ManagedLedgerConfig()
        self.offloaders = Offloaders()
        """Tiered storage: the offloader of each driver the topics' offload policies name."""
        self.entry_cache_budget = EntryCacheBudget(
            config.managed_ledger_cache_size_mb * 1024 * 1024
        )
        """What the tailing-read caches of all this broker's topics hold together."""
        self._topics: dict[str, Topic | asyncio.Future[Topic]] = {}
        """Topics by full name: the topic once loaded, its load's future while it loads (a
        load that fails leaves no entry)."""
        self._taken_over: set[str] = set()
        """Topics being unloaded because another broker fenced their ledger."""
        self._quorum_storages: dict[tuple[int, int, int], LedgerClientStorage] = {}
        """See :meth:`ledger_storage_for` (a few: one per quorums in use)."""
        self._connections: set[ServerConnection] = set()
        self.namespace_publish_limiters: dict[str, PublishRateLimiter] = {}
        """Per namespace (``tenant/ns``): the ``namespacePublishRate`` budget its topics on
        this broker share. One entry per namespace that had a topic here (a few hundred
        bytes each)."""
        self.connection_limiter = ConnectionLimiter(
            config.max_connections, config.max_connections_per_ip
        )
        """``brokerMaxConnections`` / ``brokerMaxConnectionsPerIp``."""
        self._server: asyncio.Server | None = None
        self._tls_server: asyncio.Server | None = None
        self._producer_names = itertools.count()
        self._generation = 0
        self._background: set[asyncio.Task[Any]] = set()
        self.port = config.port
        self.tls_port: int | None = config.tls_port
        """The bound TLS port once started (None when the TLS listener is off)."""
        self.closing = False
        self.compactor = Compactor(self)
        """Topic compaction: trigger_compaction / compaction_status / view."""
        self.policies = PolicyCache(store, broker_defaults(config))
        self.policies.add_listener(self._policies_changed)
        self.partial_frames: PartialFrameBudget[ServerConnection] = PartialFrameBudget(
            config.partial_frame_bytes_max, config.partial_frame_timeout_ms
        )
        """Bytes all connections hold in frames not yet completely read (see
        :mod:`magnetar.broker.partial_frames`); overdue frames close their connection."""
        self.publish_buffer: PublishBuffer[ServerConnection] = PublishBuffer(
            config.max_message_publish_buffer_size_mb * 1024 * 1024
        )
        """Bytes of SENDs handed to storage and not yet answered, broker-wide (see
        :mod:`magnetar.broker.publish_buffer`)."""
        self.schemas = TopicSchemas(self)
        """The schema registry and the rules for clients' schemas (:mod:`magnetar.schema`)."""
        self.authentication = AuthenticationService(config.auth)
        """Who a client is (raises AuthConfigError here for unusable keys or files)."""
        self.access = AccessControl(config.auth, store, self.policies)
        """What a role may do (authorization)."""
        self.topic_hooks: list[TopicHooks] = []
        """Told of each topic's load, policy changes and close (geo-replication)."""
        self.meter_sampler = MeterSampler()
        """The hot-path rate meters (producers, consumers, topics, subscriptions), sampled
        every :data:`METER_SAMPLE_INTERVAL_S` by :meth:`_sample_meters`."""

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self, *, listen: bool = True) -> None:
        """Initialize the metadata, then listen. ``listen=False`` opens no socket: the
        caller connects each :class:`ServerConnection` (``ServerConnection(service)``) to a
        transport of its own (the seeded simulation's network)."""
        # Bad TLS settings fail the start before anything listens (TlsConfigError).
        tls_context = None if self.config.tls_port is None else server_ssl_context(self.config)
        await self._initialize_metadata()
        await self.policies.start()
        if not listen:
            self._start_background()
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self), self.config.host, self.config.port, backlog=1024
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("broker listening on %s:%d", self.config.host, self.port)
        if tls_context is not None:
            assert self.config.tls_port is not None
            # A failed handshake (plain-text client, untrusted client certificate) closes
            # that connection only; the protocol object is created per connection but only
            # sees data once the handshake is done.
            self._tls_server = await loop.create_server(
                lambda: ServerConnection(self),
                self.config.host,
                self.config.tls_port,
                backlog=1024,
                ssl=tls_context,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
            )
            self.tls_port = int(self._tls_server.sockets[0].getsockname()[1])
            log.info("broker TLS listening on %s:%d", self.config.host, self.tls_port)
        self._start_background()

    def _start_background(self) -> None:
        self.spawn(self._sample_meters())
        self.spawn(self._close_overdue_partial_frames())
        if self.config.delete_inactive_topics_frequency_s > 0:
            self.spawn(self._delete_inactive_topics())

    async def _initialize_metadata(self) -> None:
        for path, value in (
            (
                f"{POLICIES_ROOT}/public",
                {"adminRoles": [], "allowedClusters": [self.config.cluster_name]},
            ),
            (f"{POLICIES_ROOT}/public/default", {}),
            (f"{POLICIES_ROOT}/public/functions", {}),  # the Functions Workers' topics
        ):
            with contextlib.suppress(NodeExists):
                await self.store.put(path, json.dumps(value).encode(), MUST_NOT_EXIST)
        # Compare-and-set: brokers of one cluster starting together get distinct generations.
        for _ in range(GENERATION_UPDATE_ATTEMPTS_MAX):
            try:
                got = await self.store.get(GENERATION_PATH)
            except NotFound:
                generation, version = 0, MUST_NOT_EXIST
            else:
                generation, version = int(got.value.decode()) + 1, got.stat.version
            try:
                await self.store.put(GENERATION_PATH, str(generation).encode(), version)
            except (BadVersion, NodeExists):
                continue
            self._generation = generation
            return
        raise ServiceNotReady(
            "could not claim a producer-name generation; too many brokers starting"
        )

    @property
    def service_url(self) -> str:
        """The ``pulsar://`` URL lookups without a listener name answer with: the internal
        advertised listener's, else ``pulsar://<advertised address or host>:<bound port>``."""
        internal = self.config.advertised_listeners.internal
        if internal is not None:
            return internal.broker_service_url
        host = self.config.advertised_address or self.config.host
        return f"pulsar://{host}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        """The ``pulsar+ssl://`` URL lookups without a listener name answer with: the
        internal advertised listener's (None when it has none), else
        ``pulsar+ssl://host:tls_port``, or None when the TLS listener is off."""
        internal = self.config.advertised_listeners.internal
        if internal is not None:
            return internal.broker_service_url_tls
        if self.tls_port is None:
            return None
        host = self.config.advertised_address or self.config.host
        return f"pulsar+ssl://{host}:{self.tls_port}"

    def lookup_urls(self, listener_name: str | None) -> tuple[str, str]:
        """``(plain, tls)`` URLs a lookup for ``listener_name`` answers with; a missing or
        blank name means the default (:attr:`service_url`). The TLS one is the plain one
        again when there is no TLS address (clients on a plain service URL ignore it).

        Raises :class:`~magnetar.common.errors.ListenerNotFound` for a name the broker
        has no advertised listener by.
        """
        if listener_name is None or not listener_name.strip():
            url = self.service_url
            return url, self.service_url_tls or url
        listener = self.config.advertised_listeners.require(listener_name)
        url = listener.broker_service_url
        return url, listener.broker_service_url_tls or url

    async def close(self) -> None:
        """Stop accepting, close connections, then close every topic (persisting cursors
        and dedup state)."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for conn in list(self._connections):
            conn.close()
        await self.compactor.close()
        for loaded in self.loaded_topics():
            try:
                await loaded.close()
            except MagnetarError as exc:
                log.warning("closing %s: %s", loaded.full_name, exc)
        self._topics.clear()
        for task in list(self._background):
            task.cancel()
        await self.policies.close()

    async def _sample_meters(self) -> None:
        while not self.closing:
            await self.clock.sleep(METER_SAMPLE_INTERVAL_S)
            self.meter_sampler.sample_all()

    async def _close_overdue_partial_frames(self) -> None:
        # Checked a few times per timeout: a frame is dropped at most a quarter of the
        # timeout late.
        interval_s = self.config.partial_frame_timeout_ms / 4000
        while not self.closing:
            await self.clock.sleep(interval_s)
            for conn in self.partial_frames.expired(self.clock.monotonic_s()):
                conn.close_for_overdue_frame()

    async def _delete_inactive_topics(self) -> None:
        # Runs whatever brokerDeleteInactiveTopicsEnabled says: a namespace or topic
        # policy may turn deletion on where the broker's default is off.
        tracker = InactivityTracker()
        while not self.closing:
            await self.clock.sleep(self.config.delete_inactive_topics_frequency_s)
            topics = [t for t in self.loaded_topics() if deletable(t.name)]
            tracker.keep_only({t.full_name for t in topics})
            for topic in topics:
                try:
                    await self._delete_if_inactive(topic, tracker)
                except MagnetarError as exc:  # a metadata hiccup: the next round retries
                    log.warning("deleting inactive %s: %s", topic.full_name, exc)

    async def _delete_if_inactive(self, topic: Topic, tracker: InactivityTracker) -> None:
        if has_clients(topic):  # active whatever its policies: not worth resolving them
            tracker.forget(topic.full_name)
            return
        policies = await self.policies.effective(topic.name)
        if topic.closed or self.loaded_topic(topic.name) is not topic:
            return
        # read after the await above, and nothing awaited until the unload starts
        activity = activity_of(topic)
        policy = policies.inactive_topic
        now_ms = int(self.clock.monotonic_s() * 1000)
        if tracker.due(topic.full_name, activity, policy, policies.retention_time_ms, now_ms):
            log.info("%s: deleting it, inactive (%s)", topic.full_name, policy.delete_mode)
            await delete_topic_storage(self, topic)

    def track(self, task: asyncio.Task[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.track(asyncio.get_running_loop().create_task(coro))

    def connection_opened(self, conn: ServerConnection, ip: str) -> str | None:
        """Admit a new connection from ``ip``: None, or why it is refused (over a
        connection limit; then it is not counted and must be closed)."""
        refused = self.connection_limiter.admit(ip)
        if refused is None:
            self._connections.add(conn)
        return refused

    def connection_closed(self, conn: ServerConnection, ip: str) -> None:
        """An admitted connection closed."""
        self._connections.discard(conn)
        self.connection_limiter.release(ip)

    @property
    def connection_count(self) -> int:
        """Open client connections (for metrics)."""
        return len(self._connections)

    def new_producer_name(self) -> str:
        return f"{self.config.cluster_name}-{self._generation}-{next(self._producer_names)}"

    # --- topics --------------------------------------------------------------------------

    async def require_namespace(self, name: TopicName) -> None:
        """Raises :class:`TopicNotFound` ("Namespace ... does not exist", as Pulsar answers)
        unless the topic's namespace exists."""
        if not await self.policies.namespace_exists(name.namespace_name):
            raise TopicNotFound(f"Namespace {name.namespace_name} does not exist")

    async def get_topic(
        self, name: TopicName, *, create: bool = True, policies: EffectivePolicies | None = None
    ) -> Topic:
        """The loaded topic, opening (and creating, if allowed) its managed ledger.
        ``policies``: the topic's effective policies, when the caller has just resolved them
        (a topic it opens starts with those; None: resolved here).

        Raises :class:`TopicNotFound` when the topic's namespace does not exist (nothing is
        created then), or when ``create`` is false and the topic does not exist."""
        if self.closing:
            raise ServiceNotReady("broker is shutting down")
        if self.ownership is not None and not self.ownership.serves(name):
            await self.ownership.serving_soon(name, SERVING_SOON_TIMEOUT_MS)
        self._check_served(name)
        key = name.full_name
        found = self._topics.get(key)
        if isinstance(found, Topic):
            return found
        if found is None:
            await self.require_namespace(name)
            if not create and not await self.topic_exists(name):
                raise TopicNotFound(f"Topic {key} does not exist")
            found = self._topics.get(key)  # opened by another request meanwhile
            if isinstance(found, Topic):
                return found
            if found is not None:
                return await asyncio.shield(found)
            fut: asyncio.Future[Topic] = asyncio.get_running_loop().create_future()
            self._topics[key] = fut
            try:
                if policies is None:
                    policies = await self.policies.effective(name)
                storage = self.ledger_storage_for(policies)
                ml = await ManagedLedger.open(
                    managed_ledger_name(name),
                    storage=storage,
                    store=self.store,
                    config=ml_config_for(self.ml_config, policies),
                    clock=self.clock,
                    publish_time_of=entry_publish_time_ms,
                    messages_of=entry_message_count,
                    cache_budget=self.entry_cache_budget,
                    offloader=self.offloaders.get(policies.offload.driver),
                    offloader_source=self.offloaders,
                )
                topic = await Topic.open(self, name, ml, policies)
                if self.ownership is not None and not self.ownership.serves(name):
                    # the bundle was released while the topic opened: it may not serve
                    await topic.close()
                    self._check_served(name)
            except BaseException as exc:
                del self._topics[key]
                if isinstance(exc, asyncio.CancelledError):
                    # the request that was loading it went away (its connection closed):
                    # the others waiting for this load get a retriable answer
                    fut.set_exception(ServiceNotReady(f"loading {key} was interrupted"))
                else:
                    fut.set_exception(exc)
                fut.exception()
                raise
            fut.set_result(topic)
            if self._topics.get(key) is fut:  # keyed by the topic's own string: one copy
                del self._topics[key]
                self._topics[topic.full_name] = topic
            return topic
        return await asyncio.shield(found)

    def ledger_storage_for(self, policies: EffectivePolicies) -> LedgerStorage:
        """The storage a topic with ``policies`` creates its ledgers on: over the ledger
        client, one per quorums (persistence policies), shared by the topics that have them
        and never changed (a topic whose quorums change is given another)."""
        storage = self.storage
        if not isinstance(storage, LedgerClientStorage):
            return storage
        quorums = (policies.ensemble_size, policies.write_quorum, policies.ack_quorum)
        found = self._quorum_storages.get(quorums)
        if found is None:
            found = self._quorum_storages[quorums] = LedgerClientStorage(
                storage.client,
                ensemble_size=quorums[0],
                write_quorum=quorums[1],
                ack_quorum=quorums[2],
            )
        return found

    def _check_served(self, name: TopicName) -> None:
        """Raises :class:`ServiceNotReady` in cluster mode unless this broker holds the
        topic's bundle (the client then looks the topic up again)."""
        if self.ownership is not None and not self.ownership.serves(name):
            raise ServiceNotReady(f"{name.full_name} is not served by this broker")

    async def unload_bundle(self, bundle: BundleId) -> None:
        """Close every topic of ``bundle`` loaded here (their producers and consumers are
        told to go; see :meth:`unload_topic`), including topics still opening."""
        assert self.ownership is not None
        for entry in list(self._topics.values()):
            if not isinstance(entry, Topic):  # still loading
                with contextlib.suppress(Exception):
                    await asyncio.shield(entry)
        for topic in self.loaded_topics():
            if self.ownership.bundle_of(topic.name) == bundle:
                try:
                    await self.unload_topic(topic.name)
                except MagnetarError as exc:
                    log.warning("unloading %s: %s", topic.full_name, exc)

    async def topic_taken_over(self, topic: Topic) -> None:
        """``topic``'s managed ledger was fenced by another owner: unload it here (once),
        so its producers and consumers look the topic up again and find the new owner."""
        if self.loaded_topic(topic.name) is not topic or topic.full_name in self._taken_over:
            return
        self._taken_over.add(topic.full_name)
        log.warning("%s: taken over by another broker; unloading it", topic.full_name)
        try:
            await self.unload_topic(topic.name)
        except MagnetarError as exc:
            log.warning("unloading %s: %s", topic.full_name, exc)
        finally:
            self._taken_over.discard(topic.full_name)

    async def topic_exists(self, name: TopicName) -> bool:
        return await self.store.exists(f"{ML_ROOT}/{managed_ledger_name(name)}") is not None

    def loaded_topic(self, name: TopicName) -> Topic | None:
        """The topic if it is open on this broker now (no I/O; for admin and stats)."""
        found = self._topics.get(name.full_name)
        return found if isinstance(found, Topic) else None

    def loaded_topics(self) -> list[Topic]:
        """Every topic open on this broker now (for stats and metrics)."""
        return [t for t in self._topics.values() if isinstance(t, Topic)]

    async def unload_topic(self, name: TopicName) -> Topic | None:
        """Close a loaded topic: its producers and consumers are told to go (CLOSE_PRODUCER /
        CLOSE_CONSUMER; clients reconnect and the topic is opened again on demand), cursors
        and dedup state are persisted. Returns the closed topic, ``None`` if not loaded."""
        topic = self.loaded_topic(name)
        if topic is None:
            return None
        for producer in list(topic.producers.values()):
            producer.connection.producer_closed_by_broker(producer)
            topic.remove_producer(producer)
        for sub in list(topic.subscriptions.values()):
            for consumer in list(sub.consumers.values()):
                consumer.connection.consumer_closed_by_broker(consumer)
                await sub.remove_consumer(consumer)
        try:
            await topic.close()
        finally:
            if self.loaded_topic(name) is topic:
                del self._topics[name.full_name]
        return topic

    async def partitions_of(self, name: TopicName) -> int:
        """Partitions of a partitioned topic, 0 for a non-partitioned (or unknown) one."""
        if name.is_partition:
            return 0
        try:
            got = await self.store.get(partitioned_path(name))
        except NotFound:
            return 0
        return int(json.loads(got.value)["partitions"])

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        """Record a partitioned topic. Raises NodeExists if it exists already."""
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        await self.store.put(
            partitioned_path(name), json.dumps({"partitions": partitions}).encode(), MUST_NOT_EXIST
        )

    async def topics_of_namespace(self, namespace: NamespaceName, mode: TopicsMode) -> list[str]:
        domains = {
            TopicsMode.PERSISTENT: [TopicDomain.PERSISTENT],
            TopicsMode.NON_PERSISTENT: [TopicDomain.NON_PERSISTENT],
        }.get(mode, [TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT])
        names: set[str] = set()
        for domain in domains:
            base = f"{namespace.tenant}/{namespace.namespace}"
            try:
                locals_ = await self.store.children(f"{ML_ROOT}/{base}/{domain.value}")
            except NotFound:
                locals_ = []
            for local in locals_:
                names.add(f"{domain.value}://{base}/{unquote(local)}")
            try:
                parted = await self.store.children(f"{PARTITIONED_ROOT}/{base}/{domain.value}")
            except NotFound:
                parted = []
            for local in parted:
                topic = TopicName.parse(f"{domain.value}://{base}/{unquote(local)}")
                for i in range(await self.partitions_of(topic)):
                    names.add(topic.partition(i).full_name)
        return sorted(names)

    # --- requests from connections -------------------------------------------------------

    # Each handler raises for a failed request; the connection answers that request with
    # the matching failure reply (magnetar.broker.error_reply).

    def _require_session(self) -> None:
        """Cluster mode: raises :class:`ServiceNotReady` once the metadata session is lost
        (see :attr:`ClusterOwnership.session_lost`), before any metadata is read."""
        if self.ownership is not None:
            self.ownership.require_session()

    async def handle_partitioned_metadata(
        self, cmd: PartitionedTopicMetadata
    ) -> PartitionedTopicMetadataResponse:
        name = TopicName.parse(cmd.topic)
        self._require_session()
        await self.require_namespace(name)
        partitions = await self.partitions_of(name)
        policies = await self.policies.effective(name)
        if (
            partitions == 0
            and policies.auto_topic_partitions > 0
            and policies.allow_auto_topic_creation
            and not name.is_partition
            and not await self.topic_exists(name)
        ):
            with contextlib.suppress(NodeExists):
                await self.create_partitioned_topic(name, policies.auto_topic_partitions)
            partitions = await self.partitions_of(name)
        return PartitionedTopicMetadataResponse(
            request_id=cmd.request_id, partitions=partitions, response=MetadataResult.Success
        )

    async def handle_lookup(self, cmd: LookupTopic) -> LookupTopicResponse:
        name = TopicName.parse(cmd.topic)
        url, url_tls = self.lookup_urls(cmd.advertised_listener_name)
        self._require_session()
        await self.require_namespace(name)
        if self.ownership is not None:
            owner = await self.ownership.owner(name, self.config.lookup_owner_wait_ms)
            if owner.broker_id != self.ownership.broker_id:
                url, url_tls = owner.lookup_urls(cmd.advertised_listener_name)
                return LookupTopicResponse(
                    request_id=cmd.request_id,
                    broker_service_url=url,
                    broker_service_url_tls=url_tls,
                    response=LookupResult.Redirect,
                    authoritative=True,
                )
        return LookupTopicResponse(
            request_id=cmd.request_id,
            broker_service_url=url,
            broker_service_url_tls=url_tls,
            response=LookupResult.Connect,
            authoritative=True,
        )

    async def handle_topics_of_namespace(
        self, cmd: GetTopicsOfNamespace
    ) -> GetTopicsOfNamespaceResponse:
        ns = NamespaceName.parse(cmd.namespace)
        topics = await self.topics_of_namespace(ns, cmd.mode)
        return GetTopicsOfNamespaceResponse(
            request_id=cmd.request_id, topics=tuple(topics), filtered=False, changed=True
        )

    async def _topic_for_client(self, topic: str) -> Topic:
        name = TopicName.parse(topic)
        self._require_session()
        if name.full_name in self._topics:
            return await self.get_topic(name)
        policies = await self.policies.effective(name)
        return await self.get_topic(
            name, create=policies.allow_auto_topic_creation, policies=policies
        )

    async def _policies_changed(
        self, namespace: NamespaceName | None, topic: TopicName | None
    ) -> None:
        """Re-resolve the loaded topics a policy change may affect (fresh reads)."""
        for key, loaded in list(self._topics.items()):
            if not isinstance(loaded, Topic):
                continue
            name = loaded.name
            if namespace is not None and name.namespace_name != namespace:
                continue
            if topic is not None and name.partitioned_topic != topic and name != topic:
                continue
            policies = await self.policies.effective(name, fresh=True)
            if self._topics.get(key) is loaded and not loaded.closed:
                loaded.apply_policies(policies)

    async def create_producer(self, conn: ServerConnection, cmd: Producer) -> None:
        topic = await self._topic_for_client(cmd.topic)
        schema_version = await self.schemas.producer_version(topic, cmd)
        if conn.closed:
            return
        await topic.add_producer(conn, cmd, schema_version=schema_version)

    async def subscribe(self, conn: ServerConnection, cmd: Subscribe) -> None:
        check_subscription_name(cmd.subscription)
        topic = await self._topic_for_client(cmd.topic)
        await self.schemas.check_subscriber(topic, cmd)
        if conn.closed:
            return
        await topic.subscribe(conn, cmd)
