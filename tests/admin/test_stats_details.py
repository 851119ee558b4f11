"""Stats fields computed from stored data: per-partition stats of a new partitioned topic,
backlog publish times and age (read from the first unacknowledged entry), batch-aware
``messageAckRate`` and ``avgMessagesPerEntry``; peek of a compressed batch."""

from __future__ import annotations

import time

import pulsar
import pytest

from magnetar.protocol import split_batch
from magnetar.testing import wait_until

from .conftest import Http


def test_partitioned_stats_of_a_new_topic_list_every_partition(http: Http, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    http.ok("PUT", f"{topic}/partitions", 3)
    stats = http.ok("GET", f"{topic}/partitioned-stats?perPartition=true")
    assert set(stats["partitions"]) == {f"{full}-partition-{i}" for i in range(3)}
    for part in stats["partitions"].values():
        assert part["msgInCounter"] == 0 and part["publishers"] == []
    internal = http.ok("GET", f"{topic}/partitioned-internalStats")
    assert len(internal["partitions"]) == 3
    # growing the topic creates the new partitions too
    http.ok("POST", f"{topic}/partitions", 4)
    stats = http.ok("GET", f"{topic}/partitioned-stats?perPartition=true")
    assert len(stats["partitions"]) == 4
    assert f"{full}-partition-3" in http.ok("GET", "/admin/v2/persistent/public/default")


def test_backlog_publish_times_and_age(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    consumer = client.subscribe(full, "s", consumer_type=pulsar.ConsumerType.Shared)
    http.ok("PUT", f"{topic}/subscription/idle")
    stats = http.ok("GET", f"{topic}/stats")
    assert stats["earliestMsgPublishTimeInBacklogs"] == 0
    assert stats["oldestBacklogMessageAgeSeconds"] == -1
    assert stats["oldestBacklogMessageSubscriptionName"] is None
    producer = client.create_producer(full, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    first = consumer.receive(10_000)
    second = consumer.receive(10_000)
    consumer.acknowledge(first)

    def settled() -> dict[str, object] | None:
        s = http.ok("GET", f"{topic}/stats")
        return s if s["subscriptions"]["s"]["msgBacklog"] == 2 else None

    stats = wait_until(settled, timeout_s=10)
    subs = stats["subscriptions"]
    assert subs["s"]["earliestMsgPublishTimeInBacklog"] == second.publish_timestamp()
    assert subs["idle"]["earliestMsgPublishTimeInBacklog"] == first.publish_timestamp()
    assert stats["earliestMsgPublishTimeInBacklogs"] == first.publish_timestamp()
    assert stats["oldestBacklogMessageSubscriptionName"] == "idle"
    age_s = stats["oldestBacklogMessageAgeSeconds"]
    assert 0 <= age_s <= (time.time() * 1000 - first.publish_timestamp()) / 1000 + 1
    # the idle subscription catches up: the oldest backlog is now the other one's
    http.ok("POST", f"{topic}/subscription/idle/skip_all")
    stats = http.ok("GET", f"{topic}/stats")
    assert stats["subscriptions"]["idle"]["earliestMsgPublishTimeInBacklog"] == 0
    assert stats["earliestMsgPublishTimeInBacklogs"] == second.publish_timestamp()
    assert stats["oldestBacklogMessageSubscriptionName"] == "s"
    consumer.acknowledge(second)
    consumer.acknowledge(consumer.receive(10_000))
    wait_until(
        lambda: http.ok("GET", f"{topic}/stats")["oldestBacklogMessageAgeSeconds"] == -1,
        timeout_s=10,
    )
    producer.close()
    consumer.close()


def test_ack_rate_and_messages_per_entry_count_messages(
    http: Http, client: pulsar.Client, name: str
) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    batched = client.subscribe(full, "batched", consumer_type=pulsar.ConsumerType.Shared)
    cumulative = client.subscribe(full, "cumulative")
    producer = client.create_producer(
        full, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=500
    )
    for i in range(10):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    for _ in range(10):
        batched.acknowledge(batched.receive(10_000))
    last = None
    for _ in range(10):
        last = cumulative.receive(10_000)
    assert last is not None
    cumulative.acknowledge_cumulative(last)

    def acked() -> dict[str, object] | None:
        s = http.ok("GET", f"{topic}/stats")["subscriptions"]
        done = all(s[n]["msgBacklog"] == 0 for n in ("batched", "cumulative"))
        return s if done else None

    subs = wait_until(acked, timeout_s=10)
    for sub in ("batched", "cumulative"):
        [c] = subs[sub]["consumers"]
        assert c["avgMessagesPerEntry"] == 10, sub
        # both meters started with the consumer and counted the same 10 messages
        assert c["messageAckRate"] == pytest.approx(c["msgRateOut"], rel=0.01), sub
        assert c["messageAckRate"] > 0
    producer.close()
    batched.close()
    cumulative.close()


def test_peek_compressed_batch_is_decompressed_and_splits(
    http: Http, client: pulsar.Client, name: str
) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    http.ok("PUT", topic)
    http.ok("PUT", f"{topic}/subscription/s")
    sent = [f"message-{i}-".encode() * 20 for i in range(5)]
    for compression in (pulsar.CompressionType.LZ4, pulsar.CompressionType.ZSTD):
        producer = client.create_producer(
            full,
            compression_type=compression,
            batching_enabled=True,
            batching_max_messages=5,
            batching_max_publish_delay_ms=500,
        )
        for i, payload in enumerate(sent):
            producer.send_async(payload, None, properties={"i": str(i)})
        producer.flush()
        producer.close()
    for n, codec in ((1, "LZ4"), (2, "ZSTD")):
        answer = http.get(f"{topic}/subscription/s/position/{n}")
        assert answer.status == 200
        h = {k.lower(): v for k, v in answer.headers.items()}
        assert h["x-pulsar-compression"] == codec
        assert h["x-pulsar-num-batch-message"] == "5"
        assert int(h["x-pulsar-uncompressed-size"]) == len(answer.body)
        records = split_batch(answer.body, 5)
        assert [bytes(p) for _, p in records] == sent
        assert [dict(md.properties)["i"] for md, _ in records] == [str(i) for i in range(5)]
