"""Message TTL inside a ledger, with the official wheel against a standalone process.

The topic keeps receiving, so its one ledger never closes: expiring whole ledgers only would
never expire anything. Pulsar's expiry monitor moves each subscription's mark-delete past
the messages published more than the TTL ago, by their publish time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from typing import Any

from magnetar.testing import StandaloneProcess, wait_until

from .helpers import new_client

TTL_S = 3


def _admin(node: StandaloneProcess, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout


def _internal_stats(node: StandaloneProcess, topic: str) -> Any:
    path = topic.replace("persistent://", "persistent/")
    url = f"{node.http_url}/admin/v2/{path}/internalStats"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)


def _position(text: str) -> tuple[int, int]:
    ledger, entry = text.split(":")
    return int(ledger), int(entry)


def test_ttl_expires_messages_inside_a_ledger_that_keeps_growing(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    _admin(node, "namespaces", "create", "public/ttl")
    _admin(node, "namespaces", "set-message-ttl", "public/ttl", "--messageTTL", str(TTL_S))
    topic = "persistent://public/ttl/busy"
    client = new_client(node.url)
    stop = threading.Event()
    try:
        client.subscribe(topic, "idle").close()  # a subscription with a growing backlog
        producer = client.create_producer(topic, batching_enabled=False)
        first = producer.send(b"0")
        sent = [1]

        def publish() -> None:
            while not stop.is_set():
                producer.send(b"%d" % sent[0])
                sent[0] += 1
                stop.wait(0.02)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()

        def mark_delete() -> tuple[int, int]:
            stats = _internal_stats(node, topic)
            return _position(stats["cursors"]["idle"]["markDeletePosition"])

        # within TTL + a monitor period (+ slack for a loaded machine) the first messages
        # are expired while the ledger they are in is still the one being written
        wait_until(lambda: mark_delete() >= (first.ledger_id(), first.entry_id()), 30)
        stats = _internal_stats(node, topic)
        assert len(stats["ledgers"]) == 1
        assert sent[0] > 1  # publishing went on meanwhile

        # the expiry is counted in the subscription's stats, as an admin expiry is
        url = f"{node.http_url}/admin/v2/{topic.replace('persistent://', 'persistent/')}/stats"
        with urllib.request.urlopen(url, timeout=30) as resp:
            sub_stats = json.load(resp)["subscriptions"]["idle"]
        assert sub_stats["totalMsgExpired"] >= 1
        assert sub_stats["lastExpireTimestamp"] > 0

        consumer = client.subscribe(topic, "idle")
        got = consumer.receive(10_000)
        assert got.data() != b"0"
        assert int(got.data()) > 0
        stop.set()
        publisher.join(10)
    finally:
        stop.set()
        client.close()
