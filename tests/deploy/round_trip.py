"""What both end-to-end chart tests do through the proxy: produce and consume."""

from __future__ import annotations

import pulsar


def produce_and_consume(client: pulsar.Client, topic: str, sent: list[bytes]) -> None:
    """Subscribe from the start, send ``sent`` one by one, and check that exactly those
    come back, in order (each acknowledged)."""
    consumer = client.subscribe(topic, "e2e", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for payload in sent:
        producer.send(payload)
    received = []
    for _ in sent:
        message = consumer.receive(timeout_millis=30_000)
        received.append(message.data())
        consumer.acknowledge(message)
    assert received == sent
