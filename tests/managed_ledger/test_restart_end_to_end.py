"""A topic's log across a standalone killed and restarted (the broker's failover in one
process), seen through the official client and ``magnetar admin topics stats``.

* A batched topic's ``msgBacklog`` after the restart equals the messages a consumer then
  receives (issue 34: 1,323 against 1,500 when the recovered ledger counted one message per
  entry), and its ``storageSize`` is what it was (the recovered ledger counted 0 bytes).
* A topic with no subscription under retention 0 loses its messages at the restart
  (Pulsar's rule, kept), and its stats say so in ``retentionNote`` (issue 34).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.admin.topic_stats import UNRETAINED_NOTE
from magnetar.testing import StandaloneProcess, wait_until

MESSAGES = 1500
_log = logging.getLogger("pulsar-client")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[StandaloneProcess]:
    process = StandaloneProcess(tmp_path / "data")
    try:
        process.start()
        yield process
    finally:
        process.kill()


def _stats(node: StandaloneProcess, topic: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url,
         "topics", "stats", topic],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _produce_batched(node: StandaloneProcess, topic: str) -> None:
    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_log)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=10,
            batching_max_publish_delay_ms=50,
            block_if_queue_full=True,
        )
        for i in range(MESSAGES):
            producer.send_async(b"m-%d" % i, None)
        producer.flush()
        producer.close()
    finally:
        client.close()


def test_a_batched_backlog_counts_messages_after_a_restart(node: StandaloneProcess) -> None:
    topic = f"persistent://public/default/batched-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_log)
    client.subscribe(topic, "sub").close()  # the subscription keeps the messages
    client.close()
    _produce_batched(node, topic)
    before = _stats(node, topic)
    assert before["subscriptions"]["sub"]["msgBacklog"] == MESSAGES
    assert before["retentionNote"] is None

    node.kill()  # the owner dies with its ledger open: the next owner recovers it
    node.start()
    after = _stats(node, topic)
    assert after["subscriptions"]["sub"]["msgBacklog"] == MESSAGES
    assert after["storageSize"] == before["storageSize"] > 0

    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_log)
    try:
        consumer = client.subscribe(topic, "sub")
        received = set()
        while len(received) < MESSAGES:
            message = consumer.receive(15_000)
            received.add(message.data())
            consumer.acknowledge(message)
        assert received == {b"m-%d" % i for i in range(MESSAGES)}
        consumer.close()
    finally:
        client.close()
    assert _stats(node, topic)["subscriptions"]["sub"]["msgBacklog"] == 0


def test_a_topic_without_subscription_says_its_messages_are_not_retained(
    node: StandaloneProcess,
) -> None:
    topic = f"persistent://public/default/unretained-{uuid.uuid4().hex[:8]}"
    _produce_batched(node, topic)
    stats = _stats(node, topic)
    assert stats["subscriptions"] == {}
    assert stats["retentionNote"] == UNRETAINED_NOTE

    node.kill()
    node.start()
    # what the note says: the recovered ledger is trimmed, nothing is left to read
    wait_until(lambda: _stats(node, topic)["storageSize"] == 0, timeout_s=30)
    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_log)
    try:
        client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    finally:
        client.close()
    stats = _stats(node, topic)
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 0  # from the oldest: nothing
    assert stats["retentionNote"] is None  # a subscription keeps what comes now
