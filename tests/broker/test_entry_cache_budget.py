"""``--managed-ledger-cache-size-mb``: the tailing-read caches of all topics of a standalone
hold no more than it together (they held 64 MiB each), and a consumer that fell behind
still gets every message, read back from the bookie; an idle topic's cache empties by age."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable

import pulsar

from magnetar.managed_ledger.entry_cache import ENTRY_OVERHEAD_BYTES
from magnetar.testing import StandaloneProcess, wait_until

MIB = 1024 * 1024
TOPICS = 4
MESSAGES = 300
PAYLOAD = b"m" * 4000  # 4 topics x 1.2 MB: several times the budget
METADATA_BYTES = 256
"""Per entry besides the message's payload (its metadata), for the bound of one entry past
the budget."""


def cache_metrics(node: StandaloneProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"{node.http_url}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r"^(pulsar_ml_cache_used_size|magnetar_ml_cache_evicted_bytes_total) (\S+)$", text, re.M
        )
    }


def test_caches_of_all_topics_stay_within_the_budget(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory("--managed-ledger-cache-size-mb", "1")
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        topics = [f"persistent://public/default/cache-budget-{i}" for i in range(TOPICS)]
        for topic in topics:  # a subscription keeps the messages; nobody reads them yet
            client.subscribe(topic, "late").close()
        for topic in topics:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(MESSAGES):
                producer.send_async(PAYLOAD + str(i).encode(), None)
            producer.flush()
            producer.close()
        metrics = cache_metrics(node)
        assert (
            0
            < metrics["pulsar_ml_cache_used_size"]
            <= MIB + len(PAYLOAD) + METADATA_BYTES + ENTRY_OVERHEAD_BYTES
        )
        assert (
            metrics["magnetar_ml_cache_evicted_bytes_total"]
            >= TOPICS * MESSAGES * len(PAYLOAD) - MIB
        )
        for topic in topics:
            consumer = client.subscribe(topic, "late")
            got = [consumer.receive(30_000) for _ in range(MESSAGES)]
            assert [m.data() for m in got] == [PAYLOAD + str(i).encode() for i in range(MESSAGES)]
            consumer.acknowledge_cumulative(got[-1])
            consumer.close()
    finally:
        client.close()


def test_an_idle_topics_cache_empties_and_its_messages_are_still_read(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """Entries nobody reads leave the cache by age (Pulsar's
    ``managedLedgerCacheEvictionTimeThresholdMillis``, 1 s), not only when the budget
    wants room: an idle topic's cache used to hold them for good."""
    node = standalone_factory()
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        topic = "persistent://public/default/cache-idle"
        client.subscribe(topic, "late").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send_async(PAYLOAD + str(i).encode(), None)
        producer.flush()
        producer.close()
        wait_until(
            lambda: cache_metrics(node)["pulsar_ml_cache_used_size"] == 0,
            timeout_s=30,
            what="the idle topic's cache emptied",
        )
        consumer = client.subscribe(topic, "late")
        got = [consumer.receive(30_000) for _ in range(MESSAGES)]
        assert [m.data() for m in got] == [PAYLOAD + str(i).encode() for i in range(MESSAGES)]
        consumer.close()
    finally:
        client.close()
