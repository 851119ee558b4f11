"""Retention, end to end: consumed ledgers are kept while the namespace's retention policy
covers them and deleted once it no longer does (issue 7: "retention deletes"), observed
through the official client and the admin REST API only."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pulsar

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import Http

ENTRIES_PER_LEDGER = 10
MESSAGES = 50

_log = logging.getLogger("pulsar-client")


def _read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    reader.close()
    return got


def test_retention_keeps_consumed_ledgers_then_trimming_deletes_them(
    standalone_factory: Callable[..., StandaloneProcess], name: str
) -> None:
    node = standalone_factory(
        "--managed-ledger-max-entries-per-ledger", str(ENTRIES_PER_LEDGER)
    )
    http = Http(node.http_url)
    namespace = f"public/{name}"
    topic = f"persistent://{namespace}/retained"
    http.ok("PUT", f"/admin/v2/namespaces/{namespace}")
    # Unlimited retention: consumed ledgers stay.
    http.ok(
        "POST",
        f"/admin/v2/namespaces/{namespace}/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    client = pulsar.Client(node.url, operation_timeout_seconds=15, logger=_log)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(f"m-{i}".encode())
        for _ in range(MESSAGES):
            consumer.acknowledge(consumer.receive(10_000))
        stats_path = f"/admin/v2/persistent/{namespace}/retained/internalStats"

        def ledgers() -> list[int]:
            return [ledger["ledgerId"] for ledger in http.ok("GET", stats_path)["ledgers"]]

        wait_until(
            lambda: http.ok("GET", f"/admin/v2/persistent/{namespace}/retained/stats")[
                "subscriptions"
            ]["sub"]["msgBacklog"]
            == 0,
            timeout_s=15,
        )
        assert len(ledgers()) >= MESSAGES // ENTRIES_PER_LEDGER
        assert _read_all(client, topic) == [f"m-{i}".encode() for i in range(MESSAGES)]

        # No retention: every ledger the subscription has consumed is deleted.
        http.ok(
            "POST",
            f"/admin/v2/namespaces/{namespace}/retention",
            {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
        )
        wait_until(lambda: len(ledgers()) <= 2, timeout_s=20)
        remaining = _read_all(client, topic)
        assert len(remaining) < MESSAGES
        assert remaining == [f"m-{i}".encode() for i in range(MESSAGES - len(remaining), MESSAGES)]
    finally:
        client.close()
