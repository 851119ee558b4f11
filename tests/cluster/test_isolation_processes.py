"""Namespace isolation policies on a real cluster: ZooKeeper, a bookie and three ``magnetar
broker`` processes; the policy is set with ``magnetar admin ns-isolation-policy``.

A policy pins ``acme/pinned`` to broker 0 (primary) with broker 1 as secondary
(``min_limit=1``): every bundle of it is owned by broker 0; SIGKILL broker 0 and broker 1
takes them over (the acknowledged messages are still there); broker 2, in neither list,
never owns one. ``acme/free`` (no policy) is served only by brokers no policy names as
primary.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until
from tests.cluster.bundle_topics import topic_per_bundle

pytestmark = pytest.mark.timeout(300)

PINNED = "acme/pinned"


def _owner(admin_url: str, topic: str) -> str | None:
    """The binary URL of ``topic``'s owner by an HTTP lookup, or None while there is none."""
    local = topic.removeprefix("persistent://")
    try:
        with urllib.request.urlopen(
            f"{admin_url}/lookup/v2/topic/persistent/{local}", timeout=30
        ) as response:
            return str(json.load(response)["brokerUrl"]).rstrip("/")
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return None


def _rest(method: str, url: str, body: object) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def _admin(admin_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", admin_url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_pinned_namespace_stays_on_its_primary_then_fails_over_to_the_secondary(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=3, bookies=1, ensemble_size=1, write_quorum=1,
            ack_quorum=1, zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=2.0, log_level="WARNING",
        )
    )  # fmt: skip
    client: pulsar.Client | None = None
    try:
        cluster.start()
        urls = [cluster.broker_service_url(i).rstrip("/") for i in range(3)]
        ids = [cluster.broker_admin_url(i).split("://", 1)[1] for i in range(3)]
        admin = cluster.broker_admin_url(2)
        done = _admin(admin, "--output", "json", "clusters", "list")
        assert done.returncode == 0, done.stderr
        name = json.loads(done.stdout)[0]

        done = _admin(
            admin, "ns-isolation-policy", "set", name, "pin",
            "--namespaces", PINNED, "--primary", re.escape(ids[0]),
            "--secondary", re.escape(ids[1]),
            "--auto-failover-policy-params", "min_limit=1,usage_threshold=80",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        done = _admin(admin, "--output", "json", "ns-isolation-policy", "get", name, "pin")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["primary"] == [re.escape(ids[0])]
        bad = _admin(
            admin, "ns-isolation-policy", "set", name, "bad", "--namespaces", PINNED,
            "--primary", "(", "--auto-failover-policy-params", "min_limit=1,usage_threshold=80",
        )  # fmt: skip
        assert bad.returncode != 0 and "not a regular expression" in bad.stderr, bad.stderr

        assert _rest("PUT", f"{admin}/admin/v2/tenants/acme", {"allowedClusters": [name]}) == 204
        assert _rest("PUT", f"{admin}/admin/v2/namespaces/{PINNED}", {}) == 204
        pinned = topic_per_bundle("p", PINNED)
        seen: set[str] = set()

        def owners(admin_url: str, topics: list[str]) -> set[str | None]:
            got = {_owner(admin_url, t) for t in topics}
            if topics is pinned:
                seen.update(o for o in got if o is not None)
            return got

        wait_until(
            lambda: owners(admin, pinned) == {urls[0]}, timeout_s=60,
            what="every bundle of the pinned namespace on broker 0",
        )  # fmt: skip
        # a namespace without a policy (made after it was set: a policy moves nothing
        # already owned): only brokers no policy names as primary
        assert _rest("PUT", f"{admin}/admin/v2/namespaces/acme/free", {}) == 204
        shared = topic_per_bundle("s", "acme/free")
        wait_until(lambda: None not in owners(admin, shared), timeout_s=60, what="shared")
        assert {_owner(admin, t) for t in shared} <= {urls[1], urls[2]}

        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30)
        for topic in pinned:
            producer = client.create_producer(topic)
            producer.send(topic.encode())
            producer.close()

        cluster.brokers[0].kill()
        wait_until(
            lambda: owners(admin, pinned) == {urls[1]}, timeout_s=90,
            what="the secondary owns every bundle of the pinned namespace",
        )  # fmt: skip
        assert urls[2] not in seen, seen  # never broker 2, at any lookup
        for topic in pinned:  # the acknowledged messages moved with the bundles
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=30_000).data() == topic.encode()
            reader.close()
        done = _admin(admin, "ns-isolation-policy", "delete", name, "pin")
        assert done.returncode == 0, done.stderr
        done = _admin(admin, "--output", "json", "ns-isolation-policy", "list", name)
        assert done.returncode == 0 and json.loads(done.stdout) == {}, done.stdout
        assert [p for p in cluster.exited() if p is not cluster.brokers[0]] == []
    finally:
        if client is not None:
            client.close()
        cluster.stop()
