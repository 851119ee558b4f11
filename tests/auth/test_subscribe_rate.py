"""Subscribe rate (Pulsar's ``subscribeRate``) end to end: a real standalone and the
official wheel. SUBSCRIBEs from one address beyond the rate are held back, not refused:
every subscribe succeeds, the throttling is counted in topic stats
``subscribeRateLimitedTimes``; other topics are not throttled."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pulsar

from magnetar.testing import StandaloneProcess

from .conftest import http


def test_subscribes_over_the_rate_wait_and_succeed(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    base, ns = f"{node.http_url}/admin/v2", "public/default"
    tag = uuid.uuid4().hex[:8]
    limited, free = f"sub-limited-{tag}", f"sub-free-{tag}"
    rate = {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 1}
    path = f"{base}/persistent/{ns}/{limited}/subscribeRate"
    assert http("POST", path, body=rate)[0] == 204
    assert http("GET", path) == (200, rate)
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        elapsed_s = {}
        for topic in (limited, free):
            started_s = time.monotonic()
            for i in range(5):  # a burst of 2, then one every half second: 1.5 s at least
                client.subscribe(f"persistent://{ns}/{topic}", f"s{i}").close()
            elapsed_s[topic] = time.monotonic() - started_s
        # the rate held (a lower bound only: a slow machine takes longer, never shorter)
        assert elapsed_s[limited] >= 1.0, elapsed_s
        stats = {t: http("GET", f"{base}/persistent/{ns}/{t}/stats")[1] for t in (limited, free)}
        assert stats[limited]["subscribeRateLimitedTimes"] >= 1
        assert stats[free]["subscribeRateLimitedTimes"] == 0
        # the namespace's rate applies to topics without their own
        ns_path = f"{base}/namespaces/{ns}/subscribeRate"
        assert http("POST", ns_path, body={"subscribeThrottlingRatePerConsumer": 1})[0] == 204
        assert http("GET", ns_path) == (
            200,
            {"subscribeThrottlingRatePerConsumer": 1, "ratePeriodInSecond": 30},
        )
        assert http("POST", ns_path, body=rate)[0] == 204
        for i in range(4):
            client.subscribe(f"persistent://{ns}/{free}", f"n{i}").close()
        stats_free = http("GET", f"{base}/persistent/{ns}/{free}/stats")[1]
        assert stats_free["subscribeRateLimitedTimes"] >= 1
        assert http("DELETE", ns_path)[0] == 204
    finally:
        client.close()
    assert node.proc is not None and node.proc.poll() is None
