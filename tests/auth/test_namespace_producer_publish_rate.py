"""Publish rates beyond one topic's: ``namespacePublishRate`` (one budget shared by every
topic of a namespace on the broker, as Pulsar's resource groups) and
``publishRatePerProducer`` (a budget per producer). A real standalone and the official
wheel; throttling pauses reads (nothing refused or lost) and counts in the topic's
``publishRateLimitedTimes``."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pulsar

from magnetar.broker.rate_limit import BURST_MS
from magnetar.testing import StandaloneProcess, wait_until

from .conftest import http

RATE = 500
"""Messages per second of the rates below."""
BURST = RATE * BURST_MS // 1000
"""What a full bucket takes at once (50)."""
PER_TOPIC = 40
"""Fewer than BURST: one topic (or producer) alone never waits for its budget."""


def _rate(msgs_per_s: int) -> dict[str, int]:
    return {"publishThrottlingRateInMsg": msgs_per_s, "publishThrottlingRateInByte": -1}


def _send_all(client: pulsar.Client, topics: list[str]) -> None:
    """One producer per entry of ``topics`` (several may share a topic) sends PER_TOPIC messages, interleaved;
    then every message is read back."""
    consumers = {t: client.subscribe(t, "s") for t in dict.fromkeys(topics)}
    producers = [client.create_producer(t, batching_enabled=False) for t in topics]
    for i in range(PER_TOPIC):
        for p in producers:
            p.send_async(f"m-{i}".encode(), None)
    for p in producers:
        p.flush()
    for topic, consumer in consumers.items():
        wanted = PER_TOPIC * topics.count(topic)
        got = sorted(consumer.receive(30_000).data() for _ in range(wanted))
        assert len(got) == wanted
    for p in producers:
        p.close()
    for c in consumers.values():
        c.close()


def _limited_times(base: str, topic: str) -> int:
    status, stats = http("GET", f"{base}/persistent/{topic}/stats")
    assert status == 200
    assert isinstance(stats["publishRateLimitedTimes"], int)
    return int(stats["publishRateLimitedTimes"])


def test_namespace_publish_rate_is_one_budget_for_all_its_topics(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    base, tag = f"{node.http_url}/admin/v2", uuid.uuid4().hex[:8]
    ns = f"public/shared-{tag}"
    assert http("PUT", f"{base}/namespaces/{ns}")[0] == 204
    path = f"{base}/namespaces/{ns}/namespacePublishRate"
    assert http("GET", path)[0] == 204
    assert http("POST", path, body=_rate(RATE))[0] == 204
    assert http("GET", path) == (200, _rate(RATE))
    topics = [f"{ns}/a", f"{ns}/b"]
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        # 2 x 40 messages at once against one budget of 50: throttled, though each topic
        # alone stays under it
        _send_all(client, [f"persistent://{t}" for t in topics])
        assert sum(_limited_times(base, t) for t in topics) > 0
        # no topic-level form: it is a namespace budget
        assert http("POST", f"{base}/persistent/{ns}/a/namespacePublishRate", body=_rate(1))[0] in (
            404,
            405,
        )
        assert http("DELETE", path)[0] == 204
        assert http("GET", path)[0] == 204
    finally:
        client.close()
    assert node.proc is not None and node.proc.poll() is None


def test_publish_rate_per_producer_is_each_producers_own_budget(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    base, tag = f"{node.http_url}/admin/v2", uuid.uuid4().hex[:8]
    ns = f"public/per-producer-{tag}"
    assert http("PUT", f"{base}/namespaces/{ns}")[0] == 204
    path = f"{base}/namespaces/{ns}/publishRatePerProducer"
    assert http("POST", path, body=_rate(RATE))[0] == 204
    assert http("GET", path) == (200, _rate(RATE))
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        # three producers on one topic, 40 messages each (120 on the topic): each stays
        # under its own budget of 50, so nothing waits
        shared = f"persistent://{ns}/three-producers"
        _send_all(client, [shared, shared, shared])
        assert _limited_times(base, f"{ns}/three-producers") == 0
        # one producer with a budget of 10 is throttled; a topic policy wins over the
        # namespace's
        own = f"{ns}/slow"
        assert (
            http("POST", f"{base}/persistent/{own}/publishRatePerProducer", body=_rate(10))[0]
            == 204
        )
        assert http("GET", f"{base}/persistent/{own}/publishRatePerProducer") == (200, _rate(10))
        _send_all(client, [f"persistent://{own}"])
        assert _limited_times(base, own) > 0
    finally:
        client.close()
    assert node.proc is not None and node.proc.poll() is None


def test_publish_rate_per_producer_set_while_a_producer_is_connected_applies_to_it(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """The policy reaches producers already attached (the topic configures their limiters
    on every change; a SEND looks at no limiter while no publish rate is set), and removing
    it stops the throttling again."""
    node = standalone_factory()
    base, tag = f"{node.http_url}/admin/v2", uuid.uuid4().hex[:8]
    topic = f"public/default/live-{tag}"
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(f"persistent://{topic}", batching_enabled=False)
        consumer = client.subscribe(f"persistent://{topic}", "s")

        def send(count: int) -> None:
            for i in range(count):
                producer.send_async(f"m-{i}".encode(), None)
            producer.flush()
            for _ in range(count):
                consumer.acknowledge(consumer.receive(30_000))

        send(PER_TOPIC)
        assert _limited_times(base, topic) == 0
        path = f"{base}/persistent/{topic}/publishRatePerProducer"
        assert http("POST", path, body=_rate(10))[0] == 204
        wait_until(lambda: http("GET", path) == (200, _rate(10)), timeout_s=10)

        # The stored policy reaches the loaded topic through the store's notification, a
        # moment after the REST answer (as in Pulsar): send rounds until one is throttled.
        def round_throttled() -> bool:
            before = _limited_times(base, topic)
            send(PER_TOPIC)
            return _limited_times(base, topic) > before

        wait_until(round_throttled, timeout_s=60, what="the producer's new rate to throttle it")
        assert http("DELETE", path)[0] == 204
        wait_until(lambda: http("GET", path)[0] == 204, timeout_s=10)
        # Removed: once the removal has reached the topic, a whole round goes unthrottled.
        wait_until(lambda: not round_throttled(), timeout_s=60, what="the throttling to stop")
    finally:
        client.close()
    assert node.proc is not None and node.proc.poll() is None
