"""The broker compatibility scenarios (tests/compat/, written for the official wheel) run
again with our client against ``magnetar standalone``: message metadata with and without
batching, subscription types, acks of every kind, ack timeout, dead letters, readers, seek,
last message id, multi-topic and regex consumers, producer access modes, send timeout."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import uuid
from typing import Any

import pytest

from magnetar.client import (
    Client,
    CompressionType,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    MessageId,
    ProducerAccessMode,
    Timeout,
)
from magnetar.client.message import Message
from magnetar.common.errors import ConsumerBusy, ProducerBusy, ProducerFenced
from magnetar.testing import StandaloneProcess, wait_until_async


async def receive_n(consumer: Any, n: int, timeout_ms: int = 10_000) -> list[Message]:
    """``n`` messages from a consumer or a reader."""
    receive = getattr(consumer, "receive", None) or consumer.read_next
    return [await receive(timeout_ms) for _ in range(n)]


async def assert_nothing_more(consumer: Any, timeout_ms: int = 300) -> None:
    receive = getattr(consumer, "receive", None) or consumer.read_next
    with pytest.raises(Timeout):
        m = await receive(timeout_ms)
        raise AssertionError(f"unexpected message {m!r}")


async def produce(
    client: Client, topic: str, n: int, *, batching: bool = False, prefix: str = "m"
) -> list[MessageId]:
    producer = await client.create_producer(topic, batching_enabled=batching)
    if batching:
        ids = list(
            await asyncio.gather(*(producer.send_async(f"{prefix}-{i}".encode()) for i in range(n)))
        )
    else:
        ids = [await producer.send(f"{prefix}-{i}".encode()) for i in range(n)]
    await producer.close()
    return ids


def data(msgs: list[Message]) -> list[bytes]:
    return [m.data() for m in msgs]


def names(prefix: str, r: range) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in r]


# ------------------------------------------------------------------ produce / consume


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("compression", list(CompressionType), ids=lambda c: c.name)
async def test_metadata_round_trip(
    standalone: StandaloneProcess, topic: str, batching: bool, compression: CompressionType
) -> None:
    n = 20
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(
            topic, batching_enabled=batching, compression_type=compression
        )
        event_ms = int(time.time() * 1000) - 5000
        futures = [
            producer.send_async(
                b"payload-%d" % i * (i + 1),
                properties={"i": str(i), "even": str(i % 2 == 0)},
                partition_key=f"key-{i % 3}",
                ordering_key=f"ok-{i}".encode(),
                event_timestamp=event_ms + i,
            )
            for i in range(n)
        ]
        ids = await asyncio.gather(*futures)
        if batching:
            assert len({(i.ledger_id(), i.entry_id()) for i in ids}) < n
        for i, msg in enumerate(await receive_n(consumer, n)):
            assert msg.data() == b"payload-%d" % i * (i + 1)
            assert msg.properties() == {"i": str(i), "even": str(i % 2 == 0)}
            assert msg.partition_key() == f"key-{i % 3}"
            assert msg.ordering_key() == f"ok-{i}".encode()
            assert msg.event_timestamp() == event_ms + i
            assert msg.publish_timestamp() >= event_ms
            assert msg.message_id() == ids[i]
            await consumer.acknowledge(msg)
        await assert_nothing_more(consumer)


async def test_ordering_across_many_batches(standalone: StandaloneProcess, topic: str) -> None:
    n = 3000
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "s", receiver_queue_size=200)
        producer = await client.create_producer(
            topic, batching_max_messages=97, max_pending_messages=n
        )
        await asyncio.gather(*(producer.send_async(b"%d" % i) for i in range(n)))
        got = [int((await consumer.receive(10_000)).data()) for _ in range(n)]
        assert got == list(range(n))


async def test_too_big_without_chunking_fails(standalone: StandaloneProcess, topic: str) -> None:
    from magnetar.client import MessageTooBig

    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        with pytest.raises(MessageTooBig):
            await producer.send(b"x" * 200_000)
        await producer.send(b"still usable")


# ------------------------------------------------------------------ subscription types


async def test_exclusive_busy_and_initial_positions(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        await client.subscribe(topic, "ex")
        with pytest.raises(ConsumerBusy):
            await client.subscribe(topic, "ex")
        await produce(client, topic, 3)
        earliest = await client.subscribe(topic, "early", initial_position=InitialPosition.Earliest)
        latest = await client.subscribe(topic, "late", initial_position=InitialPosition.Latest)
        assert data(await receive_n(earliest, 3)) == names("m", range(3))
        await assert_nothing_more(latest)
        await produce(client, topic, 1, prefix="n")
        assert (await latest.receive(5000)).data() == b"n-0"


async def test_shared_no_loss_no_duplicates_and_replay_on_close(
    standalone: StandaloneProcess, topic: str
) -> None:
    n = 200
    async with Client(standalone.url) as client:
        a = await client.subscribe(
            topic, "sh", consumer_type=ConsumerType.Shared, receiver_queue_size=10
        )
        b = await client.subscribe(
            topic, "sh", consumer_type=ConsumerType.Shared, receiver_queue_size=10
        )
        await produce(client, topic, n, batching=False)
        got: dict[str, list[bytes]] = {"a": [], "b": []}

        async def drain(name: str, c: Any, limit: int) -> None:
            while len(got["a"]) + len(got["b"]) < limit:
                try:
                    m = await c.receive(1000)
                except Timeout:
                    continue
                got[name].append(m.data())
                await c.acknowledge(m)

        await asyncio.wait_for(asyncio.gather(drain("a", a, n), drain("b", b, n)), 60)
        assert got["a"] and got["b"]
        assert sorted(got["a"] + got["b"]) == sorted(names("m", range(n)))
        # Unacked messages of a closed consumer go to the other one.
        await produce(client, topic, 10, prefix="r")
        held = await a.receive(5000)
        await a.close()
        rest = set()
        while len(rest) < 10:
            m = await b.receive(10_000)
            rest.add(m.data())
            await b.acknowledge(m)
        assert held.data() in rest and rest == set(names("r", range(10)))


async def test_key_shared_keeps_each_key_on_one_consumer_in_order(
    standalone: StandaloneProcess, topic: str
) -> None:
    keys = [f"key-{k}" for k in range(12)]
    async with Client(standalone.url) as client:
        consumers = [
            await client.subscribe(topic, "ks", consumer_type=ConsumerType.KeyShared)
            for _ in range(3)
        ]
        producer = await client.create_producer(topic, batching_enabled=False)
        for i in range(120):
            await producer.send(b"%d" % i, partition_key=keys[i % len(keys)])
        owner: dict[str, int] = {}
        order: dict[str, list[int]] = {}
        received = 0

        async def drain(index: int, c: Any) -> None:
            nonlocal received
            while received < 120:
                try:
                    m = await c.receive(500)
                except Timeout:
                    continue
                received += 1
                key = m.partition_key()
                assert owner.setdefault(key, index) == index, f"{key} on two consumers"
                order.setdefault(key, []).append(int(m.data()))
                await c.acknowledge(m)

        await asyncio.wait_for(asyncio.gather(*(drain(i, c) for i, c in enumerate(consumers))), 60)
        assert set(owner) == set(keys)
        assert len(set(owner.values())) >= 2
        for seq in order.values():
            assert seq == sorted(seq)


# ------------------------------------------------------------------ acks


async def test_cumulative_ack_then_reconnect(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "sub")
        await produce(client, topic, 10)
        msgs = await receive_n(consumer, 10)
        await consumer.acknowledge_cumulative(msgs[5])
        await consumer.close()
        consumer = await client.subscribe(topic, "sub")
        assert data(await receive_n(consumer, 4)) == names("m", range(6, 10))
        await assert_nothing_more(consumer)


async def test_individual_acks_leave_holes_redelivered(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
        await produce(client, topic, 10)
        for m in await receive_n(consumer, 10):
            if int(m.data().split(b"-")[1]) % 2 == 0:
                await consumer.acknowledge(m)
        await consumer.close()
        consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
        got = sorted(data(await receive_n(consumer, 5)))
        assert got == sorted(names("m", range(1, 10, 2)))
        await assert_nothing_more(consumer)


async def test_ack_timeout_redelivers(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(
            topic, "sub", consumer_type=ConsumerType.Shared, unacked_messages_timeout_ms=300
        )
        await produce(client, topic, 2)
        first = await receive_n(consumer, 2)
        await consumer.acknowledge(first[1])
        again = await consumer.receive(10_000)  # m-0 was not acked within 300 ms
        assert again.data() == b"m-0"
        assert again.redelivery_count() >= 1
        await consumer.acknowledge(again)
        await assert_nothing_more(consumer, 800)


async def test_dead_letter_topic_after_max_redeliveries(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        dlq_topic = f"{topic}-my-DLQ"
        dlq = await client.subscribe(dlq_topic, "dlq-sub")
        consumer = await client.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq_topic),
        )
        await produce(client, topic, 1)
        deliveries = 0
        while True:
            try:
                m = await consumer.receive(2000)
            except Timeout:
                break
            deliveries += 1
            consumer.negative_acknowledge(m)
        assert deliveries == 3  # the first delivery and two redeliveries
        dead = await dlq.receive(10_000)
        assert dead.data() == b"m-0"
        assert dead.properties()["REAL_TOPIC"] == topic
        assert "ORIGIN_MESSAGE_ID" in dead.properties()


async def test_batch_index_acks(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(
            topic, "sub", consumer_type=ConsumerType.Shared, batch_index_ack_enabled=True
        )
        await produce(client, topic, 10, batching=True)
        msgs = await receive_n(consumer, 10)
        assert len({m.position[:2] for m in msgs}) == 1
        for m in msgs[:6]:
            await consumer.acknowledge(m)
        await consumer.close()
        consumer = await client.subscribe(
            topic, "sub", consumer_type=ConsumerType.Shared, batch_index_ack_enabled=True
        )
        assert data(await receive_n(consumer, 4)) == names("m", range(6, 10))
        await assert_nothing_more(consumer)


async def test_reconsume_later_through_retry_topic_then_dlq(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        dlq = await client.subscribe(f"{topic}-sub-DLQ", "dlq-sub")
        consumer = await client.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.Shared,
            retry_enable=True,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
        )
        assert f"{topic}-sub-RETRY" in consumer.topics()  # type: ignore[union-attr]
        producer = await client.create_producer(topic)
        await producer.send(b"work", properties={"p": "1"}, partition_key="k")
        times = []
        for expected in (None, "1", "2"):
            m = await consumer.receive(10_000)
            assert m.data() == b"work" and m.partition_key() == "k"
            assert m.properties().get("RECONSUMETIMES") == expected
            assert m.properties()["p"] == "1"
            times.append(time.monotonic())
            await consumer.reconsume_later(m, 300)  # type: ignore[union-attr]
        assert all(b - a >= 0.25 for a, b in itertools.pairwise(times))
        dead = await dlq.receive(10_000)
        assert dead.data() == b"work"
        assert dead.properties()["RECONSUMETIMES"] == "3"
        assert dead.properties()["REAL_TOPIC"] == topic
        await assert_nothing_more(consumer, 600)


# ------------------------------------------------------------------ readers, seek, last id


async def test_readers_and_has_message_available(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        ids = await produce(client, topic, 10)
        earliest = await client.create_reader(topic, MessageId.earliest)
        assert data(await receive_n(earliest, 10)) == names("m", range(10))
        assert not await earliest.has_message_available()
        latest = await client.create_reader(topic, MessageId.latest)
        assert not await latest.has_message_available()
        from_id = await client.create_reader(topic, ids[4])
        assert await from_id.has_message_available()
        assert data(await receive_n(from_id, 5)) == names("m", range(5, 10))
        inclusive = await client.create_reader(topic, ids[4], start_message_id_inclusive=True)
        assert (await inclusive.read_next(5000)).data() == b"m-4"
        await produce(client, topic, 1, prefix="n")
        assert await latest.has_message_available()
        assert (await latest.read_next(5000)).data() == b"n-0"


async def test_reader_from_id_inside_batch(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        ids = await produce(client, topic, 10, batching=True)
        reader = await client.create_reader(topic, ids[3])
        assert data(await receive_n(reader, 6)) == names("m", range(4, 10))


async def test_seek_by_id_and_time_and_last_message_id(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(f"m-{i}".encode()) for i in range(10)]
        sent_ms = int(time.time() * 1000)
        await wait_until_async(lambda: int(time.time() * 1000) > sent_ms)
        middle_ms = sent_ms + 1
        ids += [await producer.send(f"m-{i}".encode()) for i in range(10, 20)]
        last, _ = await consumer.get_last_message_id()  # type: ignore[union-attr]
        assert last.position == ids[-1].position
        for m in await receive_n(consumer, 20):
            await consumer.acknowledge(m)
        await consumer.seek(ids[5])
        assert (await consumer.receive(10_000)).data() == b"m-5"
        await consumer.seek(middle_ms)
        assert (await consumer.receive(10_000)).data() == b"m-10"


# ------------------------------------------------------------------ multi-topic, regex


async def test_multi_topic_consumer_over_separate_topics(
    standalone: StandaloneProcess, topic: str
) -> None:
    topics = [f"{topic}-a", f"{topic}-b", f"{topic}-c"]
    async with Client(standalone.url) as client:
        consumer = await client.subscribe(topics, "multi", consumer_type=ConsumerType.Shared)
        for t in topics:
            await produce(client, t, 5, prefix=t.rsplit("-", 1)[1])
        msgs = await receive_n(consumer, 15)
        by_topic: dict[str, list[bytes]] = {}
        for m in msgs:
            by_topic.setdefault(m.topic_name(), []).append(m.data())
            await consumer.acknowledge(m)
        for t in topics:
            assert by_topic[t] == names(t.rsplit("-", 1)[1], range(5))  # ordered per topic
        await assert_nothing_more(consumer)


async def test_regex_subscription_discovers_new_topics(standalone: StandaloneProcess) -> None:
    prefix = f"persistent://public/default/rx-{uuid.uuid4().hex[:8]}"
    async with Client(standalone.url) as client:
        await produce(client, f"{prefix}-one", 2, prefix="one")
        await produce(client, f"{prefix}-not-matching-x", 1)
        consumer = await client.subscribe(
            re.compile(re.escape(prefix) + r"-(one|two)"),
            "rx",
            initial_position=InitialPosition.Earliest,
            pattern_auto_discovery_period=1,
        )
        assert sorted(data(await receive_n(consumer, 2))) == names("one", range(2))
        await produce(client, f"{prefix}-two", 3, prefix="two")  # created after subscribing
        await wait_until_async(
            lambda: f"{prefix}-two" in consumer.topics(),  # type: ignore[union-attr]
            timeout_s=20,
        )
        assert data(await receive_n(consumer, 3)) == names("two", range(3))
        await assert_nothing_more(consumer)


async def test_reader_over_a_whole_partitioned_topic(
    standalone: StandaloneProcess, topic: str
) -> None:
    import urllib.request

    req = urllib.request.Request(
        f"{standalone.http_url}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=b"3", method="PUT", headers={"Content-Type": "application/json"},
    )  # fmt: skip
    await asyncio.to_thread(urllib.request.urlopen, req)
    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(b"%d" % i, partition_key=f"k{i}") for i in range(30)]
        assert len({i.partition() for i in ids}) == 3
        reader = await client.create_reader(topic, MessageId.earliest)
        assert await reader.has_message_available()
        got = [await reader.read_next(5000) for _ in range(30)]
        assert sorted(int(m.data()) for m in got) == list(range(30))
        for p in range(3):  # ordered within each partition
            seq = [int(m.data()) for m in got if m.message_id().partition() == p]
            assert seq == sorted(seq)
        assert not await reader.has_message_available()
        latest = await client.create_reader(topic, MessageId.latest)
        assert not await latest.has_message_available()
        await producer.send(b"new", partition_key="k1")
        assert (await latest.read_next(5000)).data() == b"new"


# ------------------------------------------------------------------ producers


async def test_producer_access_modes(standalone: StandaloneProcess, topic: str) -> None:
    async with Client(standalone.url) as client:
        await client.create_producer(f"{topic}-named", producer_name="p1")
        with pytest.raises(ProducerBusy):
            await client.create_producer(f"{topic}-named", producer_name="p1")

        first = await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        with pytest.raises(ProducerFenced):
            await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        with pytest.raises(ProducerBusy):
            await client.create_producer(topic)
        waiting = asyncio.ensure_future(
            client.create_producer(topic, access_mode=ProducerAccessMode.WaitForExclusive)
        )
        await first.send(b"first")
        assert not waiting.done()
        await first.close()
        second = await asyncio.wait_for(waiting, 20)  # promoted once the holder left
        await second.send(b"second")
        await second.close()
        holder = await client.create_producer(topic, access_mode=ProducerAccessMode.Exclusive)
        await holder.send(b"third")
        fencer = await client.create_producer(
            topic, access_mode=ProducerAccessMode.ExclusiveWithFencing
        )
        await fencer.send(b"fourth")
        with pytest.raises(ProducerFenced):  # closed by the broker, re-registration refused
            await asyncio.wait_for(holder.send(b"stale"), 20)
        reader = await client.create_reader(topic, MessageId.earliest)
        assert data(await receive_n(reader, 4)) == [b"first", b"second", b"third", b"fourth"]
        await assert_nothing_more(reader)


async def test_send_timeout_when_broker_is_gone(standalone_factory: Any, topic: str) -> None:
    node = standalone_factory()
    async with Client(node.url, operation_timeout_seconds=5) as client:
        producer = await client.create_producer(topic, send_timeout_millis=500)
        await producer.send(b"ok")
        node.kill()
        started = time.monotonic()
        with pytest.raises(Timeout):
            await producer.send(b"lost")
        assert time.monotonic() - started < 10
