"""Producer names and access modes (reference §6.2)."""

from __future__ import annotations

import contextlib

import pulsar
import pytest


def test_same_producer_name_is_busy(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, producer_name="p1")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="p1")


def test_exclusive_producer_fences_others(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive).close()


def test_exclusive_with_fencing_takes_over(client: pulsar.Client, topic: str) -> None:
    old = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    old.send(b"before")
    new = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing)
    new.send(b"after")
    with pytest.raises((pulsar.ProducerFenced, pulsar.AlreadyClosed, pulsar.Timeout)):
        old.send(b"stale")
    with contextlib.suppress(pulsar.AlreadyClosed):  # a fenced producer is already closed
        old.close()
