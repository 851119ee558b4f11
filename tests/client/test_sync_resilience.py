"""The blocking facade, and a broker restart in the middle of a stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.client import Client, ConsumerType
from magnetar.client import sync as blocking
from magnetar.testing import StandaloneProcess, wait_until_async


def test_blocking_facade(standalone: StandaloneProcess, topic: str) -> None:
    with blocking.Client(standalone.url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        mid = producer.send(b"hello", properties={"a": "b"})
        msg = consumer.receive(timeout_ms=5000)
        assert msg.data() == b"hello" and msg.properties() == {"a": "b"}
        assert msg.message_id() == mid
        consumer.acknowledge(msg)
        producer.close()
        consumer.close()


async def test_broker_restart_mid_stream_no_loss_no_duplicates(
    standalone_factory: Callable[..., StandaloneProcess], topic: str
) -> None:
    node = standalone_factory("--deduplication")
    n = 400
    async with Client(node.url, operation_timeout_seconds=20) as client:
        consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Exclusive)
        producer = await client.create_producer(
            topic, producer_name="resilient", max_pending_messages=n
        )
        first = [producer.send_async(b"%d" % i) for i in range(n // 2)]
        await asyncio.gather(*first)
        node.kill()
        # Sent while the broker is down: pending until the producer reconnects.
        second = [producer.send_async(b"%d" % i) for i in range(n // 2, n)]
        await asyncio.to_thread(node.start)
        await asyncio.wait_for(asyncio.gather(*second), 30)
        seen: list[bytes] = []
        while len(seen) < n:
            m = await consumer.receive(20_000)
            await consumer.acknowledge(m)
            if m.data() not in seen:
                seen.append(m.data())
        assert sorted(seen, key=int) == [b"%d" % i for i in range(n)]
        # No duplicates stored: a fresh reader sees exactly n messages.
        from magnetar.client import MessageId, Timeout

        reader = await client.create_reader(topic, MessageId.earliest)
        count = 0
        try:
            while True:
                await reader.read_next(1000)
                count += 1
        except Timeout:
            pass
        assert count == n


async def test_sigkill_mid_stream_loses_nothing_acknowledged_and_stores_no_duplicates(
    standalone_factory: Callable[..., StandaloneProcess], topic: str
) -> None:
    """SIGKILL the standalone while batches are in flight: every message whose send
    completed is stored; the producer re-sends what was pending after the restart, and
    deduplication keeps the log free of duplicates; the consumer resumes."""
    from magnetar.client import MessageId, Timeout

    node = standalone_factory("--deduplication")
    n = 4000
    async with Client(node.url, operation_timeout_seconds=30) as client:
        consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Exclusive)
        producer = await client.create_producer(
            topic, producer_name="crash-test", max_pending_messages=n, batching_max_messages=50,
            send_timeout_millis=0,
        )  # fmt: skip
        futures = [producer.send_async(b"%d" % i) for i in range(n)]
        await wait_until_async(lambda: sum(f.done() for f in futures) >= n // 4, timeout_s=60)
        node.kill()
        done_before = {i for i, f in enumerate(futures) if f.done() and not f.exception()}
        await asyncio.to_thread(node.start)
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        received: list[int] = []
        while len(set(received)) < n:
            m = await consumer.receive(20_000)
            received.append(int(m.data()))
            await consumer.acknowledge(m)
        assert set(received) == set(range(n))
        reader = await client.create_reader(topic, MessageId.earliest)
        stored: list[int] = []
        try:
            while True:
                stored.append(int((await reader.read_next(2000)).data()))
        except Timeout:
            pass
        assert done_before <= set(stored)
        assert stored == list(range(n))  # in order, no duplicates
