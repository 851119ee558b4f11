"""Failover consumer events, nack redelivery, and interoperability with the official wheel."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from magnetar.client import Client, CompressionType, Consumer, ConsumerType, MessageId, Timeout
from magnetar.testing import StandaloneProcess
from magnetar.testing import wait_until_async as eventually


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def became_active(self, consumer: Any, partition: int) -> None:
        self.events.append(("active", partition))

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self.events.append(("inactive", partition))


async def test_failover_events_three_consumers(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        recorders = [Recorder() for _ in range(3)]
        consumers = []
        for i, rec in enumerate(recorders):
            c = await client.subscribe(
                topic, "leader", consumer_type=ConsumerType.Failover,
                consumer_name=f"worker-{i}", consumer_event_listener=rec,
            )  # fmt: skip
            consumers.append(c)

        def actives() -> list[int]:
            return [i for i, r in enumerate(recorders) if r.events and r.events[-1][0] == "active"]

        await eventually(lambda: all(r.events for r in recorders) and len(actives()) == 1)
        [leader] = actives()
        assert all(e[1] == -1 for r in recorders for e in r.events)
        producer = await client.create_producer(topic)
        await producer.send(b"one")
        msg = await consumers[leader].receive(5000)
        assert msg.data() == b"one"
        await consumers[leader].acknowledge(msg)
        await consumers[leader].close()
        await eventually(lambda: len([i for i in actives() if i != leader]) == 1)
        [new_leader] = [i for i in actives() if i != leader]
        await producer.send(b"two")
        assert (await consumers[new_leader].receive(5000)).data() == b"two"
        other = 3 - leader - new_leader
        with pytest.raises(Timeout):
            await consumers[other].receive(200)


async def test_negative_ack_redelivers_with_count(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(
            topic, "s", consumer_type=ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
        )
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        first = await consumer.receive(5000)
        assert isinstance(consumer, Consumer)
        consumer.negative_acknowledge(first)
        again = await consumer.receive(5000)
        assert again.data() == b"x" and again.message_id() == first.message_id()
        assert again.redelivery_count() == 1
        await consumer.acknowledge(again)


@pytest.mark.parametrize(
    "compression",
    [
        CompressionType.NONE,
        CompressionType.LZ4,
        CompressionType.ZSTD,
        CompressionType.ZLIB,
        CompressionType.SNAPPY,
    ],
)
async def test_official_producer_to_our_consumer(
    standalone: StandaloneProcess, topic: str, compression: CompressionType
) -> None:
    official = pulsar.Client(standalone.url)
    try:
        async with Client(standalone.url) as client:
            consumer = await client.subscribe(topic, "s")
            producer = official.create_producer(
                topic, compression_type=pulsar.CompressionType(int(compression)),
                batching_enabled=True, batching_max_publish_delay_ms=5,
            )  # fmt: skip
            ids: list[Any] = []

            def sent(res: Any, mid: Any) -> None:
                ids.append(mid)

            for i in range(50):
                producer.send_async(
                    b"w%d" % i, sent, properties={"i": str(i)}, partition_key=f"k{i}"
                )
            await asyncio.to_thread(producer.flush)
            await eventually(lambda: len(ids) == 50)
            for i in range(50):
                m = await consumer.receive(5000)
                assert m.data() == b"w%d" % i
                assert m.properties() == {"i": str(i)} and m.partition_key() == f"k{i}"
                assert m.message_id().serialize() == ids[i].serialize()
                await consumer.acknowledge(m)
            producer.close()
    finally:
        official.close()


@pytest.mark.parametrize(
    "compression",
    [
        CompressionType.NONE,
        CompressionType.LZ4,
        CompressionType.ZSTD,
        CompressionType.ZLIB,
        CompressionType.SNAPPY,
    ],
)
async def test_our_producer_to_official_consumer(
    standalone: StandaloneProcess, topic: str, compression: CompressionType
) -> None:
    official = pulsar.Client(standalone.url)
    try:
        consumer = official.subscribe(topic, "s")
        async with Client(standalone.url) as client:
            producer = await client.create_producer(topic, compression_type=compression)
            ids = await asyncio.gather(
                *(
                    producer.send_async(b"o%d" % i, properties={"i": str(i)}, partition_key=f"k{i}")
                    for i in range(50)
                )
            )
            for i in range(50):
                m = await asyncio.to_thread(consumer.receive, 5000)
                assert m.data() == b"o%d" % i
                assert m.properties() == {"i": str(i)} and m.partition_key() == f"k{i}"
                assert MessageId.deserialize(m.message_id().serialize()) == ids[i]
                consumer.acknowledge(m)
        consumer.close()
    finally:
        official.close()


async def test_official_reader_reads_our_string_schema(
    standalone: StandaloneProcess, topic: str
) -> None:
    from magnetar.client import StringSchema

    official = pulsar.Client(standalone.url)
    try:
        async with Client(standalone.url) as client:
            producer = await client.create_producer(topic, schema=StringSchema())
            await producer.send("hi there")
        reader = official.create_reader(
            topic, pulsar.MessageId.earliest, schema=pulsar.schema.StringSchema()
        )
        m = await asyncio.to_thread(reader.read_next, 5000)
        assert m.value() == "hi there"
        reader.close()
    finally:
        official.close()


WALKTHROUGH_RUNS = 6
"""Fresh standalones the walkthrough runs on."""
EXTRA_LONE_TOPICS = 5
"""Further lone Failover subscriptions (one topic each) per standalone. Before the fix
about 1 walkthrough in 5 and 1 extra subscription in 9 stayed paused (issue 13, measured
15 standalones), so these 36 tries miss the defect with probability below 1 %."""
RECEIVE_TIMEOUT_MS = 20_000
"""Far above the 1 s failover delay, for a loaded machine."""


def test_walkthrough_lone_failover_consumers_always_receive(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    # Issue 13, told apart from our client with the official wheel: two Failover consumers
    # on topic1/sub and one alone on topic2/sub3, on a fresh standalone, then more lone
    # Failover subscriptions. Each lone consumer's delayed activation must happen (the
    # broker lost it when its timer fired early), after which it receives what is produced.
    failover = pulsar.ConsumerType.Failover
    for run in range(WALKTHROUGH_RUNS):
        node = standalone_factory()
        official = pulsar.Client(node.url)
        try:
            for _ in range(2):
                official.subscribe("topic1", "sub", consumer_type=failover)
            topics = ["topic2", *(f"lone-{k}" for k in range(EXTRA_LONE_TOPICS))]
            lone = [official.subscribe(t, "sub3", consumer_type=failover) for t in topics]
            for t in topics:
                official.create_producer(t).send(f"{t}-{run}".encode())
            for t, consumer in zip(topics, lone, strict=True):
                try:
                    msg = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
                except pulsar.Timeout:
                    pytest.fail(f"run {run}: the lone Failover consumer of {t} got nothing")
                assert msg.data() == f"{t}-{run}".encode()
                consumer.acknowledge(msg)
        finally:
            official.close()
            node.kill()


class NameRecorder:
    """Records the name of the consumer each failover event is about."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def became_active(self, consumer: Any, partition: int) -> None:
        self.names.append(consumer.consumer_name())

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self.names.append(consumer.consumer_name())


def _partition_consumer_names(node: StandaloneProcess, topic: str, partition: int) -> list[str]:
    path = f"{topic.replace('://', '/')}-partition-{partition}"
    with urllib.request.urlopen(f"{node.http_url}/admin/v2/{path}/stats") as resp:
        stats = json.load(resp)
    return [c["consumerName"] for c in stats["subscriptions"]["leader"]["consumers"]]


async def test_partitioned_failover_consumer_has_one_generated_name(
    standalone: StandaloneProcess, topic: str
) -> None:
    # Without a consumer name, every partition's subscription sees the same generated name
    # (as with the C++ client; Failover spreads partitions by sorted name), and events,
    # which may come before the subscribe returns, name it too.
    req = urllib.request.Request(
        f"{standalone.http_url}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=b"2", method="PUT", headers={"Content-Type": "application/json"},
    )  # fmt: skip
    await asyncio.to_thread(urllib.request.urlopen, req)
    async with Client(standalone.url) as client:
        recorders = [NameRecorder(), NameRecorder()]
        consumers = [
            await client.subscribe(
                topic, "leader", consumer_type=ConsumerType.Failover, consumer_event_listener=r
            )
            for r in recorders
        ]
        names = [c.consumer_name() for c in consumers]
        assert all(n.startswith("consumer-") for n in names) and names[0] != names[1]
        for p in range(2):
            seen = await asyncio.to_thread(_partition_consumer_names, standalone, topic, p)
            assert sorted(seen) == sorted(names)
        await eventually(lambda: all(len(r.names) >= 2 for r in recorders))
        for rec, name in zip(recorders, names, strict=True):
            assert set(rec.names) == {name}
