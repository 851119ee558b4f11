"""Multi-host admin URLs against a real cluster whose first broker is SIGKILLed: the admin
client and the CLI pass over the dead host, and a redirect to the dead owner is asked again
until its topic has moved, all within one call's timeout (before: every CLI command failed
once the first broker of the URL was dead)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from magnetar.admin_client import AdminClient, topic_path
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess
from tests.cluster.test_cluster_processes import (
    cluster_procs,
    owner_of,
    start_bookies,
    start_brokers,
)

__all__ = ["cluster_procs"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(240)

TIMEOUT_S = 30.0
TOPIC = "persistent://public/default/admin-failover"


def test_url_list_survives_a_killed_first_broker(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    AdminClient(brokers[1].http_url, timeout_s=TIMEOUT_S).put(topic_path(TOPIC))
    owner = owner_of(brokers[1], TOPIC, brokers)
    other = next(b for b in brokers if b is not owner)
    url = "http://" + ",".join(b.http_url.removeprefix("http://") for b in (owner, other))
    owner.kill()

    admin = AdminClient(url, timeout_s=TIMEOUT_S)
    started = time.monotonic()
    assert admin.topic_stats(TOPIC)["publishers"] == []
    assert time.monotonic() - started < TIMEOUT_S
    assert "public" in admin.get("/admin/v2/tenants")

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "admin",
            "--url",
            url,
            "topics",
            "stats",
            TOPIC,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert '"publishers"' in done.stdout
