"""Numbered messages for the offload acceptance tests: each payload repeats its number, so a
message read back from any tier shows whether it came back whole."""

from __future__ import annotations

import uuid

import pulsar

MESSAGE_BYTES = 10_000


def payload(i: int) -> bytes:
    return (b"%08d" % i) * (MESSAGE_BYTES // 8)


def produce(service_url: str, topic: str, first: int, count: int) -> None:
    """Sends messages ``first`` … ``first + count - 1``, one entry each; a durable
    subscription ``hold`` (made on the first call) keeps the history from being trimmed."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        client.subscribe(topic, "hold", initial_position=pulsar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        for i in range(first, first + count):
            producer.send_async(payload(i), None)
        producer.flush()
    finally:
        client.close()


def read_all(service_url: str, topic: str, expected: int) -> list[int]:
    """The numbers of the first ``expected`` messages a new subscription reads from the
    start, in order; each payload is checked whole."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(
            topic,
            f"reader-{uuid.uuid4().hex[:6]}",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got: list[int] = []
        for _ in range(expected):
            msg = consumer.receive(timeout_millis=30_000)
            data = msg.data()
            assert data == payload(int(data[:8])), "a message came back changed"
            got.append(int(data[:8]))
            consumer.acknowledge(msg)
        return got
    finally:
        client.close()
