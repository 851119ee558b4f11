"""WaitForExclusive producers, delayed delivery, priority levels, Key_Shared STICKY,
UNSUBSCRIBE, CONSUMER_STATS and base64 partition keys (reference §6.2, §6.5, §6.6, §6.11).

Through the official wheel where it can express the feature; where it cannot (priority
levels, CONSUMER_STATS — the Python wheel has no ``get_broker_consumer_stats`` — and
``partition_key_b64_encoded``) through :class:`.raw.RawClient`, our codec on a socket.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from datetime import timedelta

import pulsar
import pytest

from magnetar.broker.key_shared import sticky_key_hash
from magnetar.protocol import (
    ConsumerStats,
    ConsumerStatsResponse,
    Flow,
    KeySharedMeta,
    Message,
    Producer,
    ProducerSuccess,
    Subscribe,
    SubType,
    Success,
)
from magnetar.protocol.command import IntRange as HashRange
from magnetar.protocol.command import KeySharedMode
from magnetar.testing import StandaloneProcess, wait_until

from .helpers import assert_nothing_more, receive_all
from .raw import RawClient


def test_wait_for_exclusive_producer_becomes_ready_when_holder_closes(
    client: pulsar.Client, topic: str
) -> None:
    mode = pulsar.ProducerAccessMode
    holder = client.create_producer(topic, access_mode=mode.Exclusive)
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: created.append(
            client.create_producer(topic, access_mode=mode.WaitForExclusive)
        ),
        daemon=True,
    )
    waiter.start()
    waiter.join(1.0)
    assert not created, "WaitForExclusive must wait while an exclusive producer holds"
    holder.send(b"from-holder")
    holder.close()
    waiter.join(15)
    assert created, "the waiting producer did not become ready"
    created[0].send(b"from-waiter")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=mode.Exclusive)
    created[0].close()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in receive_all(reader, 2)] == [b"from-holder", b"from-waiter"]


def test_delayed_delivery_on_shared_and_ignored_on_exclusive(
    client: pulsar.Client, topic: str
) -> None:
    shared = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    exclusive = client.subscribe(topic, "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic, batching_enabled=False)
    sent_at = time.monotonic()
    producer.send(b"later", deliver_after=timedelta(seconds=2))
    producer.send(b"now")
    # Exclusive ignores deliver_at_time (Java: only multi-consumer dispatchers delay)
    assert [m.data() for m in receive_all(exclusive, 2)] == [b"later", b"now"]
    assert shared.receive(5_000).data() == b"now"
    later = shared.receive(10_000)
    assert later.data() == b"later"
    assert time.monotonic() - sent_at >= 1.9
    shared.acknowledge(later)


def test_key_shared_sticky_ranges_and_overlap(client: pulsar.Client, topic: str) -> None:
    def sticky(ranges: list[tuple[int, int]]) -> pulsar.ConsumerKeySharedPolicy:
        return pulsar.ConsumerKeySharedPolicy(
            key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=ranges
        )

    ks = pulsar.ConsumerType.KeyShared
    low = client.subscribe(topic, "ks", consumer_type=ks, key_shared_policy=sticky([(0, 32767)]))
    with pytest.raises(pulsar.ConsumerAssignError):
        client.subscribe(topic, "ks", consumer_type=ks, key_shared_policy=sticky([(30000, 40000)]))
    high = client.subscribe(
        topic, "ks", consumer_type=ks, key_shared_policy=sticky([(32768, 65535)])
    )
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(40)]
    for k in keys:
        producer.send(k.encode(), partition_key=k)
    got: dict[str, str] = {}
    for consumer, name in ((low, "low"), (high, "high")):
        while True:
            try:
                m = consumer.receive(1_000)
            except pulsar.Timeout:
                break
            got[m.data().decode()] = name
            consumer.acknowledge(m)
    assert sorted(got) == sorted(keys)
    for k in keys:
        expected = "low" if sticky_key_hash(k.encode()) <= 32767 else "high"
        assert got[k] == expected, k


def test_unsubscribe_and_busy_rule(client: pulsar.Client, topic: str) -> None:
    shared = pulsar.ConsumerType.Shared
    a = client.subscribe(topic, "sub", consumer_type=shared)
    b = client.subscribe(topic, "sub", consumer_type=shared)
    client.create_producer(topic).send(b"m")
    with pytest.raises(pulsar.PulsarException):
        a.unsubscribe()  # "Unconnected or shared consumer attempting to unsubscribe"
    b.close()
    a.unsubscribe()
    # the subscription is gone: a new one at Latest does not see the old message
    c = client.subscribe(topic, "sub", consumer_type=shared)
    assert_nothing_more(c, 500)


def _subscribe_raw(
    raw: RawClient,
    topic: str,
    sub: str,
    consumer_id: int,
    sub_type: SubType,
    **kwargs: object,
) -> None:
    answer = raw.request(
        Subscribe(
            topic=topic,
            subscription=sub,
            sub_type=sub_type,
            consumer_id=consumer_id,
            request_id=raw.next_id(),
            **kwargs,  # type: ignore[arg-type]
        )
    )
    assert isinstance(answer, Success), answer


def _raw_producer(raw: RawClient, topic: str, producer_id: int) -> None:
    answer = raw.request(Producer(topic=topic, producer_id=producer_id, request_id=raw.next_id()))
    assert isinstance(answer, ProducerSuccess), answer


def test_priority_levels_in_shared(standalone: StandaloneProcess, topic: str) -> None:
    raw = RawClient(standalone.port)
    try:
        _subscribe_raw(raw, topic, "prio", 1, SubType.Shared, priority_level=1, consumer_name="low")
        _subscribe_raw(
            raw, topic, "prio", 2, SubType.Shared, priority_level=0, consumer_name="high"
        )
        raw.send_command(Flow(consumer_id=1, message_permits=100))
        raw.send_command(Flow(consumer_id=2, message_permits=5))
        _raw_producer(raw, topic, 1)
        for i in range(12):
            raw.send_message(1, i, f"m{i}".encode())
        got = [
            raw.wait_for(lambda f: isinstance(f.command, Message)).command.consumer_id  # type: ignore[attr-defined]
            for _ in range(12)
        ]
        # priority 0 gets entries while it has permits; the rest go to priority 1
        assert got.count(2) == 5 and got.count(1) == 7
    finally:
        raw.close()


def test_consumer_stats(standalone: StandaloneProcess, topic: str) -> None:
    raw = RawClient(standalone.port)
    try:
        _subscribe_raw(raw, topic, "stats", 7, SubType.Shared, consumer_name="c7")
        raw.send_command(Flow(consumer_id=7, message_permits=3))
        _raw_producer(raw, topic, 1)
        for i in range(5):
            raw.send_message(1, i, b"x")
        for _ in range(3):
            raw.wait_for(lambda f: isinstance(f.command, Message))

        def stats() -> ConsumerStatsResponse:
            answer = raw.request(ConsumerStats(request_id=raw.next_id(), consumer_id=7))
            assert isinstance(answer, ConsumerStatsResponse), answer
            return answer

        s = wait_until(lambda: (st := stats()).msg_backlog == 5 and st, timeout_s=10)
        assert s.consumer_name == "c7" and s.type == "Shared"
        assert s.unacked_messages == 3 and s.available_permits == 0
    finally:
        raw.close()


def test_base64_partition_keys_are_decoded_for_key_shared(
    standalone: StandaloneProcess, topic: str
) -> None:
    # Two consumers with STICKY ranges split the hash space; a key sent base64-encoded
    # must land where its decoded bytes hash, not where its base64 text would.
    def halves(key: bytes) -> tuple[bool, bool]:
        text = base64.b64encode(key)
        return sticky_key_hash(key) <= 32767, sticky_key_hash(text) <= 32767

    key = next(k for k in (bytes([i, 255 - i, 7]) for i in range(256)) if len(set(halves(k))) == 2)
    text = base64.b64encode(key).decode()
    decoded_slot = sticky_key_hash(key)
    raw = RawClient(standalone.port)
    try:
        for cid, rng in (
            (1, HashRange(start=0, end=32767)),
            (2, HashRange(start=32768, end=65535)),
        ):
            meta = KeySharedMeta(key_shared_mode=KeySharedMode.STICKY, hash_ranges=(rng,))
            _subscribe_raw(raw, topic, "b64", cid, SubType.Key_Shared, key_shared_meta=meta)
            raw.send_command(Flow(consumer_id=cid, message_permits=10))
        _raw_producer(raw, topic, 1)
        raw.send_message(1, 0, b"v", partition_key=text, partition_key_b64_encoded=True)
        frame = raw.wait_for(lambda f: isinstance(f.command, Message))
        expected = 1 if decoded_slot <= 32767 else 2
        assert frame.command.consumer_id == expected  # type: ignore[attr-defined]
    finally:
        raw.close()


def test_producer_and_consumer_properties_show_in_topic_stats(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    """The Functions Worker names its coordination consumer in a consumer property (``id``),
    as Pulsar's workers do; the broker keeps both kinds of properties and stats show them."""
    client.subscribe(topic, "props", consumer_name="w1", properties={"id": "w1:127.0.0.1:6750"})
    client.create_producer(topic, producer_name="p1", properties={"team": "blue"})
    with urllib.request.urlopen(
        f"{standalone.http_url}/admin/v2/persistent/{topic.split('://', 1)[1]}/stats", timeout=10
    ) as resp:
        stats = json.load(resp)
    [consumer] = stats["subscriptions"]["props"]["consumers"]
    assert consumer["metadata"] == {"id": "w1:127.0.0.1:6750"}
    [producer] = stats["publishers"]
    assert producer["metadata"] == {"team": "blue"}
