"""Retention, end to end: consumed ledgers are kept while the namespace's retention policy
covers them and deleted once it no longer does (issue 7: "retention deletes"), observed
through the official client and the admin REST API only.

Two namespaces get the same traffic, one with unlimited retention and one with none; once
trimming has deleted the consumed ledgers of the second, the first must still hold all of
its own (the same trimming ran over both), until its retention is lifted too."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pulsar

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import Http

ENTRIES_PER_LEDGER = 10
MESSAGES = 50
UNLIMITED = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
NONE = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}

_log = logging.getLogger("pulsar-client")


def _read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    reader.close()
    return got


def test_retention_keeps_consumed_ledgers_until_lifted(
    standalone_factory: Callable[..., StandaloneProcess], name: str
) -> None:
    node = standalone_factory(
        "--managed-ledger-max-entries-per-ledger", str(ENTRIES_PER_LEDGER),
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
    )  # fmt: skip
    http = Http(node.http_url)
    kept, trimmed = f"public/{name}-kept", f"public/{name}-trimmed"
    for namespace, retention in ((kept, UNLIMITED), (trimmed, NONE)):
        http.ok("PUT", f"/admin/v2/namespaces/{namespace}")
        http.ok("POST", f"/admin/v2/namespaces/{namespace}/retention", retention)

    def ledgers(namespace: str) -> int:
        stats = http.ok("GET", f"/admin/v2/persistent/{namespace}/t/internalStats")
        return len(stats["ledgers"])

    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_log)
    try:
        for namespace in (kept, trimmed):
            topic = f"persistent://{namespace}/t"
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(MESSAGES):
                producer.send(f"m-{i}".encode())
            for _ in range(MESSAGES):
                consumer.acknowledge(consumer.receive(10_000))
            consumer.close()  # flushes the acks
            producer.close()

        wait_until(lambda: ledgers(trimmed) <= 2, timeout_s=20)
        assert len(_read_all(client, f"persistent://{trimmed}/t")) < MESSAGES
        assert ledgers(kept) >= MESSAGES // ENTRIES_PER_LEDGER
        all_messages = [f"m-{i}".encode() for i in range(MESSAGES)]
        assert _read_all(client, f"persistent://{kept}/t") == all_messages

        http.ok("POST", f"/admin/v2/namespaces/{kept}/retention", NONE)
        wait_until(lambda: ledgers(kept) <= 2, timeout_s=20)
        remaining = _read_all(client, f"persistent://{kept}/t")
        assert len(remaining) < MESSAGES
        assert remaining == all_messages[MESSAGES - len(remaining) :]
    finally:
        client.close()
