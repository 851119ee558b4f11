"""Messages at and above the broker's max message size, with the official wheel, against a
standalone at default settings (5 MiB ``maxMessageSize``, entries up to that plus 10 KiB of
frame padding).

A chunk (or a non-chunked message whose payload is exactly the max size) is an entry of the
max size plus its metadata: storage must take it. A message the client refuses must leave
the topic's ledgers as they were.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pulsar
import pytest

from magnetar.protocol import DEFAULT_MAX_MESSAGE_SIZE_BYTES
from magnetar.testing import StandaloneProcess

from .helpers import new_client

MIB = 1024 * 1024


def _internal_stats(node: StandaloneProcess, topic: str) -> dict[str, object]:
    args = [
        sys.executable, "-m", "magnetar.cli.main", "admin",
        "--admin-url", node.http_url,
        "topics", "stats-internal", topic, "--output", "json",
    ]  # fmt: skip
    out = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    stats: dict[str, object] = json.loads(out.stdout)
    return stats


def _ledger_count(node: StandaloneProcess, topic: str) -> int:
    ledgers = _internal_stats(node, topic)["ledgers"]
    assert isinstance(ledgers, list)
    return len(ledgers)


def test_chunked_10_mib_message_round_trips_at_defaults(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    topic = "persistent://public/default/chunked-10mib"
    client = new_client(node.url)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(
            topic, chunking_enabled=True, batching_enabled=False, send_timeout_millis=30_000
        )
        payload = os.urandom(10 * MIB)
        producer.send(payload)
        msg = consumer.receive(60_000)
        assert msg.data() == payload
        consumer.acknowledge(msg)
        # the chunks went into the topic's one ledger: no failure, no rollover
        assert _ledger_count(node, topic) == 1
    finally:
        client.close()


def test_largest_unchunked_message_is_stored_and_one_byte_more_refused_at_once(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    topic = "persistent://public/default/max-size"
    client = new_client(node.url)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(
            topic, chunking_enabled=False, batching_enabled=False, send_timeout_millis=30_000
        )
        # The client counts payload plus metadata against the max size; the largest message
        # it lets through is an entry of the max size plus the entry header (magic, checksum,
        # metadata size): more than 5 MiB, within the padding.
        data = os.urandom(DEFAULT_MAX_MESSAGE_SIZE_BYTES)
        size = len(data)
        while True:
            try:
                producer.send(data[:size])
                break
            except pulsar.MessageTooBig:
                size -= 1
                assert size > len(data) - 1024, "the client refuses far below the max size"
        assert consumer.receive(30_000).data() == data[:size]
        ledgers_before = _ledger_count(node, topic)
        assert ledgers_before == 1
        with pytest.raises(pulsar.MessageTooBig):
            producer.send(data[: size + 1])
        # nothing reached storage; the producer still works
        assert _ledger_count(node, topic) == ledgers_before
        producer.send(b"after")
        assert consumer.receive(10_000).data() == b"after"
        assert _ledger_count(node, topic) == ledgers_before
    finally:
        client.close()
