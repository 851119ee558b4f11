"""The blocking facade, and a broker restart in the middle of a stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.client import Client, ConsumerType
from magnetar.client import sync as blocking
from magnetar.testing import StandaloneProcess


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
