"""The chart's commands start a working cluster: the Pods of the rendered manifests run as
local processes (tests/deploy/kubelet.py: Services' names mapped to loopback addresses,
volumes to directories), each waited for through its readiness probe's own endpoint; the
post-install Job initialises the cluster; the ``helm test`` Pod produces and consumes
through the proxy; the official Pulsar client does the same, and the admin API answers
through the proxy."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from tests.deploy.chart import NAMESPACE, render, values_file
from tests.deploy.kubelet import LocalKubelet
from tests.deploy.round_trip import produce_and_consume

READY_TIMEOUT_S = 180.0
TEST_POD_TIMEOUT_S = 90.0
MESSAGES = 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalKubelet]:
    kubelet = LocalKubelet(render(values_file("e2e")), tmp_path, namespace=NAMESPACE)
    try:
        kubelet.install(ready_timeout_s=READY_TIMEOUT_S)
        yield kubelet
    finally:
        kubelet.stop()


def test_the_chart_starts_a_cluster_that_serves_clients_through_the_proxy(
    cluster: LocalKubelet,
) -> None:
    assert cluster.run_tests(timeout_s=TEST_POD_TIMEOUT_S) == {"mg-magnetar-test": 0}

    host, ports = cluster.service_address("mg-magnetar-proxy")
    client = pulsar.Client(f"pulsar://{host}:{ports['pulsar']}", operation_timeout_seconds=30)
    try:
        sent = [f"message-{i}".encode() for i in range(MESSAGES)]
        produce_and_consume(client, "persistent://public/default/through-the-proxy", sent)
    finally:
        client.close()

    with urllib.request.urlopen(
        f"http://{host}:{ports['http']}/admin/v2/clusters", timeout=30
    ) as answer:
        assert "magnetar" in json.load(answer)
