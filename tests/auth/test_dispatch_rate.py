"""Dispatch rate limits end to end: a real standalone and the official wheel. Pulsar's
``subscriptionDispatchRate`` (each subscription) and ``dispatchRate`` (a topic's
subscriptions together), on a topic or its namespace, over Pulsar's REST: a throttled
subscription receives every message, in order, at the configured rate (checked over the run
after the first second's burst, bounded and tolerant), and counts the throttling in its
stats; other topics are not throttled."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pulsar

from magnetar.testing import StandaloneProcess

from .conftest import http

RATE = 40
RELATIVE_WAIT_S = 60
COUNT = 3 * RATE  # one second of burst, then two seconds at the rate


def _publish(client: pulsar.Client, topic: str) -> list[bytes]:
    producer = client.create_producer(topic, batching_enabled=False)
    payloads = [f"m-{i}".encode() for i in range(COUNT)]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    producer.close()
    return payloads


def _receive_all(client: pulsar.Client, topic: str, subscription: str) -> tuple[list[bytes], float]:
    """Every message of ``topic`` from the start, and the rate (msg/s) at which those after
    the first second's burst arrived."""
    consumer = client.subscribe(
        topic, subscription, initial_position=pulsar.InitialPosition.Earliest
    )
    got, arrivals = [], []
    for _ in range(COUNT):
        message = consumer.receive(20_000)
        consumer.acknowledge(message)
        got.append(message.data())
        arrivals.append(time.monotonic())
    consumer.close()
    after_burst = arrivals[RATE:]
    return got, (len(after_burst) - 1) / max(after_burst[-1] - after_burst[0], 1e-3)


def test_dispatch_rates_throttle_without_losing_messages(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    base, ns = f"{node.http_url}/admin/v2", "public/default"
    tag = uuid.uuid4().hex[:8]
    by_sub, by_topic, free = f"by-sub-{tag}", f"by-topic-{tag}", f"free-{tag}"
    rate = {"dispatchThrottlingRateInMsg": RATE, "dispatchThrottlingRateInByte": -1}
    stored = {**rate, "ratePeriodInSecond": 1, "relativeToPublishRate": False}
    path = f"{base}/persistent/{ns}/{by_sub}/subscriptionDispatchRate"
    assert http("POST", path, body=rate)[0] == 204
    assert http("GET", path) == (200, stored)
    assert http("POST", f"{base}/persistent/{ns}/{by_topic}/dispatchRate", body=rate)[0] == 204
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        for topic in (by_sub, by_topic, free):
            sent = _publish(client, f"persistent://{ns}/{topic}")
        got, measured = _receive_all(client, f"persistent://{ns}/{by_sub}", "s")
        assert got == sent
        # the rate holds: never above it by more than 10% (below it only when the machine
        # is slow, so the lower bound is loose)
        assert RATE * 0.5 <= measured <= RATE * 1.1, measured
        stats = http("GET", f"{base}/persistent/{ns}/{by_sub}/stats")[1]
        assert stats["subscriptions"]["s"]["dispatchThrottledMsgEventsBySubscriptionLimit"] > 0
        assert stats["subscriptions"]["s"]["msgOutCounter"] == COUNT

        got, measured = _receive_all(client, f"persistent://{ns}/{by_topic}", "s")
        assert got == sent and measured <= RATE * 1.1, measured
        stats = http("GET", f"{base}/persistent/{ns}/{by_topic}/stats")[1]
        assert stats["subscriptions"]["s"]["dispatchThrottledMsgEventsByTopicLimit"] > 0

        got, _ = _receive_all(client, f"persistent://{ns}/{free}", "s")
        assert got == sent
        sub = http("GET", f"{base}/persistent/{ns}/{free}/stats")[1]["subscriptions"]["s"]
        assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] == 0
        assert sub["dispatchThrottledMsgEventsByTopicLimit"] == 0

        # the namespace's subscription rate applies to topics without their own; removing
        # it lifts the limit on live topics
        ns_path = f"{base}/namespaces/{ns}/subscriptionDispatchRate"
        assert http("POST", ns_path, body=rate)[0] == 204
        assert http("GET", ns_path) == (200, stored)
        got, measured = _receive_all(client, f"persistent://{ns}/{free}", "by-ns")
        assert got == sent and measured <= RATE * 1.1, measured
        assert http("DELETE", ns_path)[0] == 204
        assert http("GET", ns_path)[0] == 204
    finally:
        client.close()
    bad = {"dispatchThrottlingRateInMsg": "fast"}
    status, answer = http("POST", f"{base}/namespaces/{ns}/dispatchRate", body=bad)
    assert status == 400 and "dispatchThrottlingRateInMsg must be an integer" in answer["reason"]
    assert node.proc is not None and node.proc.poll() is None


def test_batched_messages_are_dispatched_at_the_rate(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """Batches of growing size (a small one first): reads must not be sized by the first
    batch alone."""
    node = standalone_factory()
    base, ns = f"{node.http_url}/admin/v2", "public/default"
    topic = f"batched-{uuid.uuid4().hex[:8]}"
    rate = {"dispatchThrottlingRateInMsg": 100}
    assert (
        http("POST", f"{base}/persistent/{ns}/{topic}/subscriptionDispatchRate", body=rate)[0]
        == 204
    )
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            f"persistent://{ns}/{topic}",
            batching_enabled=True,
            batching_max_messages=50,
            batching_max_publish_delay_ms=1000,
        )
        sent = [f"m-{i}".encode() for i in range(400)]
        producer.send(sent[0])  # a batch of one
        for payload in sent[1:]:
            producer.send_async(payload, None)
        producer.flush()
        consumer = client.subscribe(
            f"persistent://{ns}/{topic}", "s", initial_position=pulsar.InitialPosition.Earliest
        )
        got, arrivals = [], []
        for _ in sent:
            message = consumer.receive(20_000)
            got.append(message.data())
            arrivals.append(time.monotonic())
        assert got == sent
        after_burst = arrivals[100:]  # the first second's burst
        measured = (len(after_burst) - 1) / max(after_burst[-1] - after_burst[0], 1e-3)
        # batches of 50 arrive at once: the rate is checked with one batch of slack
        assert measured <= 100 * 1.1 + 50 / 3, measured
    finally:
        client.close()


def test_a_dispatch_rate_relative_to_the_publish_rate_keeps_up_with_the_producer(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """``relativeToPublishRate``: a subscription limited to 1 msg/s on top of the topic's
    publish rate receives a burst of 200 messages as they come (at 1 msg/s absolute it
    would take minutes); the policy is stored and shown as Pulsar's JSON."""
    node = standalone_factory()
    base, ns = f"{node.http_url}/admin/v2", "public/default"
    topic = f"relative-{uuid.uuid4().hex[:8]}"
    rate = {"dispatchThrottlingRateInMsg": 1, "relativeToPublishRate": True}
    path = f"{base}/persistent/{ns}/{topic}/subscriptionDispatchRate"
    assert http("POST", path, body=rate)[0] == 204
    assert http("GET", path) == (
        200,
        {
            "dispatchThrottlingRateInMsg": 1,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
            "relativeToPublishRate": True,
        },
    )
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        full = f"persistent://{ns}/{topic}"
        consumer = client.subscribe(full, "s")
        producer = client.create_producer(full, batching_enabled=False)
        sent = [f"r-{i}".encode() for i in range(200)]
        for payload in sent:
            producer.send_async(payload, None)
        producer.flush()
        # all of them within one bounded wait (at 1 msg/s absolute: over three minutes)
        deadline_s = time.monotonic() + RELATIVE_WAIT_S
        got = []
        for _ in sent:
            left_ms = int((deadline_s - time.monotonic()) * 1000)
            assert left_ms > 0, f"{len(got)} of {len(sent)} within {RELATIVE_WAIT_S} s"
            message = consumer.receive(left_ms)
            consumer.acknowledge(message)
            got.append(message.data())
        assert got == sent
    finally:
        client.close()
    assert node.proc is not None and node.proc.poll() is None
