"""A partitioned topic whose partitions two ``magnetar broker`` processes serve: the stats,
internal stats and deletion of the partitioned topic asked of either broker cover every
partition, each answered by its owner (before: only the asked broker's partitions were
counted, and deleting failed with 503)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess

from .test_cluster_processes import cluster_procs, owner_of, start_bookies, start_brokers

__all__ = ["cluster_procs"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(240)

BASE = "persistent://public/spread/parts"
PARTITIONS = 8
MESSAGES = 64


def call(method: str, url: str, body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
            return response.status, json.loads(data) if data else None
    except urllib.error.HTTPError as exc:
        with exc:
            data = exc.read()
        return exc.code, json.loads(data) if data else None


def spread_topic(brokers: list[BrokerProcess]) -> None:
    # The first broker holds public/default and public/functions (8 bundles): two more
    # namespaces even the counts, so the bundles of "spread" go to both brokers.
    for path, body in (
        ("namespaces/public/fill-1", b""),
        ("namespaces/public/fill-2", b""),
        ("namespaces/public/spread", b""),
        ("persistent/public/spread/parts/partitions", b"%d" % PARTITIONS),
    ):
        status, answer = call("PUT", f"{brokers[0].http_url}/admin/v2/{path}", body)
        assert status == 204, answer
    owners = {
        owner_of(brokers[0], f"{BASE}-partition-{i}", brokers).broker_id for i in range(PARTITIONS)
    }
    assert owners == {b.broker_id for b in brokers}, "the partitions are not spread"


def run_admin(http_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_partitioned_stats_and_delete_cover_every_owner(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    spread_topic(brokers)
    path = "/admin/v2/persistent/public/spread/parts"
    client = pulsar.Client(brokers[1].url, operation_timeout_seconds=30)
    try:
        _consumer = client.subscribe(BASE, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(BASE, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(b"%d" % i, partition_key=str(i))

        for broker in brokers:  # either broker answers for all partitions
            status, stats = call("GET", f"{broker.http_url}{path}/partitioned-stats")
            assert status == 200, stats
            assert stats["metadata"] == {"partitions": PARTITIONS}
            assert sorted(stats["partitions"]) == sorted(
                f"{BASE}-partition-{i}" for i in range(PARTITIONS)
            )
            assert stats["msgInCounter"] == MESSAGES
            assert len(stats["publishers"]) == PARTITIONS
            assert len(stats["subscriptions"]["sub"]["consumers"]) == PARTITIONS
            status, internal = call("GET", f"{broker.http_url}{path}/partitioned-internalStats")
            assert status == 200, internal
            assert len(internal["partitions"]) == PARTITIONS
            assert sum(p["numberOfEntries"] for p in internal["partitions"].values()) == MESSAGES
        # the same through the CLI
        done = run_admin(brokers[0].http_url, "topics", "partitioned-stats", BASE)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["msgInCounter"] == MESSAGES

        # clients on partitions of both brokers: refused without force, nothing deleted
        status, answer = call("DELETE", f"{brokers[0].http_url}{path}/partitions")
        assert status == 412, answer
        status, stats = call("GET", f"{brokers[0].http_url}{path}/partitioned-stats")
        assert status == 200 and len(stats["partitions"]) == PARTITIONS
    finally:
        client.close()

    # no clients left: deleted on both brokers (before: 503)
    def deleted() -> bool:
        status, answer = call("DELETE", f"{brokers[1].http_url}{path}/partitions")
        assert status in (204, 412), answer  # 412 until the closed clients are gone
        return status == 204

    wait_until(deleted, timeout_s=30, what="the partitioned topic deleted")
    status, _ = call("GET", f"{brokers[0].http_url}{path}/partitioned-stats")
    assert status == 404
    for broker in brokers:
        status, topics = call("GET", f"{broker.http_url}/admin/v2/persistent/public/spread")
        assert (status, topics) == (200, [])
    # created again with the same name: empty, every partition served
    status, answer = call("PUT", f"{brokers[1].http_url}{path}/partitions", b"%d" % PARTITIONS)
    assert status == 204, answer
    status, stats = call("GET", f"{brokers[1].http_url}{path}/partitioned-stats")
    assert status == 200 and stats["msgInCounter"] == 0


def test_force_deletes_a_partitioned_topic_with_clients_on_both_brokers(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    spread_topic(brokers)
    client = pulsar.Client(brokers[0].url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(BASE, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(b"%d" % i, partition_key=str(i))
        done = run_admin(brokers[0].http_url, "topics", "delete-partitioned-topic", "-f", BASE)
        assert done.returncode == 0, done.stderr
        path = "/admin/v2/persistent/public/spread/parts"
        for broker in brokers:
            status, answer = call("GET", f"{broker.http_url}{path}/partitions")
            assert (status, answer) == (200, {"partitions": 0})
        # (the producer, told to go, comes back to its partition names, which auto-creation
        # then makes non-partitioned topics: as with one broker, not looked at here)
    finally:
        client.close()
