"""Acceptance: the official ``pulsar`` wheel against ``magnetar standalone`` run as a real
process; compaction triggered and watched through the admin REST (``PUT``/``GET
.../compaction``)."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneProcess, wait_until

_client_log = logging.getLogger("pulsar-client")
_client_log.setLevel(logging.WARNING)

TOPIC = "persistent://public/default/compacted-table"
KEYS = [f"k{i}" for i in range(8)]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[StandaloneProcess]:
    proc = StandaloneProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


def compaction_url(node: StandaloneProcess) -> str:
    return f"{node.http_url}/admin/v2/persistent/public/default/compacted-table/compaction"


def compaction_status(node: StandaloneProcess) -> dict[str, str]:
    with urllib.request.urlopen(compaction_url(node), timeout=10) as resp:
        body: dict[str, str] = json.loads(resp.read())
        return body


def compact(node: StandaloneProcess) -> None:
    req = urllib.request.Request(compaction_url(node), method="PUT")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)
    wait_until(lambda: compaction_status(node)["status"] in ("SUCCESS", "ERROR"), timeout_s=60)
    assert compaction_status(node) == {"status": "SUCCESS", "lastError": ""}


def produce_history(client: pulsar.Client) -> dict[str, bytes]:
    """Many updates of a few keys, batched (LZ4) then unbatched, then two tombstones (one
    of them inside a batch); returns the latest value per live key."""
    latest: dict[str, bytes] = {}
    batched = client.create_producer(
        TOPIC,
        batching_enabled=True,
        batching_max_messages=16,
        batching_max_publish_delay_ms=5,
        compression_type=pulsar.CompressionType.LZ4,
    )
    for i in range(400):
        key = KEYS[i % len(KEYS)]
        value = f"batched-{i}".encode()
        batched.send_async(value, None, partition_key=key)
        latest[key] = value
    batched.flush()
    single = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(60):
        key = KEYS[(i * 3) % 5]  # updates keys k0..k4 only
        value = f"single-{i}".encode()
        single.send(value, partition_key=key)
        latest[key] = value
    single.send(b"", partition_key="k1")  # tombstone
    del latest["k1"]
    batched.send_async(b"", None, partition_key="k6")  # tombstone inside a batch
    batched.send_async(b"after-tombstone", None, partition_key="k7")
    batched.flush()
    del latest["k6"]
    latest["k7"] = b"after-tombstone"
    batched.close()
    single.close()
    return latest


def read_all(client: pulsar.Client) -> list[tuple[str, bytes]]:
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=True)
    out = []
    try:
        while reader.has_message_available():
            m = reader.read_next(10_000)
            out.append((m.partition_key(), m.data()))
    finally:
        reader.close()
    return out


def as_table(messages: list[tuple[str, bytes]]) -> dict[str, bytes]:
    keys = [k for k, _ in messages]
    assert len(keys) == len(set(keys)), f"a key delivered twice: {keys}"
    return dict(messages)


def test_read_compacted_reader_and_consumer(node: StandaloneProcess) -> None:
    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_client_log)
    try:
        latest = produce_history(client)
        assert compaction_status(node) == {"status": "NOT_RUN", "lastError": ""}
        compact(node)

        assert as_table(read_all(client)) == latest
        # the full history is still there for plain readers
        plain = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        count = 0
        while plain.has_message_available():
            plain.read_next(10_000)
            count += 1
        plain.close()
        assert count == 400 + 60 + 3

        consumer = client.subscribe(
            TOPIC,
            "table-view",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = []
        for _ in range(len(latest)):
            m = consumer.receive(10_000)
            got.append((m.partition_key(), m.data()))
            consumer.acknowledge(m)
        assert as_table(got) == latest

        # produced after compaction: follows the compacted view
        producer = client.create_producer(TOPIC, batching_enabled=False)
        producer.send(b"new-k0", partition_key="k0")
        producer.send(b"new-k1", partition_key="k1")
        producer.close()
        m1, m2 = consumer.receive(10_000), consumer.receive(10_000)
        assert [(m1.partition_key(), m1.data()), (m2.partition_key(), m2.data())] == [
            ("k0", b"new-k0"),
            ("k1", b"new-k1"),
        ]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
        consumer.close()
        after = read_all(client)
        assert after[-2:] == [("k0", b"new-k0"), ("k1", b"new-k1")]
        assert as_table(after[:-2]) == latest
    finally:
        client.close()

    # survives a restart: the view is stored, compaction status starts over
    assert node.stop() == 0
    node.start()
    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_client_log)
    try:
        assert compaction_status(node)["status"] == "NOT_RUN"
        after_restart = read_all(client)
        assert as_table(after_restart[:-2]) == latest
        assert after_restart[-2:] == [("k0", b"new-k0"), ("k1", b"new-k1")]
        # compacting again folds the tail in
        compact(node)
        latest.update({"k0": b"new-k0", "k1": b"new-k1"})
        assert as_table(read_all(client)) == latest
    finally:
        client.close()
