"""Public calls other parts build on (the Spark source's planning): listing a namespace's
topics without creating any, a reader's last message ids, batched reads -- asyncio and
blocking, against ``magnetar standalone``."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from magnetar.client import Client, InvalidConfiguration, MessageId, TopicsMode
from magnetar.client import sync as blocking
from magnetar.testing import StandaloneProcess


def create_partitioned(node: StandaloneProcess, topic: str, partitions: int) -> None:
    local = topic.rsplit("/", 1)[1]
    req = urllib.request.Request(
        f"{node.http_url}/admin/v2/persistent/public/default/{local}/partitions",
        data=json.dumps(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status in (200, 204)


async def test_topics_of_namespace_lists_existing_topics_and_creates_none(
    standalone: StandaloneProcess, topic: str
) -> None:
    create_partitioned(standalone, f"{topic}-parted", 3)
    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        # Produce to every partition so each exists as a topic.
        parted = await client.create_producer(f"{topic}-parted", batching_enabled=False)
        await asyncio.gather(*(parted.send(b"p", partition_key=str(i)) for i in range(30)))
        names = await client.get_topics_of_namespace("public/default")
        assert topic in names
        assert {f"{topic}-parted-partition-{i}" for i in range(3)} <= set(names)
        assert f"{topic}-missing" not in names
        assert (
            await client.get_topics_of_namespace("public/default", TopicsMode.NON_PERSISTENT) == []
        )
        # Listing never auto-creates: the missing name stays missing.
        again = await client.get_topics_of_namespace("public/default", TopicsMode.ALL)
        assert topic in again and f"{topic}-missing" not in again
        with pytest.raises(InvalidConfiguration):
            await client.get_topics_of_namespace("public")
    with blocking.Client(standalone.url) as sync_client:
        assert topic in sync_client.get_topics_of_namespace("public/default")
        assert (
            sync_client.get_topics_of_namespace("public/default", TopicsMode.NON_PERSISTENT) == []
        )


async def test_reader_last_message_id_and_batched_reads(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(standalone.url) as client:
        empty = await client.create_reader(topic, MessageId.earliest)
        before = await empty.get_last_message_id()
        assert before.entry_id() == -1
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=50)
        ids = await asyncio.gather(*(producer.send(str(i).encode()) for i in range(10)))
        last_sent = max(ids)
        got = await empty.get_last_message_id()
        assert (got.ledger_id(), got.entry_id()) == (last_sent.ledger_id(), last_sent.entry_id())
        assert (await empty.get_last_message_ids()) == {topic: got}
        # read_batch returns what arrives, never raises on an idle topic.
        read: list[bytes] = []
        sizes: set[int] = set()
        while len(read) < 10:
            batch = await empty.read_batch(4, 5000)
            assert 0 < len(batch) <= 4
            read.extend(m.data() for m in batch)
            sizes.update(m.batch_size() for m in batch)
        assert read == [str(i).encode() for i in range(10)]
        assert max(sizes) > 1  # the sends were batched; batch_size says so
        assert not await empty.has_message_available()
        assert await empty.read_batch(4, 100) == []


async def test_last_message_ids_of_a_partitioned_reader(
    standalone: StandaloneProcess, topic: str
) -> None:
    create_partitioned(standalone, topic, 2)
    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        sent = await asyncio.gather(
            *(producer.send(b"v", partition_key=f"k{i}") for i in range(20))
        )
        reader = await client.create_reader(topic, MessageId.earliest)
        with pytest.raises(InvalidConfiguration, match="get_last_message_ids"):
            await reader.get_last_message_id()
        lasts = await reader.get_last_message_ids()
        assert set(lasts) == {f"{topic}-partition-0", f"{topic}-partition-1"}
        for i, name in enumerate(sorted(lasts)):
            mine = max((m for m in sent if m.partition() == i), default=None)
            assert mine is not None
            assert (lasts[name].ledger_id(), lasts[name].entry_id()) == (
                mine.ledger_id(),
                mine.entry_id(),
            )
        # A reader of one partition answers for that partition.
        one = await client.create_reader(f"{topic}-partition-1", MessageId.earliest)
        assert await one.get_last_message_id() == lasts[f"{topic}-partition-1"]


def test_blocking_reader_last_message_id(standalone: StandaloneProcess, topic: str) -> None:
    with blocking.Client(standalone.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(b"a"), producer.send(b"b")]
        reader = client.create_reader(topic, MessageId.earliest)
        last = reader.get_last_message_id()
        assert (last.ledger_id(), last.entry_id()) == (sent[-1].ledger_id(), sent[-1].entry_id())
        assert [m.data() for m in reader.read_batch(10, 5000)] in ([b"a", b"b"], [b"a"])
