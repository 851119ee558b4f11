"""The replication manager on two in-process brokers (clusters ``east`` and ``west``, each
with its own metadata store): the topic hooks start a replicator when the namespace's
clusters change on a loaded topic, messages reach the other cluster through
``magnetar.client``, and closing the topic stops the replicator."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from magnetar.auth.client_credentials import NO_CREDENTIALS
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import Topic
from magnetar.client import Client, InitialPosition
from magnetar.common.names import NamespaceName, TopicName
from magnetar.protocol import Entry
from magnetar.replication.manager import ReplicationManager, attach_replication
from magnetar.replication.stats import replication_stats
from magnetar.testing import wait_until_async
from tests.broker.test_service_connection import new_topic, running_broker

NS = NamespaceName.of("public", "default")


class RecordingHooks:
    """A topic hook that writes down what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def topic_loaded(self, topic: Topic) -> None:
        self.calls.append(("loaded", topic.full_name))

    def policies_applied(self, topic: Topic) -> None:
        self.calls.append(("policies", topic.full_name))

    async def topic_closing(self, topic: Topic) -> None:
        self.calls.append(("closing", topic.full_name))


async def _register(broker: BrokerService, name: str, other: BrokerService) -> None:
    data = {"brokerServiceUrl": f"pulsar://127.0.0.1:{other.port}"}
    await broker.store.put(f"/admin/clusters/{name}", json.dumps(data).encode())


async def _replicate_to_both(broker: BrokerService) -> None:
    await broker.policies.policy_store.update_namespace(
        NS, lambda p: p.with_(replication_clusters=("east", "west"))
    )


async def test_hooks_start_replicators_on_a_policy_change_and_stop_them_on_close(
    tmp_path: Path,
) -> None:
    async with (
        running_broker(tmp_path / "east", cluster_name="east") as east,
        running_broker(tmp_path / "west", cluster_name="west") as west,
    ):
        manager = attach_replication(east, NO_CREDENTIALS)
        recording = RecordingHooks()
        east.topic_hooks.append(recording)
        await _register(east, "west", west)
        topic = new_topic()
        async with Client(f"pulsar://127.0.0.1:{east.port}") as east_client:
            producer = await east_client.create_producer(topic, batching_enabled=False)
            await producer.send(b"before")  # the topic replicates nowhere yet
            assert ("loaded", topic) in recording.calls
            assert manager.replicators_of(topic) == {}

            await _replicate_to_both(east)
            await wait_until_async(
                lambda: "west" in manager.replicators_of(topic), what="replicator started"
            )
            assert ("policies", topic) in recording.calls
            async with Client(f"pulsar://127.0.0.1:{west.port}") as west_client:
                consumer = await west_client.subscribe(
                    topic, "s", initial_position=InitialPosition.Earliest
                )
                for i in range(10):
                    await producer.send(f"m{i}".encode())
                got = [(await asyncio.wait_for(consumer.receive(), 10)).data() for _ in range(10)]
                assert got == [f"m{i}".encode() for i in range(10)]  # "before" was not sent
                replicator = manager.replicators_of(topic)["west"]
                await wait_until_async(
                    lambda: replicator.backlog_messages == 0, what="backlog drained"
                )
            await producer.close()
        await east.unload_topic(TopicName.parse(topic))
        assert ("closing", topic) in recording.calls
        assert manager.replicators_of(topic) == {}
        assert isinstance(manager, ReplicationManager)


async def test_a_topic_that_replicates_nowhere_leaves_nothing_in_the_manager(
    tmp_path: Path,
) -> None:
    """Most topics are not replicated: loading one keeps no per-topic entry (no replicator
    map, no lock) in the manager, so many idle topics cost it nothing."""
    async with running_broker(tmp_path / "east", cluster_name="east") as east:
        manager = attach_replication(east, NO_CREDENTIALS)
        topic = new_topic()
        async with Client(f"pulsar://127.0.0.1:{east.port}") as client:
            producer = await client.create_producer(topic, batching_enabled=False)
            await producer.send(b"m")
            assert east.loaded_topic(TopicName.parse(topic)) is not None
            assert manager._replicators == {} and manager._locks == {}
            await producer.close()


async def test_message_ttl_expires_the_replication_backlog(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "east", cluster_name="east") as east:
        manager = attach_replication(east, NO_CREDENTIALS)
        # west is registered at a port nobody listens on: nothing can be sent
        await east.store.put(
            "/admin/clusters/west",
            json.dumps({"brokerServiceUrl": "pulsar://127.0.0.1:9"}).encode(),
        )
        await _replicate_to_both(east)
        topic = new_topic()
        async with Client(f"pulsar://127.0.0.1:{east.port}") as client:
            producer = await client.create_producer(topic, batching_enabled=False)
            for i in range(5):
                await producer.send(f"m{i}".encode())
            replicator = manager.replicators_of(topic)["west"]
            assert replicator.backlog_messages == 5
            assert not replicator.connected
            first_publish_ms = await _first_publish_ms(east, topic)
            await wait_until_async(  # a failed attempt notes where replication stalls
                lambda: replicator.stats.stalled_publish_ms == first_publish_ms,
                timeout_s=20,
                what="the oldest unreplicated publish time noted",
            )
            before_ms = east.clock.now_ms()
            delay_s = replicator.delay_s()
            after_ms = east.clock.now_ms()
            assert (before_ms - first_publish_ms) // 1000 <= delay_s
            assert delay_s <= (after_ms - first_publish_ms) // 1000
            await east.policies.policy_store.update_namespace(
                NS, lambda p: p.with_(message_ttl_in_seconds=1)
            )
            await wait_until_async(
                lambda: replicator.backlog_messages == 0, timeout_s=15, what="TTL expired it"
            )
            loaded = east.loaded_topic(TopicName.parse(topic))
            assert loaded is not None
            stats = replication_stats(loaded)["west"]
            assert stats["replicationBacklog"] == 0 and stats["msgRateExpired"] > 0


async def _first_publish_ms(broker: BrokerService, topic: str) -> int:
    loaded = broker.loaded_topic(TopicName.parse(topic))
    assert loaded is not None
    first = loaded.ml.ledgers.first_position
    data = await loaded.ml.read_range(first.ledger_id, first.entry_id, first.entry_id)
    return Entry(data[0]).metadata.publish_time
