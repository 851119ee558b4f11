"""Every subscription type with the official client (reference §6.5, §6.6, §6.9, §6.10)."""

from __future__ import annotations

import collections

import pulsar
import pytest

from magnetar.testing import wait_until

from .helpers import assert_nothing_more, receive_all


def test_exclusive_second_consumer_is_busy(client: pulsar.Client, topic: str) -> None:
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):  # another type while consumers exist
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    first.close()
    again = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    again.close()


def test_initial_position_earliest_and_latest(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"old")
    latest = client.subscribe(topic, "latest")
    earliest = client.subscribe(topic, "earliest", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"new")
    assert earliest.receive(5000).data() == b"old"
    assert earliest.receive(5000).data() == b"new"
    assert latest.receive(5000).data() == b"new"
    assert_nothing_more(latest)


def test_shared_round_robin_no_loss_no_duplicates(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        for _ in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(300):
        producer.send_async(f"s-{i}".encode(), None)
    producer.flush()
    got: dict[int, list[bytes]] = collections.defaultdict(list)
    seen = 0
    while seen < 300:
        progressed = False
        for idx, c in enumerate(consumers):
            try:
                m = c.receive(50)
            except pulsar.Timeout:
                continue
            got[idx].append(m.data())
            c.acknowledge(m)
            seen += 1
            progressed = True
        if not progressed and seen < 300:
            wait_until(lambda: True)
    everything = [d for msgs in got.values() for d in msgs]
    assert sorted(everything) == sorted(f"s-{i}".encode() for i in range(300))
    assert all(len(got[i]) > 0 for i in range(3)), {k: len(v) for k, v in got.items()}
    for c in consumers:
        assert_nothing_more(c, 200)


def test_shared_close_replays_unacked_to_others(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"r-{i}".encode())
    held = receive_all(a, 20)  # received, never acknowledged
    assert len(held) == 20
    b = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    a.close()
    again = receive_all(b, 20)
    assert sorted(m.data() for m in again) == sorted(f"r-{i}".encode() for i in range(20))


def _first_receiver(consumers: dict[str, pulsar.Consumer]) -> tuple[str, pulsar.Message]:
    def poll() -> tuple[str, pulsar.Message] | None:
        for name, c in consumers.items():
            try:
                return name, c.receive(50)
            except pulsar.Timeout:
                continue
        return None

    return wait_until(poll, 15)


def test_failover_active_gets_all_and_hands_over(client: pulsar.Client, topic: str) -> None:
    # (the Python wheel has no consumer event listener: activity is observed by delivery)
    consumers = {
        name: client.subscribe(
            topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name=name
        )
        for name in ("c1", "c2", "c3")
    }
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"f-{i}".encode())
    active, first = _first_receiver(consumers)
    msgs = [first, *receive_all(consumers[active], 29)]
    assert [m.data() for m in msgs] == [f"f-{i}".encode() for i in range(30)]
    for m in msgs[:10]:
        consumers[active].acknowledge(m)
    for name, c in consumers.items():
        if name != active:
            assert_nothing_more(c, 200)
    consumers[active].close()
    # the next active consumer receives every unacknowledged message, in order
    remaining = {n: c for n, c in consumers.items() if n != active}
    new_active, head = _first_receiver(remaining)
    tail = [head, *receive_all(remaining[new_active], 19)]
    assert [m.data() for m in tail] == [f"f-{i}".encode() for i in range(10, 30)]
    for name, c in remaining.items():
        if name != new_active:
            assert_nothing_more(c, 200)


def test_key_shared_keeps_keys_on_one_consumer_in_order(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(3)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(12)]
    for i in range(240):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % 12])
    producer.flush()
    owner: dict[str, int] = {}
    per_key: dict[str, list[int]] = collections.defaultdict(list)
    seen = 0
    while seen < 240:
        for idx, c in enumerate(consumers):
            try:
                m = c.receive(50)
            except pulsar.Timeout:
                continue
            key = m.partition_key()
            assert owner.setdefault(key, idx) == idx, f"{key} went to two consumers"
            per_key[key].append(int(m.data()))
            c.acknowledge(m)
            seen += 1
    for values in per_key.values():
        assert values == sorted(values)
    assert len(set(owner.values())) > 1
