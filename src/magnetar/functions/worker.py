"""A Functions Worker's membership and leadership: the asyncio shell around
:class:`~magnetar.functions.leadership.LeadershipState`.

Usage::

    worker = FunctionsWorker(WorkerConfig(worker=WorkerInfo("w1", "10.0.0.5", 6750),
                                          service_url="pulsar://broker:6650",
                                          admin_url="http://broker:8080"))
    worker.add_leadership_listener(on_change)   # called with LeadershipChanged, in order
    await worker.start()                        # joins: subscribes to the coordination topic
    worker.is_leader                            # as the broker last said
    view = await worker.members()               # MembershipView(members, leader)
    await worker.write_assignment(key, payload) # leader only: NotLeader / ProducerFenced
    await worker.write_metadata(key, payload)   # the same for the metadata topic
    await worker.close()                        # leaves; the broker picks another leader

Joining: the worker subscribes to ``config.coordination_topic``, subscription
``config.coordination_subscription``, type Failover, consumer name ``workerId:host:port``,
with the consumer property ``id`` set to the same name (Pulsar's workers set it too). The
broker makes one consumer active and tells every consumer whether it is (ACTIVE_CONSUMER_CHANGE);
the active one is the leader. Nobody publishes to the coordination topic; the subscription
exists for its consumer list.

Ordering: effects of the leadership core run one at a time, in the order the broker's
notifications arrived, in one task: listeners see ``True``/``False`` strictly alternating,
and a release never overtakes the acquisition before it. A new leader retries taking the
leader's producers (``assignments``, ``metadata``, ``packages``, each exclusive with
fencing) with backoff (up to ``config.acquire_backoff_max_ms`` apart) for as long as its term
lasts; the core's "producer" is that set, held only when all three are.

Not covered (yet): a coordination consumer that loses its connection keeps the last state the
broker told it until it reconnects and is told again; the fencing of the assignments
producer is what keeps a stale leader from writing meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.client import Client, Consumer, ConsumerType, MessageId
from magnetar.client.backoff import Backoff
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MagnetarError, ProducerFenced
from magnetar.functions.admin_stats import TopicStatsReader, fetch_topic_stats
from magnetar.functions.errors import FunctionsWorkerError, NotLeader
from magnetar.functions.fenced_producer import FencedProducer
from magnetar.functions.leadership import (
    AcquireProducer,
    Effect,
    LeadershipChanged,
    LeadershipState,
    ReleaseProducer,
)
from magnetar.functions.membership_view import MembershipView, membership_from_stats
from magnetar.functions.worker_config import WorkerConfig

log = logging.getLogger(__name__)

WORKER_ID_PROPERTY = "id"
"""The coordination consumer's property holding ``workerId:host:port``."""
CLOSE_TIMEOUT_MS = 10_000
"""How long :meth:`FunctionsWorker.close` waits for pending leadership effects."""
ACQUIRE_BACKOFF_INITIAL_MS = 100

LeadershipListener = Callable[[LeadershipChanged], Awaitable[None] | None]


class _CoordinationListener:
    """The coordination consumer's event listener: forwards the broker's word."""

    def __init__(self, worker: FunctionsWorker) -> None:
        self._worker = worker

    def became_active(self, consumer: Any, partition: int) -> None:
        self._worker._on_active_consumer_change(True)

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self._worker._on_active_consumer_change(False)


class FunctionsWorker:
    """One worker's membership in its worker cluster, and its leader duties.

    ``client`` defaults to a new :class:`Client` on ``config.service_url``, owned (and closed)
    by the worker; a given client stays the caller's. ``topic_stats`` reads a topic's stats
    (the admin API's TopicStats object) for the member list; by default they are fetched
    from ``config.admin_url``."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        client: Client | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        topic_stats: TopicStatsReader | None = None,
    ) -> None:
        self.config = config
        self._topic_stats = topic_stats or self._fetch_topic_stats
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._owns_client = client is None
        self._client = client or Client(
            config.service_url,
            authentication=config.client_credentials.client_authentication(),
            clock=self._clock,
            rng=self._rng,
        )
        self._state = LeadershipState()
        self._assignments = FencedProducer(self._client, config.assignments_topic, "assignments")
        self._metadata = FencedProducer(self._client, config.metadata_topic, "metadata")
        self._packages = FencedProducer(self._client, config.packages_topic, "packages")
        self._leader_producers = (self._assignments, self._metadata, self._packages)
        self._listeners: list[LeadershipListener] = []
        self._effects: asyncio.Queue[Effect] = asyncio.Queue()
        self._runner: asyncio.Task[None] | None = None
        self._consumer: Consumer | None = None
        self._closed = False

    # ------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        """Whether the broker last said this worker's coordination consumer is active."""
        return self._state.is_leader

    @property
    def term(self) -> int:
        """This worker's current (or last) leadership term; 0 before it first led."""
        return self._state.term

    @property
    def holds_assignments(self) -> bool:
        """Whether this worker holds the leader's producers for its current term."""
        return self._state.holds_producer and all(p.held for p in self._leader_producers)

    @property
    def client(self) -> Client:
        """The worker's client (for readers of the topics it follows)."""
        return self._client

    @property
    def packages_producer(self) -> FencedProducer:
        """The fenced producer of the packages topic (held while leading)."""
        return self._packages

    @property
    def coordination_consumer(self) -> Consumer | None:
        """The Failover consumer this worker joined with (None before :meth:`start`)."""
        return self._consumer

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Call ``listener`` (plain or ``async``) with every :class:`LeadershipChanged`, in
        order, before the producer is taken or after it is released. A listener that raises
        is logged and does not stop the others."""
        self._listeners.append(listener)

    async def members(self) -> MembershipView:
        """The worker cluster as the broker sees it: the coordination subscription's
        consumers and its active consumer. Raises
        :class:`~magnetar.functions.errors.MembershipUnavailable`."""
        stats = await self._topic_stats(self.config.coordination_topic)
        return membership_from_stats(stats, self.config.coordination_subscription)

    async def _fetch_topic_stats(self, topic: str) -> Any:
        """The default stats reader: ``GET`` them from ``config.admin_url``."""
        return await fetch_topic_stats(
            self.config.admin_url,
            topic,
            self.config.admin_request_timeout_ms,
            self.config.client_credentials.http_headers(),
        )

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join the worker cluster. Raises the client's or broker's error when the
        coordination topic cannot be subscribed (e.g. its namespace does not exist), and
        :class:`FunctionsWorkerError` when it is partitioned."""
        assert self._runner is None and not self._closed, "start() once"
        self._runner = asyncio.get_running_loop().create_task(self._run_effects())
        name = self.config.worker.consumer_name
        try:
            consumer = await self._client.subscribe(
                self.config.coordination_topic,
                self.config.coordination_subscription,
                consumer_type=ConsumerType.Failover,
                consumer_name=name,
                properties={WORKER_ID_PROPERTY: name},
                consumer_event_listener=_CoordinationListener(self),
            )
        except BaseException:
            await self.close()
            raise
        if not isinstance(consumer, Consumer):
            with contextlib.suppress(MagnetarError):
                await consumer.close()
            await self.close()
            raise FunctionsWorkerError(
                f"the coordination topic {self.config.coordination_topic} is partitioned; "
                "it must not be (one active consumer per partition would mean many leaders)"
            )
        self._consumer = consumer
        log.info("worker %s joined %s", name, self.config.coordination_topic)

    async def close(self) -> None:
        """Leave the worker cluster: stop writing, release the assignments producer, close
        the coordination consumer (the broker then makes another worker leader). Bounded by
        :data:`CLOSE_TIMEOUT_MS`; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._enqueue(self._state.on_leave())
        runner = self._runner
        if runner is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._effects.join(), CLOSE_TIMEOUT_MS / 1000)
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        await self._release_all()
        if self._consumer is not None:
            with contextlib.suppress(MagnetarError):
                await self._consumer.close()
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> FunctionsWorker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ leader-only writes

    async def write_assignment(self, key: str, payload: bytes) -> MessageId:
        """Write one record to the assignments topic (leader only) and wait for its receipt.

        Raises :class:`NotLeader` when this worker does not hold the leader's producers,
        :class:`~magnetar.common.errors.ProducerFenced` when a newer leader has taken them
        (this worker then stops trying for the rest of its term)."""
        return await self.write_leader_record(self._assignments, key, payload)

    async def write_metadata(self, key: str, payload: bytes) -> MessageId:
        """Write one record to the metadata topic (leader only); as :meth:`write_assignment`."""
        return await self.write_leader_record(self._metadata, key, payload)

    async def write_leader_record(
        self, producer: FencedProducer, key: str, payload: bytes
    ) -> MessageId:
        """Write through one of the leader's fenced producers; as :meth:`write_assignment`."""
        if not self.holds_assignments:
            raise NotLeader(f"worker {self.config.worker.worker_id} is not the leader")
        term = self._state.term
        try:
            return await producer.send(key, payload)
        except ProducerFenced:
            log.warning(
                "worker %s: a newer leader fenced the %s producer (term %d)",
                self.config.worker.worker_id,
                producer.role,
                term,
            )
            self._enqueue(self._state.on_fenced(term))
            raise

    def note_fenced(self) -> None:
        """A write through one of the leader's producers (e.g. a package part) was fenced:
        stop writing for the rest of this term."""
        self._enqueue(self._state.on_fenced(self._state.term))

    async def _release_all(self) -> None:
        for producer in self._leader_producers:
            await producer.release()

    # ------------------------------------------------------------ effects

    def _on_active_consumer_change(self, is_active: bool) -> None:
        state = self._state
        if (
            is_active
            and state.holds_producer
            and not all(p.connected for p in self._leader_producers)
        ):
            # Told active again (the coordination consumer re-registered) while a producer
            # of this term is not connected: it may have been fenced while this worker was
            # not listening (the client gives up a fenced producer on reconnection without
            # any write failing). Counting it as fenced makes the core start a new term and
            # take the producers again; at worst a producer that was only reconnecting is
            # replaced by this same leader.
            self._enqueue(state.on_fenced(state.term))
        self._enqueue(state.on_active_consumer_change(is_active))

    def _enqueue(self, effects: list[Effect]) -> None:
        for effect in effects:
            self._effects.put_nowait(effect)

    async def _run_effects(self) -> None:
        while True:
            effect = await self._effects.get()
            try:
                await self._apply(effect)
            finally:
                self._effects.task_done()

    async def _apply(self, effect: Effect) -> None:
        if isinstance(effect, LeadershipChanged):
            log.info(
                "worker %s %s leader (term %d)",
                self.config.worker.worker_id,
                "became" if effect.is_leader else "is no longer",
                effect.term,
            )
            for listener in list(self._listeners):
                try:
                    result = listener(effect)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("leadership listener raised")
        elif isinstance(effect, AcquireProducer):
            await self._acquire(effect.term)
        elif isinstance(effect, ReleaseProducer):
            await self._release_all()
            self._state.on_released(effect.term)

    async def _acquire(self, term: int) -> None:
        backoff = Backoff(ACQUIRE_BACKOFF_INITIAL_MS, self.config.acquire_backoff_max_ms, self._rng)
        while self._state.wants_producer(term):
            try:
                for producer in self._leader_producers:
                    await producer.take()
            except MagnetarError as exc:
                delay_ms = backoff.next_ms()
                log.warning(
                    "worker %s: cannot take the leader's producers yet (%s); retrying in %d ms",
                    self.config.worker.worker_id,
                    exc,
                    delay_ms,
                )
                await self._clock.sleep(delay_ms / 1000)
                continue
            for effect in self._state.on_acquired(term):
                await self._apply(effect)
            return
