"""A controller broker stopped with SIGSTOP past its session timeout and resumed: another
broker becomes controller at a higher epoch and serves every bundle; once resumed, the old
one changes nothing under ``/controller_state`` (every record is as the new controller left
it, or written at the new epoch), and the official client ends up on the live broker.
Real ``magnetar broker`` processes through ``magnetar.local_cluster.LocalCluster``."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest
from kazoo.client import KazooClient

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until
from tests.cluster.bundle_topics import topic_per_bundle

pytestmark = pytest.mark.timeout(240)

STATE = "/controller_state/bundles"


def leader(admin_url: str) -> tuple[str, int] | None:
    """(HTTP service URL, epoch) of the controller as ``admin_url`` sees it; ``None`` while
    none is elected (503) or the broker asked does not answer."""
    try:
        with urllib.request.urlopen(f"{admin_url}/admin/v2/brokers/leaderBroker", timeout=5) as r:
            body = json.load(r)
    except (urllib.error.URLError, TimeoutError):
        return None
    return str(body["serviceUrl"]), int(body["controllerEpoch"])


def owner(admin_url: str, topic: str) -> str:
    local = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{admin_url}/lookup/v2/topic/persistent/{local}", timeout=30) as r:
        return str(json.load(r)["brokerUrl"])


def bundle_records(zk: KazooClient) -> dict[str, tuple[dict[str, object], int]]:
    """Every bundle record: its JSON and its node version."""
    records = {}
    for name in zk.get_children(STATE):
        data, stat = zk.get(f"{STATE}/{name}")
        records[name] = (json.loads(data), stat.version)
    return records


def test_a_stalled_controller_changes_nothing_after_resuming(tmp_path: Path) -> None:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=2, bookies=2, zookeeper_port=0, broker_port=0,
            http_port=0, bookie_port=0, session_timeout_s=2.0,
        )
    )  # fmt: skip
    client: pulsar.Client | None = None
    zk: KazooClient | None = None
    try:
        cluster.start()
        urls = [cluster.broker_service_url(i) for i in range(2)]
        admins = [cluster.broker_admin_url(i) for i in range(2)]
        old_url, old_epoch = wait_until(lambda: leader(admins[0]), timeout_s=30, what="a leader")
        old = admins.index(old_url)
        live = 1 - old
        topics = topic_per_bundle("stall-ctl")
        # Both brokers hold bundles before the stall (count rebalancing evens them out).
        wait_until(
            lambda: len({owner(admins[live], t) for t in topics}) == 2, timeout_s=60,
            what="bundles on both brokers",
        )  # fmt: skip
        client = pulsar.Client(urls[live], operation_timeout_seconds=30)
        consumers = {t: client.subscribe(t, "s") for t in topics}
        producers = {t: client.create_producer(t, send_timeout_millis=30_000) for t in topics}
        for t, p in producers.items():
            p.send(f"before {t}".encode())

        cluster.brokers[old].signal(signal.SIGSTOP)

        def new_leader() -> int | None:
            got = leader(admins[live])
            return got[1] if got is not None and got[0] == admins[live] else None

        new_epoch = wait_until(new_leader, timeout_s=60, what="a new controller")
        assert new_epoch > old_epoch
        wait_until(
            lambda: all(owner(admins[live], t) == urls[live] for t in topics), timeout_s=60,
            what="every bundle on the live broker",
        )  # fmt: skip
        live_id = admins[live].removeprefix("http://")
        zk = KazooClient(hosts=cluster.metadata_url.removeprefix("zk://"))
        zk.start(timeout=30)

        def all_owned_by_live() -> dict[str, tuple[dict[str, object], int]] | None:
            records = bundle_records(zk)  # type: ignore[arg-type]
            owned = all(
                (r["state"], r["broker"]) == ("Owned", live_id) for r, _ in records.values()
            )
            return records if owned else None

        before = wait_until(
            all_owned_by_live, timeout_s=60, what="every bundle record Owned by the live broker"
        )
        epoch_before = zk.get("/controller_epoch")[1].version

        cluster.brokers[old].signal(signal.SIGCONT)
        proc = cluster.brokers[old].proc
        assert proc is not None and proc.wait(60) == 1  # its session is lost: it stops

        after = bundle_records(zk)
        assert set(after) == set(before)
        for name, (record, version) in after.items():
            if (record, version) != before[name]:
                assert record["epoch"] == new_epoch, (name, before[name], record)
        assert zk.get("/controller_epoch")[1].version == epoch_before
        assert leader(admins[live]) == (admins[live], new_epoch)

        for t, p in producers.items():
            p.send(f"after {t}".encode())
            assert owner(admins[live], t) == urls[live]
        for t, c in consumers.items():
            got = []
            while f"after {t}" not in got:
                msg = c.receive(timeout_millis=30_000)
                got.append(msg.data().decode())
                c.acknowledge(msg)
            assert got[0] == f"before {t}"
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        if client is not None:
            client.close()
        cluster.stop()
