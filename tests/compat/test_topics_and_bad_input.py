"""Partitioned topics, regex subscriptions, and bad input on the wire (reference §1, §5,
§6.1, §6.12; DESIGN §6)."""

from __future__ import annotations

import re
import socket
import struct
import urllib.request
import uuid

import _pulsar
import pulsar
import pytest

from magnetar.protocol.varint import encode_varint
from magnetar.testing import StandaloneProcess

from .helpers import assert_nothing_more, receive_all


def _create_partitioned(node: StandaloneProcess, topic: str, partitions: int) -> None:
    path = topic.replace("persistent://", "persistent/")
    req = urllib.request.Request(
        f"{node.http_url}/admin/v2/{path}/partitions", data=str(partitions).encode(), method="PUT"
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 204


def test_readiness_endpoints(standalone: StandaloneProcess) -> None:
    for path in ("/ready", "/admin/v2/brokers/health"):
        with urllib.request.urlopen(standalone.http_url + path, timeout=10) as resp:
            assert resp.status == 200


def test_partitioned_topic_through_one_client_object(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    _create_partitioned(standalone, topic, 4)
    assert len(client.get_topic_partitions(topic)) == 4
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"p-{i}".encode(), partition_key=f"k{i}")
    msgs = receive_all(consumer, 40)
    assert sorted(m.data() for m in msgs) == sorted(f"p-{i}".encode() for i in range(40))
    partitions = {m.topic_name() for m in msgs}
    assert len(partitions) > 1 and all("-partition-" in t for t in partitions)


def test_regex_subscription_over_existing_topics(client: pulsar.Client) -> None:
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    for suffix in ("a", "b"):
        producer = client.create_producer(f"persistent://public/default/{prefix}-{suffix}")
        producer.send(f"from-{suffix}".encode())
        producer.close()
    client.create_producer(f"persistent://public/default/other-{prefix}").send(b"no")
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "sub",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = sorted(m.data() for m in receive_all(consumer, 2))
    assert got == [b"from-a", b"from-b"]
    assert_nothing_more(consumer)


def test_regex_subscription_picks_up_new_topics(client: pulsar.Client) -> None:
    # The wheel's Client.subscribe accepts pattern_auto_discovery_period but never passes it
    # to the C++ ConsumerConfiguration (pulsar/__init__.py 3.13), so the C++ default of 60 s
    # applies. The wheel's own binding sets it: the same C++ PatternMultiTopicsConsumerImpl,
    # which re-sends GET_TOPICS_OF_NAMESPACE every period and subscribes to new matches.
    prefix = f"rxn-{uuid.uuid4().hex[:8]}"
    conf = _pulsar.ConsumerConfiguration()
    conf.pattern_auto_discovery_period(1)
    conf.subscription_initial_position(pulsar.InitialPosition.Earliest)
    consumer = client._client.subscribe_pattern(
        f"persistent://public/default/{prefix}-.*", "sub", conf
    )
    try:
        client.create_producer(f"persistent://public/default/other-{prefix}").send(b"no")
        producer = client.create_producer(f"persistent://public/default/{prefix}-new")
        producer.send(b"created-after-subscribe")
        msg = consumer.receive(20_000)
        assert msg.data() == b"created-after-subscribe"
        assert msg.topic_name() == f"persistent://public/default/{prefix}-new"
        consumer.acknowledge(msg)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(1_500)  # the non-matching topic stays out
    finally:
        consumer.close()


def _raw_connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _works(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "check")
    client.create_producer(topic).send(b"still-alive")
    assert consumer.receive(10_000).data() == b"still-alive"


def test_garbage_closes_only_that_connection(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for payload in (
        b"\x00\x00\x00\x05garbage-not-protobuf",
        struct.pack(">II", 0x7FFFFFFF, 4) + b"huge",  # over-max frame
        b"GET / HTTP/1.1\r\n\r\n",
    ):
        with _raw_connect(standalone.port) as s:
            s.sendall(payload)
            assert _closed_by_peer(s)
    producer.send(b"after-garbage")
    assert consumer.receive(10_000).data() == b"after-garbage"
    _works(client, topic + "-b")


def _frame(command: bytes) -> bytes:
    return struct.pack(">II", len(command) + 4, len(command)) + command


def _connect_frame() -> bytes:
    version = b"raw-test"
    connect = b"\x0a" + encode_varint(len(version)) + version + b"\x20" + encode_varint(20)
    return _frame(b"\x08\x02\x12" + encode_varint(len(connect)) + connect)


def test_unknown_command_and_send_for_unknown_producer(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    with _raw_connect(standalone.port) as s:
        s.sendall(_connect_frame())
        assert s.recv(4096)  # CONNECTED
        s.sendall(_frame(b"\x08\xe7\x07"))  # type 999: unknown to the protocol
        assert _closed_by_peer(s)
    with _raw_connect(standalone.port) as s:
        s.sendall(_connect_frame())
        assert s.recv(4096)
        send = b"\x08\x07\x10\x01"  # producer_id 7, sequence_id 1
        entry = struct.pack(">I", 2) + b"\x0a\x00"
        body = b"\x08\x06\x32" + encode_varint(len(send)) + send
        s.sendall(struct.pack(">II", 4 + len(body) + len(entry), len(body)) + body + entry)
        assert _closed_by_peer(s)
    _works(client, topic)
