"""Namespace/topic policies: Pulsar's JSON names, resolution order, storage and live view."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import cast

import pytest

from magnetar.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    BrokerDefaults,
    PersistencePolicies,
    Policies,
    PolicyCache,
    PolicyError,
    PolicyStore,
    RetentionPolicies,
    TopicPolicies,
    namespace_path,
    parse_policy_path,
    resolve,
    topic_path,
)
from magnetar.common.names import NamespaceName, TopicName
from magnetar.metadata import MetadataStore, connect
from magnetar.metadata.store import GetResult
from magnetar.testing import wait_until_async

_names = itertools.count()
NS = NamespaceName.of("public", "default")


def test_pulsar_json_round_trip_keeps_unknown_fields() -> None:
    # A value as Pulsar's admin API writes it (Policies.java field names).
    stored = {
        "auth_policies": {
            "namespace_auth": {},
            "destination_auth": {},
            "subscription_auth_roles": {},
        },
        "replication_clusters": ["standalone"],
        "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        "backlog_quota_map": {
            "destination_storage": {
                "limitSize": 1024,
                "limitTime": -1,
                "policy": "producer_exception",
            }
        },
        "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10},
        "message_ttl_in_seconds": 30,
        "deduplicationEnabled": True,
        "persistence": {
            "bookkeeperEnsemble": 3,
            "bookkeeperWriteQuorum": 2,
            "bookkeeperAckQuorum": 2,
            "managedLedgerMaxMarkDeleteRate": 0.0,
        },
        "max_producers_per_topic": 2,
        "autoTopicCreationOverride": {
            "allowAutoTopicCreation": False,
            "topicType": "non-partitioned",
        },
        "schema_compatibility_strategy": "FULL",
    }
    p = Policies.from_json(stored)
    assert p.retention_policies == RetentionPolicies(60, 10)
    assert p.backlog_quota_map[BacklogQuotaType.DESTINATION_STORAGE] == BacklogQuota(
        1024, -1, BacklogQuotaPolicy.PRODUCER_EXCEPTION
    )
    assert p.persistence == PersistencePolicies(3, 2, 2)
    assert p.autoTopicCreationOverride == AutoTopicCreationOverride(False)
    assert p.extra == {"bundles": stored["bundles"]}
    again = Policies.decode(p.encode())
    assert again == p
    assert json.loads(p.encode())["bundles"] == stored["bundles"]


@pytest.mark.parametrize(
    "bad",
    [
        b"[1]",
        b"{not json",
        json.dumps({"message_ttl_in_seconds": "ten"}).encode(),
        json.dumps({"backlog_quota_map": {"x": {}}}).encode(),
        json.dumps(
            {
                "persistence": {
                    "bookkeeperEnsemble": 1,
                    "bookkeeperWriteQuorum": 2,
                    "bookkeeperAckQuorum": 1,
                }
            }
        ).encode(),
        json.dumps(
            {
                "autoTopicCreationOverride": {
                    "allowAutoTopicCreation": True,
                    "topicType": "partitioned",
                }
            }
        ).encode(),
    ],
)
def test_malformed_policies_raise_policy_error(bad: bytes) -> None:
    with pytest.raises(PolicyError):
        Policies.decode(bad)


def test_resolution_topic_then_namespace_then_broker() -> None:
    defaults = BrokerDefaults(deduplication_enabled=False, max_unacked_messages_per_consumer=7)
    eff = resolve(defaults, None, None)
    assert (eff.retention_time_ms, eff.message_ttl_ms, eff.backlog_quota_size_bytes) == (0, -1, -1)
    assert eff.max_unacked_messages_per_consumer == 7 and not eff.deduplication_enabled
    ns = Policies(
        retention_policies=RetentionPolicies(-1, 5),
        message_ttl_in_seconds=10,
        deduplicationEnabled=True,
        max_producers_per_topic=3,
        backlog_quota_map={
            BacklogQuotaType.DESTINATION_STORAGE: BacklogQuota(
                2048, -1, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
            ),
            BacklogQuotaType.MESSAGE_AGE: BacklogQuota(
                -1, 60, BacklogQuotaPolicy.PRODUCER_EXCEPTION
            ),
        },
        autoTopicCreationOverride=AutoTopicCreationOverride(True, "partitioned", 4),
    )
    eff = resolve(defaults, ns, None)
    assert eff.retention_time_ms == -1 and eff.retention_size_bytes == 5 * 1024 * 1024
    assert eff.message_ttl_ms == 10_000 and eff.deduplication_enabled
    assert eff.max_producers_per_topic == 3
    assert eff.backlog_quota_size_bytes == 2048 and eff.backlog_quota_time_ms == 60_000
    assert eff.backlog_quota_policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    assert eff.allow_auto_topic_creation and eff.auto_topic_partitions == 4
    tp = TopicPolicies(messageTTLInSeconds=0, deduplicationEnabled=False, maxProducerPerTopic=1)
    eff = resolve(defaults, ns, tp)
    assert eff.message_ttl_ms == -1 and not eff.deduplication_enabled
    assert eff.max_producers_per_topic == 1
    assert eff.retention_size_bytes == 5 * 1024 * 1024  # not overridden: namespace level


def test_policy_paths() -> None:
    topic = TopicName.parse("persistent://t/n/a b")
    assert namespace_path(NS) == "/admin/policies/public/default"
    assert topic_path(topic) == "/admin/topic-policies/t/n/persistent/a%20b"
    assert parse_policy_path(namespace_path(NS)) == (NS, None)
    assert parse_policy_path(topic_path(topic)) == (NamespaceName.of("t", "n"), topic)
    assert parse_policy_path("/admin/policies/public") is None


async def test_store_updates_and_cache_follows_changes() -> None:
    store = await connect(f"memory:policies-{next(_names)}")
    policies = PolicyStore(store)
    await policies.create_namespace(NS, Policies())
    cache = PolicyCache(store, BrokerDefaults())
    seen: list[tuple[NamespaceName | None, TopicName | None]] = []

    async def listener(ns: NamespaceName | None, topic: TopicName | None) -> None:
        seen.append((ns, topic))

    cache.add_listener(listener)
    await cache.start()
    try:
        topic = TopicName.parse("persistent://public/default/x")
        assert (await cache.effective(topic)).message_ttl_ms == -1
        await policies.update_namespace(NS, lambda p: p.with_(message_ttl_in_seconds=5))
        await wait_until_async(lambda: (NS, None) in seen, timeout_s=10)
        assert (await cache.effective(topic, fresh=True)).message_ttl_ms == 5000

        async def cached_ttl() -> bool:
            return (await cache.effective(topic)).message_ttl_ms == 5000

        await wait_until_async(cached_ttl, timeout_s=10)
        await policies.update_topic(topic, lambda p: p.with_(messageTTLInSeconds=1))
        await wait_until_async(lambda: (NS, topic) in seen, timeout_s=10)
        # a partition takes its base topic's overrides
        eff = await cache.effective(topic.partition(0), fresh=True)
        assert eff.message_ttl_ms == 1000
        await policies.delete_topic(topic)
        assert await policies.get_topic(topic) is None
        await asyncio.gather(
            *(
                policies.update_namespace(
                    NS,
                    lambda p: p.with_(max_producers_per_topic=(p.max_producers_per_topic or 0) + 1),
                )
                for _ in range(5)
            )
        )
        got = await policies.get_namespace(NS)
        assert got is not None and got.max_producers_per_topic == 5
    finally:
        await cache.close()
        await store.close()


async def test_a_write_through_a_store_told_of_it_is_applied_before_it_returns() -> None:
    """The admin API's writes (``PolicyStore(on_written=PolicyCache.written)``): when the write
    returns, the listeners (the broker's loaded topics) are done with it and the cache serves
    the new value, without waiting for the store's notification and its listeners."""
    store = await connect(f"memory:policies-{next(_names)}")
    cache = PolicyCache(store, BrokerDefaults())
    seen: list[tuple[NamespaceName | None, TopicName | None]] = []

    async def listener(ns: NamespaceName | None, topic: TopicName | None) -> None:
        await asyncio.sleep(0.05)  # as the broker's fresh reads of the policies take time
        seen.append((ns, topic))

    cache.add_listener(listener)
    await cache.start()
    policies = PolicyStore(store, on_written=cache.written)
    try:
        await policies.create_namespace(NS, Policies())
        topic = TopicName.parse("persistent://public/default/y")
        assert (await cache.effective(topic)).message_ttl_ms == -1  # now cached
        await policies.update_namespace(NS, lambda p: p.with_(message_ttl_in_seconds=5))
        assert seen[-1] == (NS, None)
        assert (await cache.effective(topic)).message_ttl_ms == 5000
        await policies.update_topic(topic, lambda p: p.with_(messageTTLInSeconds=1))
        assert seen[-1] == (NS, topic)
        assert (await cache.effective(topic)).message_ttl_ms == 1000
        await policies.delete_topic(topic)
        assert seen[-1] == (NS, topic)
        assert (await cache.effective(topic)).message_ttl_ms == 5000
    finally:
        await cache.close()
        await store.close()


async def test_topics_without_overrides_cost_no_read_each() -> None:
    """Resolving many topics of a namespace where few have overrides reads the watched list
    of those that have some, not each topic's node (a broker loading 10 000 topics made
    10 000 reads of absent nodes); a topic given overrides is read once it is listed."""
    store = await connect(f"memory:policies-{next(_names)}")
    reads: list[str] = []

    class Counted:
        """The real store, its reads of topic policies counted."""

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def get(self, path: str) -> GetResult:
            reads.append(path)
            return await store.get(path)

        async def children(self, path: str) -> list[str]:
            reads.append(path)
            return await store.children(path)

    policies = PolicyStore(store)
    await policies.create_namespace(NS, Policies())
    cache = PolicyCache(cast(MetadataStore, Counted()), BrokerDefaults())
    await cache.start()
    try:
        topics = [TopicName.parse(f"persistent://public/default/t{i}") for i in range(20)]
        await policies.update_topic(topics[3], lambda p: p.with_(messageTTLInSeconds=7))
        reads.clear()
        ttls = [(await cache.effective(t)).message_ttl_ms for t in topics]
        assert ttls == [-1] * 3 + [7000] + [-1] * 16
        assert sorted(set(reads)) == [
            namespace_path(NS),
            "/admin/topic-policies/public/default/persistent",
            topic_path(topics[3]),
        ]
        assert len(reads) == 3
        await policies.update_topic(topics[5], lambda p: p.with_(messageTTLInSeconds=9))

        async def listed() -> bool:
            return (await cache.effective(topics[5])).message_ttl_ms == 9000

        await wait_until_async(listed, timeout_s=10, what="the new overrides applied")
    finally:
        await cache.close()
        await store.close()
