"""``admin namespaces split-bundle``: the controller releases the bundle, splits it in two
halves of its hash range and assigns both; the official client's producers and consumers
on topics of either half keep working, and the namespace's policies report the
controller's bundles. Real processes through ``magnetar.local_cluster.LocalCluster``."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.controller import NamespaceBundles
from magnetar.broker.controller.bundles import BundleRange
from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until

pytestmark = pytest.mark.timeout(240)

SPLIT = "0x00000000_0x40000000"


def admin(admin_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", admin_url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    assert isinstance(body, dict)
    return body


def put_status(url: str) -> int:
    request = urllib.request.Request(url, data=b"", method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def topic_in(bundle: BundleRange, prefix: str) -> str:
    """A topic of ``public/default`` whose hash falls in ``bundle``."""
    edges = tuple(sorted({0, bundle.lower, bundle.upper, 0xFFFFFFFF}))
    ns = NamespaceBundles("public/default", edges)
    for i in range(100_000):
        topic = f"persistent://public/default/{prefix}-{i}"
        if ns.bundle_for_topic(topic).range == bundle:
            return topic
    raise AssertionError(f"no topic in {bundle}")


def test_a_split_bundle_has_both_halves_owned_and_clients_keep_working(tmp_path: Path) -> None:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=2, bookies=2, zookeeper_port=0, broker_port=0,
            http_port=0, bookie_port=0, session_timeout_s=2.0,
        )
    )  # fmt: skip
    client: pulsar.Client | None = None
    try:
        cluster.start()
        url = cluster.admin_url
        low, high = BundleRange.parse(SPLIT).split()
        topics = [topic_in(low, "split"), topic_in(high, "split")]
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30)
        consumers = [client.subscribe(t, "s") for t in topics]
        producers = [client.create_producer(t, send_timeout_millis=30_000) for t in topics]
        for p in producers:
            p.send(b"before")

        done = admin(url, "namespaces", "split-bundle", "public/default", "-b", SPLIT)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"Bundle public/default/{SPLIT} split"
        want = ["0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
        wait_until(
            lambda: get_json(f"{url}/admin/v2/namespaces/public/default/bundles")["boundaries"]
            == want,
            timeout_s=30, what="five bundles",
        )  # fmt: skip
        # The namespace's policies report the controller's bundles too.
        policies = get_json(f"{url}/admin/v2/namespaces/public/default")
        assert policies["bundles"] == {"boundaries": want, "numBundles": 5}

        # Both halves are owned by live brokers, and the clients follow by themselves.
        brokers = {cluster.broker_service_url(i) for i in range(2)}
        for topic in topics:
            local = topic.removeprefix("persistent://")
            owner = get_json(f"{url}/lookup/v2/topic/persistent/{local}")["brokerUrl"]
            assert owner in brokers
        for p in producers:
            p.send(b"after")
        for c in consumers:
            got = [c.receive(timeout_millis=30_000).data() for _ in range(2)]
            assert got == [b"before", b"after"]

        # Errors are one line, not a traceback: an unknown bundle, an unknown algorithm.
        gone = admin(url, "namespaces", "split-bundle", "public/default", "-b", SPLIT)
        assert gone.returncode != 0 and "not found" in gone.stderr, gone.stderr
        assert "Traceback" not in gone.stderr
        ns_url = f"{url}/admin/v2/namespaces/public/default"
        assert put_status(f"{ns_url}/0x20000000_0x40000000/split?splitAlgorithmName=x") == 412
        # A broker that is not the controller answers 307 to it (urllib does not follow
        # a PUT); the controller splits a bundle once no move of it is under way.
        leader = str(get_json(f"{url}/admin/v2/brokers/leaderBroker")["serviceUrl"])
        followers = [u for u in (cluster.broker_admin_url(i) for i in range(2)) if u != leader]
        split_url = "/admin/v2/namespaces/public/default/0x20000000_0x40000000/split?unload=true"
        assert put_status(followers[0] + split_url) == 307
        status = wait_until(
            lambda: s if (s := put_status(leader + split_url)) != 409 else None,
            timeout_s=30, what="the split of an owned half",
        )  # fmt: skip
        assert status == 204
        assert cluster.exited() == []
    finally:
        if client is not None:
            client.close()
        cluster.stop()
