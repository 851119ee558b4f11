"""A namespace's storage quota in all (``/admin/v2/namespaces/{t}/{ns}/storageQuota``): the
sum of the backlogs of all its topics is checked, and new producers on any of its topics
are refused (``producer_exception``) or held (``producer_request_hold``) while it is over,
as the per-topic backlog quota does. A real standalone and the official wheel."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable

import pulsar
import pytest

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import http

MESSAGE = b"x" * 1000
SENT = 6
"""Three topics with 2 messages each: every topic's backlog (~2 KB) is under the quota of
5 KB, as is the sum before the last topic is written; the sum of all (~6 KB) is over it."""


def _can_create_producer(client: pulsar.Client, topic: str) -> bool:
    try:
        client.create_producer(topic).close()
    except (
        pulsar.ProducerBlockedQuotaExceededException,
        pulsar.ProducerBlockedQuotaExceededError,
    ):
        return False
    return True


@pytest.mark.parametrize(
    ("policy", "refused"),
    [
        ("producer_exception", pulsar.ProducerBlockedQuotaExceededException),
        ("producer_request_hold", pulsar.ProducerBlockedQuotaExceededError),
    ],
)
def test_producers_are_refused_while_the_namespace_is_over_its_quota(
    standalone_factory: Callable[..., StandaloneProcess], policy: str, refused: type
) -> None:
    node = standalone_factory()
    base, tag = f"{node.http_url}/admin/v2", uuid.uuid4().hex[:8]
    ns = f"public/quota-{tag}"
    assert http("PUT", f"{base}/namespaces/{ns}")[0] == 204
    path = f"{base}/namespaces/{ns}/storageQuota"
    assert http("GET", path)[0] == 204
    quota = {"limitSize": 5000, "policy": policy}
    assert http("POST", path, body=quota)[0] == 204
    assert http("GET", path) == (200, quota)
    client = pulsar.Client(node.url, operation_timeout_seconds=5)
    try:
        consumers = []
        for name in ("a", "b", "c"):
            topic = f"persistent://{ns}/{name}"
            consumers.append(client.subscribe(topic, "slow"))
            producer = client.create_producer(topic)
            for _ in range(SENT // 3):
                producer.send(MESSAGE)
            producer.close()
        with pytest.raises(refused):
            client.create_producer(f"persistent://{ns}/fresh")
        # another namespace is not affected
        client.create_producer(f"persistent://public/default/free-{tag}").close()
        # once consumed, producers are accepted again
        for consumer in consumers:
            for _ in range(SENT // 3):
                consumer.acknowledge(consumer.receive(10_000))
        wait_until(
            lambda: _can_create_producer(client, f"persistent://{ns}/fresh"),
            30.0,
            what="producers accepted once the backlog is consumed",
        )
    finally:
        client.close()
    assert http("DELETE", path)[0] == 204
    assert http("GET", path)[0] == 204
    assert node.proc is not None and node.proc.poll() is None


def test_bad_storage_quotas_are_refused(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    path = f"{node.http_url}/admin/v2/namespaces/public/default/storageQuota"
    for body, reason in (
        ({"limitSize": "big"}, "limitSize must be a number of bytes"),
        ({"limitSize": -1}, "limitSize must be a number of bytes"),
        ({"limitSize": 10, "policy": "consumer_backlog_eviction"}, "policy must be one of"),
        ([1], "must be a JSON object"),
    ):
        status, answer = http("POST", path, body=body)
        assert status == 400 and reason in answer["reason"], (body, answer)
    assert http("GET", path)[0] == 204
    missing = f"{node.http_url}/admin/v2/namespaces/public/nowhere/storageQuota"
    assert http("POST", missing, body={"limitSize": 1})[0] == 404


def test_cli_sets_shows_and_removes_the_namespace_budgets(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url,
             "--output", "json", *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    ns = "public/default"
    for command in (
        ("set-storage-quota", ns, "-l", "2M", "-p", "producer_exception"),
        ("set-namespace-publish-rate", ns, "-m", "100"),
        ("set-publish-rate-per-producer", ns, "-m", "10", "-b", "1024"),
    ):
        done = admin("namespaces", *command)
        assert done.returncode == 0, done.stderr
    got = admin("namespaces", "get-storage-quota", ns)
    assert json.loads(got.stdout) == {"limitSize": 2 << 20, "policy": "producer_exception"}
    got = admin("namespaces", "get-namespace-publish-rate", ns)
    assert json.loads(got.stdout)["publishThrottlingRateInMsg"] == 100
    got = admin("namespaces", "get-publish-rate-per-producer", ns)
    assert json.loads(got.stdout) == {
        "publishThrottlingRateInMsg": 10,
        "publishThrottlingRateInByte": 1024,
    }
    done = admin("namespaces", "set-storage-quota", ns, "-l", "lots")
    assert done.returncode == 2 and "invalid size 'lots'" in done.stderr
    assert "Traceback" not in done.stderr
    assert admin("namespaces", "remove-storage-quota", ns).returncode == 0
    assert http("GET", f"{node.http_url}/admin/v2/namespaces/{ns}/storageQuota")[0] == 204
