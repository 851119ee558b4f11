"""Publish rate limits end to end: a real standalone and the official wheel. A topic over its
rate is throttled (its publisher's connection is not read for a while) and counts it in
``publishRateLimitedTimes``; nothing is refused or lost; other topics are not throttled;
the policy is Pulsar's REST (namespace ``publishRate``, topic ``publishRate``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pulsar

from magnetar.testing import StandaloneProcess

from .conftest import http

COUNT = 60


def _produce_and_receive(client: pulsar.Client, topic: str) -> list[bytes]:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(COUNT):
        producer.send_async(f"m-{i}".encode(), None)
    producer.flush()
    got = [consumer.receive(10_000).data() for _ in range(COUNT)]
    producer.close()
    consumer.close()
    return got


def test_topics_over_their_rate_are_throttled_not_refused(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    base, ns = f"{node.http_url}/admin/v2", "public/default"
    tag = uuid.uuid4().hex[:8]
    limited, by_namespace, free = f"limited-{tag}", f"by-ns-{tag}", f"free-{tag}"
    rate = {"publishThrottlingRateInMsg": 20, "publishThrottlingRateInByte": -1}
    assert http("POST", f"{base}/persistent/{ns}/{limited}/publishRate", body=rate)[0] == 204
    assert http("GET", f"{base}/persistent/{ns}/{limited}/publishRate") == (200, rate)
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        expected = [f"m-{i}".encode() for i in range(COUNT)]
        assert _produce_and_receive(client, f"persistent://{ns}/{limited}") == expected
        assert _produce_and_receive(client, f"persistent://{ns}/{free}") == expected
        stats = {t: http("GET", f"{base}/persistent/{ns}/{t}/stats")[1] for t in (limited, free)}
        assert stats[limited]["publishRateLimitedTimes"] > 0
        assert stats[limited]["msgInCounter"] == COUNT
        assert stats[free]["publishRateLimitedTimes"] == 0
        # the namespace's rate applies to topics without their own
        assert http("POST", f"{base}/namespaces/{ns}/publishRate", body=rate)[0] == 204
        assert http("GET", f"{base}/namespaces/{ns}/publishRate") == (200, rate)
        assert _produce_and_receive(client, f"persistent://{ns}/{by_namespace}") == expected
        status, by_ns_stats = http("GET", f"{base}/persistent/{ns}/{by_namespace}/stats")
        assert status == 200 and by_ns_stats["publishRateLimitedTimes"] > 0
        assert http("DELETE", f"{base}/namespaces/{ns}/publishRate")[0] == 204
        assert http("GET", f"{base}/namespaces/{ns}/publishRate")[0] == 204
    finally:
        client.close()
    bad = {"publishThrottlingRateInMsg": "fast"}
    status, answer = http("POST", f"{base}/namespaces/{ns}/publishRate", body=bad)
    assert status == 400 and "publishThrottlingRateInMsg must be an integer" in answer["reason"]
