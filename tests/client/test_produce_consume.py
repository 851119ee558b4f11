"""Our client against ``magnetar standalone``: produce, consume, acks, batching, compression,
keys, properties, readers, partitioned topics, chunking, schemas."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from magnetar.client import (
    AvroSchema,
    Client,
    CompressionType,
    ConsumerType,
    InitialPosition,
    JsonSchema,
    MessageId,
    StringSchema,
    Timeout,
)
from magnetar.testing import StandaloneProcess, wait_until_async


async def test_send_receive_ack_with_keys_and_properties(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Exclusive)
        producer = await client.create_producer(topic)
        ids = [
            await producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}")
            for i in range(5)
        ]
        for i in range(5):
            msg = await consumer.receive(timeout_ms=5000)
            assert msg.data() == f"m{i}".encode()
            assert msg.properties() == {"i": str(i)}
            assert msg.partition_key() == f"k{i}"
            assert msg.message_id() == ids[i]
            assert msg.topic_name() == topic
            assert msg.redelivery_count() == 0
            await consumer.acknowledge(msg)
        with pytest.raises(Timeout):
            await consumer.receive(timeout_ms=100)


@pytest.mark.parametrize("compression", list(CompressionType))
async def test_batches_with_compression(
    standalone: StandaloneProcess, topic: str, compression: CompressionType
) -> None:
    n = 2500
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared)
        producer = await client.create_producer(
            topic, compression_type=compression, batching_max_messages=200, max_pending_messages=n
        )
        futures = [
            producer.send_async(b"payload-%d" % i, properties={"n": str(i)} if i % 7 == 0 else None)
            for i in range(n)
        ]
        ids = await asyncio.gather(*futures)
        assert len(set(ids)) == n
        assert ids[0].batch_index() == 0 and ids[1].batch_index() == 1
        got = []
        while len(got) < n:
            msgs = await consumer.batch_receive(500, 5000)
            assert msgs
            for m in msgs:
                await consumer.acknowledge(m)
            got.extend(msgs)
        assert [m.data() for m in got] == [b"payload-%d" % i for i in range(n)]
        assert [m.message_id() for m in got] == ids
        assert got[7].properties() == {"n": "7"} and got[8].properties() == {}


async def test_reader_from_earliest_latest_and_id(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(b"%d" % i) for i in range(10)]
        reader = await client.create_reader(topic, MessageId.earliest)
        assert await reader.has_message_available()
        assert [(await reader.read_next(5000)).data() for _ in range(10)] == [
            b"%d" % i for i in range(10)
        ]
        assert not await reader.has_message_available()
        exclusive = await client.create_reader(topic, ids[4])
        assert (await exclusive.read_next(5000)).data() == b"5"
        inclusive = await client.create_reader(topic, ids[4], start_message_id_inclusive=True)
        assert (await inclusive.read_next(5000)).data() == b"4"
        latest = await client.create_reader(topic, MessageId.latest)
        assert not await latest.has_message_available()
        await producer.send(b"new")
        assert (await latest.read_next(5000)).data() == b"new"
        await reader.seek(ids[2])
        assert (await reader.read_next(5000)).data() == b"2"


async def test_partitioned_topic_round_robin_and_keys(
    standalone: StandaloneProcess, topic: str
) -> None:
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{standalone.http_port}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=b"3", method="PUT", headers={"Content-Type": "application/json"},
    )  # fmt: skip
    await asyncio.to_thread(urllib.request.urlopen, req)
    async with Client(standalone.url) as client:
        assert len(await client.get_topic_partitions(topic)) == 3
        consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared)
        producer = await client.create_producer(topic, batching_max_messages=10)
        ids = await asyncio.gather(*(producer.send_async(b"%d" % i) for i in range(60)))
        assert {i.partition() for i in ids} == {0, 1, 2}
        keyed = [await producer.send(b"k", partition_key="same-key") for _ in range(5)]
        assert len({i.partition() for i in keyed}) == 1
        got = set()
        for _ in range(65):
            m = await consumer.receive(5000)
            got.add(m.message_id())
            await consumer.acknowledge(m)
        assert got == set(ids) | set(keyed)


async def test_chunked_message(standalone: StandaloneProcess, topic: str) -> None:
    big = bytes(range(256)) * 2000  # 512000 bytes > 131072 max message size
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(
            topic, batching_enabled=False, chunking_enabled=True
        )
        mid = await producer.send(big)
        assert mid.first_chunk_message_id() is not None
        msg = await consumer.receive(5000)
        assert msg.data() == big
        assert len(msg.chunk_ids) == 4
        await consumer.acknowledge(msg)


@dataclass
class Point:
    x: int
    y: float
    label: str | None = None


@pytest.mark.parametrize("schema", [JsonSchema(Point), AvroSchema(Point)], ids=["json", "avro"])
async def test_record_schemas(
    standalone: StandaloneProcess, topic: str, schema: JsonSchema[Point]
) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s", schema=schema)
        producer = await client.create_producer(topic, schema=schema)
        await producer.send(Point(1, 2.5, "a"))
        msg = await consumer.receive(5000)
        assert msg.value() == Point(1, 2.5, "a")


async def test_string_schema_and_initial_position(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic, schema=StringSchema())
        await producer.send("héllo")
        consumer = await client.subscribe(
            topic, "s", schema=StringSchema(), initial_position=InitialPosition.Earliest
        )
        assert (await consumer.receive(5000)).value() == "héllo"


async def test_plain_and_optioned_sends_share_batches_in_order(
    standalone: StandaloneProcess, topic: str
) -> None:
    """The plain fast path and sends with options (even options at their defaults) fill the
    same batches in send order; an unknown option raises TypeError and queues nothing; a
    lone message after full batches still goes out on the batching delay."""
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(
            topic, batching_max_messages=4, batching_max_publish_delay_ms=20
        )
        futures = []
        for i in range(10):
            if i % 3 == 0:
                futures.append(producer.send_async(b"%d" % i, properties=None, partition_key="k"))
            else:
                futures.append(producer.send_async(b"%d" % i))
        with pytest.raises(TypeError):
            producer.send_async(b"x", no_such_option=1)  # type: ignore[call-arg]
        ids = await asyncio.wait_for(asyncio.gather(*futures), 10)  # two full batches, then 2
        assert [(i.entry_id() - ids[0].entry_id(), i.batch_index()) for i in ids] == [
            (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)
        ]  # fmt: skip
        lone = await asyncio.wait_for(producer.send_async(b"10"), 10)
        assert lone.entry_id() == ids[-1].entry_id() + 1
        got = [await consumer.receive(timeout_ms=5000) for _ in range(11)]
        assert [m.data() for m in got] == [b"%d" % i for i in range(11)]
        assert [m.partition_key() for m in got[:4]] == ["k", "", "", "k"]
        assert [m.sequence_id() for m in got] == list(range(11))


async def test_an_idle_producer_waits_without_ticking_and_still_meets_its_timers(
    standalone: StandaloneProcess, topic: str
) -> None:
    """Between sends the producer's timer task waits instead of ticking every batching
    delay; the first message after an idle spell is still flushed on the batching delay,
    and one the broker never answers still fails on the send timeout."""
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(
            topic, batching_max_messages=100, batching_max_publish_delay_ms=20
        )
        for round_ in range(3):
            await wait_until_async(lambda: producer._timers_idle is not None, 10)
            # a lone message: only the batching delay sends it
            sent = await asyncio.wait_for(producer.send_async(b"m%d" % round_), 10)
            got = await consumer.receive(timeout_ms=5000)
            assert got.data() == b"m%d" % round_ and got.message_id() == sent
        quiet = await client.create_producer(topic, batching_enabled=False, send_timeout_millis=300)
        await wait_until_async(lambda: quiet._timers_idle is not None, 10)
        quiet._cnx = None  # written nowhere: the broker never answers it
        with pytest.raises(Timeout):
            await asyncio.wait_for(quiet.send_async(b"lost"), 10)
