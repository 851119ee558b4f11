"""Expansion without rebalancing data: a broker joins a running cluster and the controller
moves bundles onto it by unloading them (count rebalancing), while official-client
producers and consumers keep running; every acknowledged message is consumed, in order.
Real processes through ``magnetar.local_cluster.LocalCluster``."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until
from tests.cluster.bundle_topics import topic_per_bundle

pytestmark = pytest.mark.timeout(300)

_OWNED = re.compile(r"^magnetar_bundles_owned (\S+)$", re.MULTILINE)


def bundles_owned(admin_url: str) -> int:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=30) as response:
        match = _OWNED.search(response.read().decode())
    return 0 if match is None else int(float(match.group(1)))


def owner_url(admin_url: str, topic: str) -> str:
    """The broker serving ``topic`` (an HTTP lookup; a 307 to the owner is followed)."""
    local = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{admin_url}/lookup/v2/topic/persistent/{local}", timeout=30) as r:
        return str(json.load(r)["brokerUrl"])


class Producers(threading.Thread):
    """Sends to every topic in turn until stopped; keeps what was acknowledged."""

    def __init__(self, producers: dict[str, pulsar.Producer]) -> None:
        super().__init__(daemon=True)
        self.producers = producers
        self.acked: dict[str, list[str]] = {t: [] for t in producers}
        self.failures = 0
        self.stopped = threading.Event()

    def total(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            for topic, producer in self.producers.items():
                value = f"m-{i}"
                try:
                    producer.send(value.encode())
                except pulsar.PulsarException:
                    self.failures += 1  # not acknowledged: may or may not be stored
                    continue
                self.acked[topic].append(value)
            i += 1


def test_a_joining_broker_takes_bundles_while_clients_keep_going(tmp_path: Path) -> None:
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=2, bookies=2, zookeeper_port=0, broker_port=0,
            http_port=0, bookie_port=0, session_timeout_s=2.0,
        )
    )  # fmt: skip
    client: pulsar.Client | None = None
    try:
        cluster.start()
        topics = topic_per_bundle("expand")
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30)
        consumers = {t: client.subscribe(t, "s") for t in topics}
        producers = Producers(
            {t: client.create_producer(t, send_timeout_millis=30_000) for t in topics}
        )
        producers.start()
        wait_until(lambda: producers.total() >= 40, timeout_s=60, what="first sends")
        # The first broker up may have taken every bundle (public/default's 4 and
        # public/functions' 4) before the second registered: count rebalancing evens
        # them out while the clients run.
        wait_until(
            lambda: [bundles_owned(cluster.broker_admin_url(i)) for i in range(2)] == [4, 4],
            timeout_s=60, what="4 bundles on each broker",
        )  # fmt: skip
        new = cluster.add_broker()
        new_url = cluster.broker_service_url(2)
        # 4, 4, 0 → each old broker unloads its busiest bundle (one move at a time, a
        # topic with producers) → 3, 3, 2, and no more moves
        wait_until(
            lambda: bundles_owned(cluster.broker_admin_url(2)) == 2, timeout_s=90,
            what="two bundles moved onto the new broker",
        )  # fmt: skip
        assert any(owner_url(cluster.admin_url, t) == new_url for t in topics)
        moved_at = producers.total()
        wait_until(
            lambda: producers.total() >= moved_at + 40, timeout_s=60,
            what="sends acknowledged after the moves",
        )  # fmt: skip
        producers.stopped.set()
        producers.join(60)
        assert not producers.is_alive()
        owned = [bundles_owned(cluster.broker_admin_url(i)) for i in range(3)]
        assert sorted(owned) == [2, 3, 3], owned
        assert new.is_running()

        for topic, consumer in consumers.items():
            want = producers.acked[topic]
            got: list[str] = []
            while not set(want) <= set(got):
                msg = consumer.receive(timeout_millis=30_000)
                got.append(msg.data().decode())
                consumer.acknowledge(msg)
            # in order; a re-sent unacknowledged message may appear twice, nothing else
            firsts = list(dict.fromkeys(got))
            assert [v for v in firsts if v in set(want)] == want, topic
        assert cluster.exited() == []
    finally:
        if client is not None:
            client.close()
        cluster.stop()
