"""Namespace and topic policies, enforced on live topics, seen through the official client.

The standalone runs in this process, on its own event-loop thread, so the tests can write
policies straight into its metadata store with :class:`~magnetar.broker.policies.PolicyStore`
(the admin REST API writes the same nodes) and look at broker state; the official
``pulsar-client`` wheel talks to it over TCP as usual. Every policy is changed while the
topic is loaded, to check that changes take effect without a restart.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    PersistencePolicies,
    Policies,
    PolicyStore,
    RetentionPolicies,
    TopicPolicies,
)
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic
from magnetar.broker_server import BrokerServerConfig
from magnetar.common.names import NamespaceName, TopicName
from magnetar.standalone import Standalone, StandaloneConfig
from magnetar.testing import wait_until

from .helpers import assert_nothing_more, new_client, receive_all

T = TypeVar("T")


class InProcessStandalone:
    """A :class:`Standalone` on a private event loop in a daemon thread."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.node = Standalone(
            StandaloneConfig(
                data_dir=data_dir,
                server=BrokerServerConfig(http_port=0, broker=BrokerConfig(port=0)),
            )
        )
        self.call(self.node.start())
        assert self.node.store is not None
        self.policies = PolicyStore(self.node.store)

    @property
    def broker(self) -> BrokerService:
        assert self.node.broker is not None
        return self.node.broker

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def run(self, fn: Callable[[], T]) -> T:
        async def wrapper() -> T:
            return fn()

        return self.call(wrapper())

    def topic(self, name: str) -> Topic:
        async def get() -> Topic:
            return await self.broker.get_topic(TopicName.parse(name))

        return self.call(get())

    def stop(self) -> None:
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self.call(self.node.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessStandalone]:
    n = InProcessStandalone(tmp_path_factory.mktemp("policies") / "data")
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture
def namespace(node: InProcessStandalone) -> NamespaceName:
    """A fresh namespace of tenant ``public`` (no policy set)."""
    ns = NamespaceName.of("public", f"ns-{uuid.uuid4().hex[:8]}")
    node.call(node.policies.create_namespace(ns, Policies()))
    return ns


@pytest.fixture
def client(node: InProcessStandalone) -> Iterator[pulsar.Client]:
    c = new_client(node.broker.service_url)
    try:
        yield c
    finally:
        c.close()


def _topic(ns: NamespaceName) -> str:
    return f"persistent://{ns}/t-{uuid.uuid4().hex[:8]}"


def _set_ns(node: InProcessStandalone, ns: NamespaceName, **changes: Any) -> None:
    node.call(node.policies.update_namespace(ns, lambda p: p.with_(**changes)))


def _set_topic(node: InProcessStandalone, topic: str, **changes: Any) -> None:
    node.call(node.policies.update_topic(TopicName.parse(topic), lambda p: p.with_(**changes)))


def _policy_applied(node: InProcessStandalone, topic: str, check: Callable[[Any], bool]) -> None:
    loaded = node.topic(topic)
    wait_until(lambda: node.run(lambda: check(loaded.policies)), timeout_s=15)


def test_max_producers_per_topic_namespace_then_topic_override(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    first = client.create_producer(topic)
    _set_ns(node, namespace, max_producers_per_topic=1)
    _policy_applied(node, topic, lambda p: p.max_producers_per_topic == 1)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.send(b"the existing producer still works")
    # a topic-level override wins over the namespace
    _set_topic(node, topic, maxProducerPerTopic=2)
    _policy_applied(node, topic, lambda p: p.max_producers_per_topic == 2)
    second = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    second.close()
    first.close()


def test_max_consumers_per_subscription_and_topic(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    shared = pulsar.ConsumerType.Shared
    c1 = client.subscribe(topic, "s1", consumer_type=shared)
    _set_ns(node, namespace, max_consumers_per_subscription=1, max_consumers_per_topic=2)
    _policy_applied(node, topic, lambda p: p.max_consumers_per_topic == 2)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s1", consumer_type=shared)
    c2 = client.subscribe(topic, "s2", consumer_type=shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s3", consumer_type=shared)
    c2.close()
    client.subscribe(topic, "s3", consumer_type=shared).close()
    c1.close()


def test_auto_topic_creation_off_gives_topic_not_found(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    existing = _topic(namespace)
    client.create_producer(existing).close()
    _set_ns(node, namespace, autoTopicCreationOverride=AutoTopicCreationOverride(False))
    wait_until(
        lambda: (
            node.call(
                node.broker.policies.effective(TopicName.parse(existing))
            ).allow_auto_topic_creation
            is False
        ),
        timeout_s=15,
    )
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(_topic(namespace))
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(_topic(namespace), "s")
    client.create_producer(existing).send(b"existing topics still work")


def test_max_unacked_messages_per_consumer_stops_dispatch_until_acked(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    _set_ns(node, namespace, max_unacked_messages_per_consumer=10)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    _policy_applied(node, topic, lambda p: p.max_unacked_messages_per_consumer == 10)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"m{i}".encode())
    got = receive_all(consumer, 10)
    assert_nothing_more(consumer, 1000)  # blocked at 10 unacked
    for m in got[:4]:
        consumer.acknowledge(m)
    assert_nothing_more(consumer, 500)  # 6 unacked is more than half of 10: still blocked
    for m in got[4:]:
        consumer.acknowledge(m)
    more = receive_all(consumer, 10)  # released at <= 5
    assert [m.data() for m in got + more] == [f"m{i}".encode() for i in range(20)]
    # the subscription-level limit, changed live
    _set_ns(node, namespace, max_unacked_messages_per_consumer=0,
            max_unacked_messages_per_subscription=15)  # fmt: skip
    _policy_applied(node, topic, lambda p: p.max_unacked_messages_per_subscription == 15)
    rest = receive_all(consumer, 5)
    assert_nothing_more(consumer, 1000)
    for m in more + rest:
        consumer.acknowledge(m)
    assert len(receive_all(consumer, 15)) == 15


def test_backlog_quota_producer_exception_and_eviction(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    consumer = client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(20):
        producer.send(b"x" * 1000)
    quota = BacklogQuota(4096, -1, BacklogQuotaPolicy.PRODUCER_EXCEPTION)
    _set_ns(node, namespace, backlog_quota_map={BacklogQuotaType.DESTINATION_STORAGE: quota})
    _policy_applied(node, topic, lambda p: p.backlog_quota_size_bytes == 4096)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    # consumers catching up lift the block
    for m in receive_all(consumer, 20):
        consumer.acknowledge(m)
    loaded = node.topic(topic)

    def caught_up() -> bool:
        def check() -> bool:
            loaded.ml.apply_backlog_quota()
            return not loaded.ml.backlog_quota_exceeded

        return node.run(check)

    wait_until(caught_up, timeout_s=15)
    client.create_producer(topic).close()
    # consumer_backlog_eviction: the producer is never blocked; the slow subscription loses
    # its oldest messages (whole ledgers) at the next maintenance round
    evict = BacklogQuota(4096, -1, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
    _set_ns(node, namespace, backlog_quota_map={BacklogQuotaType.DESTINATION_STORAGE: evict})
    _policy_applied(
        node, topic, lambda p: p.backlog_quota_policy.value == "consumer_backlog_eviction"
    )
    client.create_producer(topic).close()


def test_message_ttl_expires_backlog(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    client.subscribe(topic, "idle").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"old-{i}".encode())
    _set_topic(node, topic, messageTTLInSeconds=1)
    _policy_applied(node, topic, lambda p: p.message_ttl_ms == 1000)
    loaded = node.topic(topic)
    assert node.run(lambda: loaded.ml.cursors["idle"].backlog_messages) == 5
    wait_until(lambda: node.run(lambda: loaded.ml.cursors["idle"].backlog_messages == 0), 20)
    consumer = client.subscribe(topic, "idle")
    assert_nothing_more(consumer, 500)


def test_deduplication_switched_on_per_namespace(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    reader_start = pulsar.MessageId.earliest
    producer = client.create_producer(topic, producer_name="p-dup-off")
    producer.send(b"a", sequence_id=1)
    producer.send(b"a-again", sequence_id=1)  # dedup off: stored twice
    producer.close()
    _set_ns(node, namespace, deduplicationEnabled=True)
    loaded = node.topic(topic)
    wait_until(lambda: node.run(lambda: loaded.dedup is not None), timeout_s=15)
    producer = client.create_producer(topic, producer_name="p-dup-on")
    assert producer.last_sequence_id() == -1
    producer.send(b"b", sequence_id=5)
    producer.send(b"b-dup", sequence_id=5)
    producer.send(b"c", sequence_id=6)
    producer.close()
    producer = client.create_producer(topic, producer_name="p-dup-on")
    assert producer.last_sequence_id() == 6
    producer.close()
    reader = client.create_reader(topic, reader_start)
    got = [m.data() for m in receive_all(reader, 4)]
    assert got == [b"a", b"a-again", b"b", b"c"]
    assert not reader.has_message_available()


def test_persistence_and_retention_reach_the_managed_ledger(
    node: InProcessStandalone, namespace: NamespaceName, client: pulsar.Client
) -> None:
    topic = _topic(namespace)
    client.create_producer(topic).close()
    _set_ns(
        node,
        namespace,
        persistence=PersistencePolicies(1, 1, 1, 0.0),
        retention_policies=RetentionPolicies(-1, 100),
    )
    loaded = node.topic(topic)
    _policy_applied(node, topic, lambda p: p.retention_time_ms == -1)
    cfg = loaded.ml.config
    assert (cfg.retention_time_ms, cfg.retention_size_bytes) == (-1, 100 * 1024 * 1024)
    storage = loaded.ml.storage
    assert (storage.ensemble_size, storage.write_quorum, storage.ack_quorum) == (1, 1, 1)  # type: ignore[attr-defined]
    _set_topic(node, topic, retentionPolicies=RetentionPolicies(10, -1))
    _policy_applied(node, topic, lambda p: p.retention_time_ms == 600_000)
    assert loaded.ml.config.retention_size_bytes == -1
    node.call(node.policies.update_topic(TopicName.parse(topic), lambda p: TopicPolicies()))
    _policy_applied(node, topic, lambda p: p.retention_time_ms == -1)
