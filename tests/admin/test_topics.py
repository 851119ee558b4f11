"""Topics, partitioned topics, topic operations and stats over REST, with traffic from the
official ``pulsar`` wheel. Stats JSON is compared field by field with reference §8.3."""

from __future__ import annotations

import time

import pulsar

from magnetar.testing import wait_until

from .conftest import Http

TOPIC_FIELDS = [
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "averageMsgSize",
    "bytesInCounter",
    "msgInCounter",
    "bytesOutCounter",
    "msgOutCounter",
    "msgChunkPublished",
    "storageSize",
    "offloadedStorageSize",
    "backlogSize",
    "earliestMsgPublishTimeInBacklogs",
    "oldestBacklogMessageAgeSeconds",
    "oldestBacklogMessageSubscriptionName",
    "backlogQuotaLimitSize",
    "backlogQuotaLimitTime",
    "waitingPublishers",
    "deduplicationStatus",
    "topicEpoch",
    "filteredEntriesCount",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "ownerBroker",
    "topicCreationTimeStamp",
    "lastPublishTimestamp",
    "publishers",
    "subscriptions",
    "replication",
]
PUBLISHER_FIELDS = [
    "producerId",
    "producerName",
    "address",
    "connectedSince",
    "accessMode",
    "msgRateIn",
    "msgThroughputIn",
    "averageMsgSize",
    "chunkedMessageRate",
    "clientVersion",
    "metadata",
    "supportsPartialProducer",
]
SUBSCRIPTION_FIELDS = [
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "msgBacklog",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "backlogSize",
    "unackedMessages",
    "blockedSubscriptionOnUnackedMsgs",
    "type",
    "activeConsumerName",
    "msgRateExpired",
    "totalMsgExpired",
    "lastExpireTimestamp",
    "lastConsumedFlowTimestamp",
    "lastConsumedTimestamp",
    "lastAckedTimestamp",
    "lastMarkDeleteAdvancedTimestamp",
    "earliestMsgPublishTimeInBacklog",
    "isDurable",
    "isReplicated",
    "allowOutOfOrderDelivery",
    "keySharedMode",
    "consumersAfterMarkDeletePosition",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
    "subscriptionProperties",
    "filterProcessedMsgCount",
    "filterAcceptedMsgCount",
    "filterRejectedMsgCount",
    "filterRescheduledMsgCount",
    "consumers",
]
CONSUMER_FIELDS = [
    "consumerName",
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "availablePermits",
    "unackedMessages",
    "avgMessagesPerEntry",
    "blockedConsumerOnUnackedMsgs",
    "lastAckedTimestamp",
    "lastConsumedTimestamp",
    "lastConsumedFlowTimestamp",
    "readPositionWhenJoining",
    "address",
    "connectedSince",
    "clientVersion",
    "keyHashRanges",
    "metadata",
]
INTERNAL_FIELDS = [
    "entriesAddedCounter",
    "numberOfEntries",
    "totalSize",
    "currentLedgerEntries",
    "currentLedgerSize",
    "lastLedgerCreatedTimestamp",
    "lastLedgerCreationFailureTimestamp",
    "waitingCursorsCount",
    "pendingAddEntriesCount",
    "lastConfirmedEntry",
    "state",
    "ledgers",
    "cursors",
    "schemaLedgers",
    "compactedLedger",
]
LEDGER_FIELDS = ["ledgerId", "entries", "size", "offloaded", "metadata", "underReplicated"]
CURSOR_FIELDS = [
    "markDeletePosition",
    "readPosition",
    "waitingReadOp",
    "pendingReadOps",
    "messagesConsumedCounter",
    "cursorLedger",
    "cursorLedgerLastEntry",
    "individuallyDeletedMessages",
    "lastLedgerSwitchTimestamp",
    "state",
    "numberOfEntriesSinceFirstNotAckedMessage",
    "totalNonContiguousDeletedMessagesRange",
    "properties",
]


def _missing(obj: dict[str, object], fields: list[str]) -> list[str]:
    return [f for f in fields if f not in obj]


def test_create_list_delete_topic(http: Http, client: pulsar.Client, name: str) -> None:
    base = "/admin/v2/persistent/public/default"
    topic = f"{base}/{name}"
    assert http.get(f"{topic}/stats").status == 404
    assert http.put(topic).status == 204
    assert http.put(topic).status == 409
    assert f"persistent://public/default/{name}" in http.ok("GET", base)
    assert http.put(f"{base}/bad%2Fname%20x").status in (400, 404)
    assert http.put("/admin/v2/persistent/public/nons/x").status == 404
    assert http.put(f"{topic}x", raw=b"{bad").status == 400
    producer = client.create_producer(f"persistent://public/default/{name}")
    busy = http.delete(topic)
    assert busy.status == 412, busy.body
    assert http.delete(f"{topic}?force=true").status == 204
    producer.close()
    assert f"persistent://public/default/{name}" not in http.ok("GET", base)
    assert http.delete(topic).status == 404
    assert http.get("/admin/v2/bogus-domain/public/default").status == 404


def test_partitioned_topics(http: Http, client: pulsar.Client, name: str) -> None:
    base = "/admin/v2/persistent/public/default"
    topic = f"{base}/{name}"
    assert http.ok("GET", f"{topic}/partitions") == {"partitions": 0}
    assert http.put(f"{topic}/partitions", 0).status == 400
    assert http.put(f"{topic}/partitions", raw=b"x").status == 400
    assert http.put(f"{topic}/partitions", 2).status == 204
    assert http.put(f"{topic}/partitions", 2).status == 409
    assert http.ok("GET", f"{topic}/partitions") == {"partitions": 2}
    assert f"persistent://public/default/{name}" in http.ok("GET", f"{base}/partitioned")
    assert http.post(f"{topic}/partitions", 1).status == 400  # only grows
    assert http.post(f"{base}/{name}-none/partitions", 3).status == 404
    assert http.post(f"{topic}/partitions", 3).status == 204
    assert http.ok("GET", f"{topic}/partitions") == {"partitions": 3}
    assert len(client.get_topic_partitions(f"persistent://public/default/{name}")) == 3
    producer = client.create_producer(f"persistent://public/default/{name}")
    assert http.delete(f"{topic}/partitions").status == 412
    producer.close()
    assert http.delete(topic).status == 409  # a partitioned topic needs …/partitions
    assert http.delete(f"{topic}/partitions").status == 204
    assert http.delete(f"{topic}/partitions").status == 404
    assert http.ok("GET", f"{topic}/partitions") == {"partitions": 0}


def test_terminate_last_message_id_and_message_id_by_time(
    http: Http, client: pulsar.Client, name: str
) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    before_ms = int(time.time() * 1000)
    producer = client.create_producer(full, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    last = http.ok("GET", f"{topic}/lastMessageId")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    first = http.ok("GET", f"{topic}/messageid/{before_ms - 60_000}")
    assert (first["ledgerId"], first["entryId"]) == (ids[0].ledger_id(), ids[0].entry_id())
    assert http.get(f"{topic}/messageid/{before_ms + 3_600_000}").status == 404
    assert http.get(f"{topic}/messageid/notanumber").status == 400
    terminated = http.ok("POST", f"{topic}/terminate")
    assert (terminated["ledgerId"], terminated["entryId"]) == (
        ids[-1].ledger_id(),
        ids[-1].entry_id(),
    )
    try:
        producer.send(b"after")
        raise AssertionError("send after terminate succeeded")
    except pulsar.TopicTerminated:
        pass  # the client closes a producer of a terminated topic itself
    assert http.post("/admin/v2/persistent/public/default/nope/terminate").status == 404
    http.ok("PUT", f"{topic}-p/partitions", 2)
    assert http.post(f"{topic}-p/terminate").status == 405


def test_unload_clients_reconnect(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    consumer = client.subscribe(full, "s")
    producer = client.create_producer(full, batching_enabled=False)
    producer.send(b"one")
    first = consumer.receive(10_000)
    assert first.data() == b"one"
    consumer.acknowledge(first)
    wait_until(
        lambda: http.ok("GET", f"{topic}/stats")["subscriptions"]["s"]["msgBacklog"] == 0,
        timeout_s=10,
    )
    assert http.put(f"{topic}/unload").status == 204
    producer.send(b"two")  # reconnects and reloads the topic
    msg = consumer.receive(15_000)
    assert msg.data() == b"two"
    consumer.acknowledge(msg)
    assert http.put("/admin/v2/persistent/public/default/never-existed/unload").status == 404


def test_stats_shapes_and_failover_active_consumer(
    http: Http, client: pulsar.Client, name: str
) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    c1 = client.subscribe(
        full, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c-1"
    )
    c2 = client.subscribe(
        full, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c-2"
    )
    shared = client.subscribe(
        full, "sh", consumer_type=pulsar.ConsumerType.Shared, consumer_name="s-1"
    )
    producer = client.create_producer(full, producer_name=f"{name}-prod", batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    got = 0
    for consumer in (c1, c2):
        while True:
            try:
                msg = consumer.receive(300)
            except pulsar.Timeout:
                break
            consumer.acknowledge(msg)
            got += 1
    assert got == 10
    for _ in range(10):
        shared.acknowledge(shared.receive(10_000))

    def settled() -> dict[str, object] | None:
        s = http.ok("GET", f"{topic}/stats")
        fo = s["subscriptions"]["fo"]
        return s if fo["msgBacklog"] == 0 and s["subscriptions"]["sh"]["msgBacklog"] == 0 else None

    stats = wait_until(settled, timeout_s=15)
    assert _missing(stats, TOPIC_FIELDS) == []
    assert isinstance(stats["publishers"], list) and isinstance(stats["subscriptions"], dict)
    assert stats["replication"] == {}
    assert stats["msgInCounter"] == 10 and stats["bytesInCounter"] > 0
    assert stats["msgOutCounter"] == 20
    assert stats["msgRateIn"] > 0 and stats["storageSize"] > 0
    assert stats["deduplicationStatus"] == "Disabled"
    [pub] = stats["publishers"]
    assert _missing(pub, PUBLISHER_FIELDS) == []
    assert pub["producerName"] == f"{name}-prod" and pub["accessMode"] == "Shared"
    fo = stats["subscriptions"]["fo"]
    assert _missing(fo, SUBSCRIPTION_FIELDS) == []
    assert fo["type"] == "Failover"
    assert fo["activeConsumerName"] in ("c-1", "c-2")
    assert sorted(c["consumerName"] for c in fo["consumers"]) == ["c-1", "c-2"]
    for c in fo["consumers"]:
        assert _missing(c, CONSUMER_FIELDS) == []
    assert fo["msgOutCounter"] == 10 and fo["isDurable"] is True
    sh = stats["subscriptions"]["sh"]
    assert sh["type"] == "Shared" and sh["activeConsumerName"] is None
    assert sh["consumers"][0]["lastAckedTimestamp"] > 0
    # the active consumer leaves: the other one becomes active
    active = fo["activeConsumerName"]
    (c1 if active == "c-1" else c2).close()
    other = "c-2" if active == "c-1" else "c-1"
    wait_until(
        lambda: (
            http.ok("GET", f"{topic}/stats")["subscriptions"]["fo"]["activeConsumerName"] == other
        ),
        timeout_s=15,
    )

    internal = http.ok("GET", f"{topic}/internalStats")
    assert _missing(internal, INTERNAL_FIELDS) == []
    assert internal["numberOfEntries"] == 10 and internal["entriesAddedCounter"] >= 10
    assert internal["ledgers"] and _missing(internal["ledgers"][0], LEDGER_FIELDS) == []
    assert set(internal["cursors"]) == {"fo", "sh"}
    assert _missing(internal["cursors"]["fo"], CURSOR_FIELDS) == []
    assert internal["lastConfirmedEntry"] == internal["cursors"]["sh"]["markDeletePosition"]
    producer.close()


def test_partitioned_stats(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    http.ok("PUT", f"{topic}/partitions", 2)
    consumer = client.subscribe(full, "sub")
    producer = client.create_producer(full, batching_enabled=False)
    for i in range(8):
        producer.send(f"m{i}".encode(), partition_key=str(i))
    stats = http.ok("GET", f"{topic}/partitioned-stats?perPartition=true")
    assert stats["metadata"] == {"partitions": 2}
    assert set(stats["partitions"]) == {f"{full}-partition-0", f"{full}-partition-1"}
    assert stats["msgInCounter"] == 8
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 8
    assert _missing(stats, [f for f in TOPIC_FIELDS if f != "topicEpoch"]) == []
    assert "sub" in stats["subscriptions"] and len(stats["publishers"]) == 2
    assert http.ok("GET", f"{topic}/partitioned-stats?perPartition=false")["partitions"] == {}
    internal = http.ok("GET", f"{topic}/partitioned-internalStats")
    assert internal["metadata"] == {"partitions": 2} and len(internal["partitions"]) == 2
    assert http.get(f"{topic}x/partitioned-stats").status == 404
    consumer.close()
    producer.close()


def test_compaction_trigger_and_status(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    producer = client.create_producer(full, batching_enabled=False)
    for i in range(20):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 4}")
    assert http.ok("GET", f"{topic}/compaction") == {"status": "NOT_RUN", "lastError": ""}
    assert http.put(f"{topic}/compaction").status == 204
    done = wait_until(
        lambda: http.ok("GET", f"{topic}/compaction")["status"] in ("SUCCESS", "ERROR"),
        timeout_s=30,
    )
    assert done
    assert http.ok("GET", f"{topic}/compaction")["status"] == "SUCCESS"
    assert http.put("/admin/v2/persistent/public/default/no-such-topic/compaction").status == 404
    producer.close()
