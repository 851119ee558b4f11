"""Produce and consume with the official client: plain, batched, compressed, metadata,
async sends, chunked large messages (reference §6.2, §6.3, §6.7)."""

from __future__ import annotations

import threading

import pulsar
import pytest

from .helpers import assert_nothing_more, receive_all


def test_send_receive_ids_and_metadata(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(20):
        ids.append(
            producer.send(
                f"msg-{i}".encode(),
                properties={"i": str(i), "kind": "plain"},
                partition_key=f"key-{i % 3}",
                ordering_key=f"ok-{i}",
                event_timestamp=1_700_000_000_000 + i,
            )
        )
    msgs = receive_all(consumer, 20)
    for i, m in enumerate(msgs):
        assert m.data() == f"msg-{i}".encode()
        assert m.message_id() == ids[i]  # ledger, entry, batch index and partition all equal
        assert m.properties() == {"i": str(i), "kind": "plain"}
        assert m.partition_key() == f"key-{i % 3}"
        assert m.ordering_key() == f"ok-{i}"
        assert m.event_timestamp() == 1_700_000_000_000 + i
        assert m.publish_timestamp() > 0
        assert m.topic_name() == topic
        consumer.acknowledge(m)
    assert_nothing_more(consumer)
    assert producer.producer_name().startswith("standalone-")
    assert producer.last_sequence_id() == 19


def test_batched_sends_stay_in_order(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, batching_max_publish_delay_ms=10
    )
    for i in range(500):
        producer.send_async(f"b-{i}".encode(), None)
    producer.flush()
    msgs = receive_all(consumer, 500)
    assert [m.data() for m in msgs] == [f"b-{i}".encode() for i in range(500)]
    # batches arrive as several messages of one entry
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) < 500
    assert any(m.message_id().batch_index() > 0 for m in msgs)
    for m in msgs:
        consumer.acknowledge(m)
    assert_nothing_more(consumer)


@pytest.mark.parametrize(
    "compression",
    [
        pulsar.CompressionType.LZ4,
        pulsar.CompressionType.ZLib,
        pulsar.CompressionType.ZSTD,
        pulsar.CompressionType.SNAPPY,
    ],
)
@pytest.mark.parametrize("batching", [False, True])
def test_compression(
    client: pulsar.Client, topic: str, compression: pulsar.CompressionType, batching: bool
) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, compression_type=compression, batching_enabled=batching
    )
    payloads = [(f"compressible-{i}-" * 50).encode() for i in range(30)]
    for p in payloads:
        producer.send_async(p, None)
    producer.flush()
    assert [m.data() for m in receive_all(consumer, 30)] == payloads


def test_send_async_callbacks(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    results: dict[int, tuple[pulsar.Result, pulsar.MessageId]] = {}
    done = threading.Event()
    lock = threading.Lock()

    def callback(i: int):  # type: ignore[no-untyped-def]
        def cb(res: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            with lock:
                results[i] = (res, msg_id)
                if len(results) == 200:
                    done.set()

        return cb

    for i in range(200):
        producer.send_async(f"a-{i}".encode(), callback(i))
    assert done.wait(20)
    assert all(res == pulsar.Result.Ok for res, _ in results.values())
    entries = [results[i][1].entry_id() for i in range(200)]
    assert entries == sorted(entries) and len(set(entries)) == 200
    msgs = receive_all(consumer, 200)
    assert [m.data() for m in msgs] == [f"a-{i}".encode() for i in range(200)]


def test_chunked_large_message(client: pulsar.Client, topic: str) -> None:
    # the shared standalone advertises max_message_size = 128 KiB
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = bytes(range(256)) * 2048  # 512 KiB: several chunks
    producer.send(big)
    producer.send(b"small")
    m = consumer.receive(10_000)
    assert m.data() == big
    consumer.acknowledge(m)
    assert consumer.receive(10_000).data() == b"small"


def test_too_big_without_chunking_fails(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * 200_000)
