"""Memory of dispatching a backlog of large messages, against a real ``magnetar standalone``
and the official wheel: a consumer that attaches to 96 MB of 4 MB messages read back from the
bookie gets them all, in order, while the broker reads about ``dispatcherMaxReadSizeBytes``
(5 MiB) per round. Without a bound in bytes a round read 100 entries and the catch-up read
fetched 100 more ahead, so the whole backlog was in the broker's memory at once."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Callable

import pulsar
from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing import StandaloneProcess, wait_until

from .process import MIB, pid_of, produce_and_consume, rss_bytes

MESSAGES = 24
SIZE_BYTES = 4 * 1000 * 1000
PEAK_GROWTH_MAX_BYTES = 48 * MIB
"""What attaching the consumer may add to the broker's resident memory at its peak: a few
rounds of 5 MiB, the socket's and the allocator's share. The backlog is 96 MB."""


def _cache_bytes(node: StandaloneProcess) -> float:
    with urllib.request.urlopen(f"{node.http_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "pulsar_ml_cache_used_size":
                return sample.value
    raise AssertionError("no pulsar_ml_cache_used_size")


def _peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def test_a_backlog_of_large_messages_is_read_a_few_megabytes_at_a_time(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory("--no-functions-worker")
    produce_and_consume(node.url)  # lazy imports and first-topic structures in place
    pid = pid_of(node)
    topic = f"persistent://public/default/large-backlog-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(node.url, operation_timeout_seconds=60)
    try:
        client.subscribe(topic, "s").close()  # the subscription keeps the backlog
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(f"{i:04d}".encode().ljust(SIZE_BYTES, b"x"))
        producer.close()
        # the tailing cache lets go of entries after a second or two: reads go to the bookie
        wait_until(lambda: _cache_bytes(node) == 0, timeout_s=30, what="the cache to empty")
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")  # VmHWM starts again from the current RSS
        before = rss_bytes(pid)
        consumer = client.subscribe(topic, "s", receiver_queue_size=1000)
        got = [consumer.receive(60_000).data() for _ in range(MESSAGES)]
        growth = _peak_rss_bytes(pid) - before
        assert [d[:4] for d in got] == [f"{i:04d}".encode() for i in range(MESSAGES)]
        assert all(len(d) == SIZE_BYTES for d in got)
        assert growth <= PEAK_GROWTH_MAX_BYTES, f"peak RSS grew by {growth / MIB:.0f} MiB"
        consumer.close()
    finally:
        client.close()
