"""Topic-level policies over REST (``T/maxConsumers``, ``T/messageTTL?messageTTL=``, …):
round trips, ``?applied=true`` resolution, Pulsar's status codes, and enforcement seen
through the official ``pulsar`` wheel (topic values override the namespace's).

A change reaches the broker through metadata notifications. To know it is in force
without sleeping, each enforcement test then sets a topic backlog quota "marker" (a size
no test reaches) and waits until the topic's stats show it: the broker re-resolves every
policy from the store on each notification, so the marker being live means the change
written before it is live too.
"""

from __future__ import annotations

import itertools
from typing import Any

import pulsar
import pytest

from magnetar.testing import wait_until

from .conftest import Http

_markers = itertools.count(1)

# (path, a value to set, the JSON GET answers for it, a value answering 412 or None)
ROUND_TRIPS: list[tuple[str, Any, Any, Any]] = [
    (
        "retention",
        {"retentionTimeInMinutes": 10, "retentionSizeInMB": 20},
        {"retentionTimeInMinutes": 10, "retentionSizeInMB": 20},
        {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5},
    ),
    ("deduplicationEnabled", True, True, None),
    (
        "persistence",
        {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1},
        {
            "bookkeeperEnsemble": 1,
            "bookkeeperWriteQuorum": 1,
            "bookkeeperAckQuorum": 1,
            "managedLedgerMaxMarkDeleteRate": 0.0,
        },
        {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1},
    ),
    ("maxProducers", 3, 3, -1),
    ("maxConsumers", 4, 4, -2),
    ("maxConsumersPerSubscription", 2, 2, -1),
    ("maxUnackedMessagesOnConsumer", 100, 100, -1),
    ("maxUnackedMessagesOnSubscription", 1000, 1000, -1),
]

INVALID_REASONS = {
    "maxProducers": "maxProducers must be 0 or more",
    "maxConsumers": "maxConsumers must be 0 or more",
    "maxUnackedMessagesOnConsumer": "maxUnackedNum must be 0 or more",
    "maxUnackedMessagesOnSubscription": "maxUnackedNum must be 0 or more",
    "persistence": "Bookkeeper Ensemble (1) >= WriteQuorum (2) >= AckQuoru (1)",
}


def _namespace(http: Http, name: str) -> str:
    """A fresh namespace ``public/<name>`` with no policy set; its REST base path."""
    http.ok("PUT", f"/admin/v2/namespaces/public/{name}")
    return f"/admin/v2/namespaces/public/{name}"


def _in_force(http: Http, topic: str) -> None:
    """Wait until every topic policy written so far is applied to the loaded topic."""
    marker = 10**12 + next(_markers)
    http.ok(
        "POST",
        f"{topic}/backlogQuota?backlogQuotaType=destination_storage",
        {"limitSize": marker, "limitTime": -1, "policy": "producer_request_hold"},
    )
    wait_until(
        lambda: http.ok("GET", f"{topic}/stats")["backlogQuotaLimitSize"] == marker,
        timeout_s=15,
    )


def test_round_trips_and_status_codes(http: Http, name: str) -> None:
    base = "/admin/v2/persistent/public/default"
    topic = f"{base}/{name}"
    assert http.get(f"{topic}/maxConsumers").status == 404  # no such topic
    assert http.post(f"{topic}/maxConsumers", 1).status == 404
    http.ok("PUT", topic)
    for path, value, answer, invalid in ROUND_TRIPS:
        assert http.get(f"{topic}/{path}").status == 204, path  # not set
        assert http.post(f"{topic}/{path}", value).status == 204, path
        assert http.ok("GET", f"{topic}/{path}") == answer, path
        if invalid is not None:
            refused = http.post(f"{topic}/{path}", invalid)
            assert refused.status == 412, (path, refused.body)
            if path in INVALID_REASONS:
                assert refused.reason == INVALID_REASONS[path]
            assert http.ok("GET", f"{topic}/{path}") == answer, path  # unchanged
        assert http.post(f"{topic}/{path}", raw=b"{nope").status == 400, path
        assert http.delete(f"{topic}/{path}").status == 204, path
        assert http.get(f"{topic}/{path}").status == 204, path
    # messageTTL takes its value as a query parameter
    assert http.post(f"{topic}/messageTTL?messageTTL=30").status == 204
    assert http.ok("GET", f"{topic}/messageTTL") == 30
    refused = http.post(f"{topic}/messageTTL?messageTTL=-2")
    assert (refused.status, refused.reason) == (412, "Invalid value for message TTL")
    assert http.post(f"{topic}/messageTTL?messageTTL=abc").status == 400
    assert http.delete(f"{topic}/messageTTL").status == 204
    assert http.get(f"{topic}/messageTTL").status == 204
    # backlog quotas, per type, read as a map
    assert http.ok("GET", f"{topic}/backlogQuotaMap") == {}
    quota = {"limitSize": 4096, "limitTime": -1, "policy": "producer_exception"}
    assert (
        http.post(f"{topic}/backlogQuota?backlogQuotaType=destination_storage", quota).status == 204
    )
    age = {"limitSize": -1, "limitTime": 60, "policy": "producer_request_hold"}
    assert http.post(f"{topic}/backlogQuota?backlogQuotaType=message_age", age).status == 204
    quotas = http.ok("GET", f"{topic}/backlogQuotaMap")
    assert quotas["destination_storage"]["limitSize"] == 4096
    assert quotas["destination_storage"]["policy"] == "producer_exception"
    assert quotas["message_age"]["limitTime"] == 60
    assert http.post(f"{topic}/backlogQuota?backlogQuotaType=bogus", quota).status == 400
    assert http.post(f"{topic}/backlogQuota", {"policy": "nonsense"}).status == 400
    assert http.delete(f"{topic}/backlogQuota?backlogQuotaType=message_age").status == 204
    assert set(http.ok("GET", f"{topic}/backlogQuotaMap")) == {"destination_storage"}
    # a retention limit must exceed the backlog quota, and the reverse
    small = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}
    http.ok("POST", f"{topic}/backlogQuota", {"limitSize": 2 * 1024 * 1024, "limitTime": -1})
    refused = http.post(f"{topic}/retention", small)
    assert refused.status == 412 and "Retention Quota must exceed" in refused.reason
    http.ok("DELETE", f"{topic}/backlogQuota")
    http.ok("POST", f"{topic}/retention", small)
    refused = http.post(f"{topic}/backlogQuota", {"limitSize": 2 * 1024 * 1024, "limitTime": -1})
    assert refused.status == 412 and "exceeds configured retention" in refused.reason
    # a partition's name is refused, a partitioned topic's name is accepted
    http.ok("PUT", f"{topic}-p/partitions", 2)
    refused = http.get(f"{topic}-p-partition-0/maxConsumers")
    assert refused.status == 412 and "partition" in refused.reason
    assert http.post(f"{topic}-p/maxConsumers", 2).status == 204
    assert http.ok("GET", f"{topic}-p/maxConsumers") == 2
    assert http.get("/admin/v2/persistent/public/nons/x/maxConsumers").status == 404


def test_applied_values_fall_back_to_namespace_then_broker(http: Http, name: str) -> None:
    ns = _namespace(http, name)
    topic = f"/admin/v2/persistent/public/{name}/t"
    http.ok("PUT", topic)
    # broker defaults
    assert http.ok("GET", f"{topic}/maxConsumers?applied=true") == 0
    assert http.ok("GET", f"{topic}/messageTTL?applied=true") == 0
    assert http.ok("GET", f"{topic}/deduplicationEnabled?applied=true") is False
    assert http.ok("GET", f"{topic}/maxUnackedMessagesOnConsumer?applied=true") == 50_000
    assert http.ok("GET", f"{topic}/retention?applied=true") == {
        "retentionTimeInMinutes": 0,
        "retentionSizeInMB": 0,
    }
    default_quota = http.ok("GET", f"{topic}/backlogQuotaMap?applied=true")
    assert set(default_quota) == {"destination_storage", "message_age"}
    assert default_quota["destination_storage"]["limitSize"] == -1
    # namespace values
    http.ok("POST", f"{ns}/maxConsumersPerTopic", 7)
    http.ok("POST", f"{ns}/messageTTL", 120)
    http.ok("POST", f"{ns}/retention", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 6})
    assert http.ok("GET", f"{topic}/maxConsumers?applied=true") == 7
    assert http.ok("GET", f"{topic}/messageTTL?applied=true") == 120
    assert http.ok("GET", f"{topic}/retention?applied=true")["retentionSizeInMB"] == 6
    assert http.get(f"{topic}/maxConsumers").status == 204  # nothing set on the topic
    # topic values win
    http.ok("POST", f"{topic}/maxConsumers", 1)
    assert http.ok("GET", f"{topic}/maxConsumers?applied=true") == 1


def test_topic_max_consumers_and_producers_override_namespace(
    http: Http, client: pulsar.Client, name: str
) -> None:
    ns = _namespace(http, name)
    full = f"persistent://public/{name}/t"
    topic = f"/admin/v2/persistent/public/{name}/t"
    http.ok("POST", f"{ns}/maxConsumersPerTopic", 3)
    shared = pulsar.ConsumerType.Shared
    c1 = client.subscribe(full, "s", consumer_type=shared)
    http.ok("POST", f"{topic}/maxConsumers", 1)
    http.ok("POST", f"{topic}/maxProducers", 1)
    _in_force(http, topic)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(full, "s", consumer_type=shared)
    p1 = client.create_producer(full)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(full)
    # removing the topic values: the namespace's limit (3 consumers) and no producer limit
    http.ok("DELETE", f"{topic}/maxConsumers")
    http.ok("DELETE", f"{topic}/maxProducers")
    _in_force(http, topic)
    c2 = client.subscribe(full, "s", consumer_type=shared)
    c3 = client.subscribe(full, "s2", consumer_type=shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(full, "s3", consumer_type=shared)
    client.create_producer(full).close()
    for c in (c1, c2, c3):
        c.close()
    p1.close()


def test_topic_ttl_overrides_namespace_ttl(http: Http, client: pulsar.Client, name: str) -> None:
    ns = _namespace(http, name)
    full = f"persistent://public/{name}/t"
    topic = f"/admin/v2/persistent/public/{name}/t"
    http.ok("POST", f"{ns}/messageTTL", 3600)
    client.subscribe(full, "idle").close()
    producer = client.create_producer(full, batching_enabled=False)
    for i in range(5):
        producer.send(f"old-{i}".encode())
    producer.close()
    assert http.ok("GET", f"{topic}/stats")["subscriptions"]["idle"]["msgBacklog"] == 5
    http.ok("POST", f"{topic}/messageTTL?messageTTL=1")
    wait_until(
        lambda: http.ok("GET", f"{topic}/stats")["subscriptions"]["idle"]["msgBacklog"] == 0,
        timeout_s=20,
    )


def test_topic_deduplication_drops_duplicates(http: Http, client: pulsar.Client, name: str) -> None:
    _namespace(http, name)
    full = f"persistent://public/{name}/t"
    topic = f"/admin/v2/persistent/public/{name}/t"
    http.ok("PUT", topic)
    assert http.ok("GET", f"{topic}/stats")["deduplicationStatus"] == "Disabled"
    http.ok("POST", f"{topic}/deduplicationEnabled", True)
    wait_until(
        lambda: http.ok("GET", f"{topic}/stats")["deduplicationStatus"] == "Enabled",
        timeout_s=15,
    )
    producer = client.create_producer(full, producer_name=f"{name}-p", batching_enabled=False)
    producer.send(b"a", sequence_id=1)
    producer.send(b"a-dup", sequence_id=1)
    producer.send(b"b", sequence_id=2)
    producer.close()
    reader = client.create_reader(full, pulsar.MessageId.earliest)
    got = [reader.read_next(10_000).data() for _ in range(2)]
    assert got == [b"a", b"b"]
    assert not reader.has_message_available()
    reader.close()


def test_topic_unacked_limit_and_backlog_quota(
    http: Http, client: pulsar.Client, name: str
) -> None:
    _namespace(http, name)
    full = f"persistent://public/{name}/t"
    topic = f"/admin/v2/persistent/public/{name}/t"
    http.ok("PUT", topic)
    http.ok("POST", f"{topic}/maxUnackedMessagesOnConsumer", 4)
    _in_force(http, topic)
    consumer = client.subscribe(full, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(full, batching_enabled=False)
    for _ in range(10):
        producer.send(b"x" * 1000)
    got = [consumer.receive(10_000) for _ in range(4)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(700)  # blocked at 4 unacknowledged
    # a topic backlog quota (producer_exception) refuses new producers over the limit
    quota = {"limitSize": 4096, "limitTime": -1, "policy": "producer_exception"}
    http.ok("POST", f"{topic}/backlogQuota?backlogQuotaType=destination_storage", quota)
    wait_until(
        lambda: http.ok("GET", f"{topic}/stats")["backlogQuotaLimitSize"] == 4096, timeout_s=15
    )
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(full)
    for m in got:
        consumer.acknowledge(m)
    consumer.receive(10_000)  # released
    producer.close()
    consumer.close()
