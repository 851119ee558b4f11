"""The broker-wide bound of bytes of publishes in flight (Pulsar's
``maxMessagePublishBufferSizeInMB``, ``--max-message-publish-buffer-size-mb``) with the
official wheel against a real standalone: producers on several connections that together
send far more than the bound are stopped and read again, the bytes in flight stay near the
bound, and every message arrives, in order, once."""

from __future__ import annotations

import threading
import urllib.request
import uuid
from collections.abc import Callable

import pulsar
from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing import StandaloneProcess, wait_until

BOUND_MB = 1
PRODUCERS = 3
MESSAGES = 60
SIZE_BYTES = 100_000  # a 100 KB message: 60 of them are 6 MB per producer
READ_BYTES_MAX = 512 * 1024
"""What one connection can hand over past the bound: the read that crossed it (uvloop
reads up to 256 KiB at a time) plus the frame it completed."""


def _metrics(node: StandaloneProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"{node.http_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = sample.value
    return out


def test_publishers_past_the_bound_are_paused_and_resumed_and_nothing_is_lost(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory(
        "--max-message-publish-buffer-size-mb", str(BOUND_MB), "--no-functions-worker"
    )
    tag = uuid.uuid4().hex[:8]
    topics = [f"persistent://public/default/buffer-{tag}-{i}" for i in range(PRODUCERS)]
    clients = [pulsar.Client(node.url, operation_timeout_seconds=60) for _ in topics]
    held_seen: list[float] = []
    throttled_seen: list[float] = []
    stop = threading.Event()

    def sample() -> None:  # what the broker holds while the producers push
        while not stop.is_set():
            m = _metrics(node)
            held_seen.append(m["magnetar_publish_buffer_used_bytes"])
            throttled_seen.append(m["pulsar_broker_throttled_connections_global_limit"])
            stop.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        consumers = [c.subscribe(t, "s") for c, t in zip(clients, topics, strict=True)]
        producers = [
            c.create_producer(t, batching_enabled=False, max_pending_messages=MESSAGES)
            for c, t in zip(clients, topics, strict=True)
        ]  # one connection each
        sampler.start()
        failures: list[object] = []

        def sent(result: pulsar.Result, _msg_id: object) -> None:
            if result != pulsar.Result.Ok:
                failures.append(result)

        for i in range(MESSAGES):
            for p, producer in enumerate(producers):
                payload = f"{p}-{i}-".encode().ljust(SIZE_BYTES, b"x")
                producer.send_async(payload, sent)
        for producer in producers:
            producer.flush()
        assert failures == []
        for p, consumer in enumerate(consumers):
            got = [consumer.receive(30_000).data() for _ in range(MESSAGES)]
            assert [d[: d.index(b"-", d.index(b"-") + 1)] for d in got] == [
                f"{p}-{i}".encode() for i in range(MESSAGES)
            ]
            assert all(len(d) == SIZE_BYTES for d in got)
        stop.set()
        sampler.join(30)
        after = wait_until(
            lambda: (m := _metrics(node))["magnetar_publish_buffer_used_bytes"] == 0 and m,
            what="the publish buffer to empty",
        )
        # the bound was reached, and every stopped connection reads again
        assert after["magnetar_publish_buffer_full_total"] >= 1
        assert after["pulsar_broker_throttled_connections_global_limit"] == 0
        assert held_seen, "the sampler saw nothing"
        bound = BOUND_MB * 1024 * 1024
        assert max(held_seen) <= bound + PRODUCERS * READ_BYTES_MAX, max(held_seen)
        for producer in producers:
            producer.close()
        for consumer in consumers:
            consumer.close()
    finally:
        stop.set()
        for c in clients:
            c.close()
