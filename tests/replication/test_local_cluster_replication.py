"""Geo-replication between two ``magnetar local-cluster``\\ s (``east`` and ``west``, each its
own ZooKeeper, 2 brokers and 3 bookies, side by side on one machine), configured both ways
with deduplication on, and the official client:

* messages produced in each cluster reach every consumer of both once, in per-producer
  order; ``disable_replication=True`` and ``replication_clusters`` keep messages home;
* the topic's owner in the source cluster SIGKILLed mid-replication: the new owner's
  replicator resumes from the cursor and the remote holds every acknowledged message once.

``MAGNETAR_LONG_TESTS=1``: 1,000 messages per cluster (the issue's figure); else fewer.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import LocalCluster
from magnetar.testing.wait import wait_until

from .local_clusters import (
    admin_url,
    local_cluster,
    owner_index,
    register,
    replicated_namespace,
    replication_stats,
)

pytestmark = pytest.mark.timeout(600)

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)
LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
MESSAGES = 1000 if LONG else 300
RECEIVE_TIMEOUT_MS = 30_000


@dataclass
class Clusters:
    east: LocalCluster
    west: LocalCluster

    def admins(self) -> dict[str, str]:
        return {"east": admin_url(self.east), "west": admin_url(self.west)}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    base: Path = tmp_path_factory.mktemp("local-geo")
    started: list[LocalCluster] = []
    try:
        for name in ("east", "west"):
            started.append(local_cluster(base / name, name))
        east, west = started
        register(admin_url(east), "west", west.service_url, west.web_service_url)
        register(admin_url(west), "east", east.service_url, east.web_service_url)
        yield Clusters(east, west)
    finally:
        for cluster in started:
            cluster.stop()


def _client(cluster: LocalCluster) -> pulsar.Client:
    return pulsar.Client(cluster.service_url, operation_timeout_seconds=30, logger=_log)


def _receive(consumer: pulsar.Consumer, count: int) -> list[str]:
    got = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(msg)
        got.append(msg.data().decode())
    return got


def _nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 2000) -> None:
    with pytest.raises(pulsar.Timeout):
        extra = consumer.receive(timeout_millis=timeout_ms)
        raise AssertionError(f"unexpected message {extra.data()!r}")


def test_both_ways_once_in_order_and_local_messages_stay_home(clusters: Clusters) -> None:
    ns = replicated_namespace(clusters.admins())
    topic = f"persistent://{ns}/both-ways"
    clients = {"east": _client(clusters.east), "west": _client(clusters.west)}
    try:
        consumers = {
            name: c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            for name, c in clients.items()
        }
        producers = {
            name: c.create_producer(topic, producer_name=f"p-{name}") for name, c in clients.items()
        }
        for name, producer in producers.items():
            for i in range(MESSAGES):
                producer.send_async(f"{name}-{i}".encode(), None)
        for producer in producers.values():
            producer.flush()
        for name, consumer in consumers.items():
            per_origin: dict[str, list[int]] = {"east": [], "west": []}
            for data in _receive(consumer, 2 * MESSAGES):
                origin, index = data.rsplit("-", 1)
                per_origin[origin].append(int(index))
            for origin, indexes in per_origin.items():
                assert indexes == list(range(MESSAGES)), (name, origin)

        east = producers["east"]
        east.send(b"local", disable_replication=True)
        east.send(b"east-only", replication_clusters=["east"])
        east.send(b"everywhere")
        assert _receive(consumers["east"], 3) == ["local", "east-only", "everywhere"]
        assert _receive(consumers["west"], 1) == ["everywhere"]
        for consumer in consumers.values():
            _nothing_more(consumer)
    finally:
        for client in clients.values():
            client.close()


def test_owner_killed_mid_replication_remote_gets_every_acknowledged_message_once(
    clusters: Clusters,
) -> None:
    ns = replicated_namespace(clusters.admins())
    topic = f"persistent://{ns}/owner-kill"
    west = _client(clusters.west)
    east = _client(clusters.east)
    killed: int | None = None
    try:
        in_west = west.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = east.create_producer(topic, producer_name="p-east", send_timeout_millis=60_000)
        acked: list[int] = []
        failed: list[int] = []
        lock = threading.Lock()

        def on_sent(i: int) -> object:
            def done(result: pulsar.Result, _: object) -> None:
                with lock:
                    (acked if result == pulsar.Result.Ok else failed).append(i)

            return done

        owner = owner_index(clusters.east, topic)
        half = MESSAGES // 2
        for i in range(half):
            producer.send_async(f"m-{i}".encode(), on_sent(i))
        producer.flush()
        got = _receive(in_west, 20)  # replication is under way
        clusters.east.brokers[owner].kill()
        killed = owner
        for i in range(half, MESSAGES):  # the stream goes on through the new owner
            producer.send_async(f"m-{i}".encode(), on_sent(i))
        producer.flush()
        wait_until(
            lambda: len(acked) + len(failed) == MESSAGES, timeout_s=60, what="every send settled"
        )
        assert owner_index(clusters.east, topic) != owner
        got += _receive(in_west, len(acked) - len(got))
        _nothing_more(in_west, 3000)
        indexes = [int(data.rsplit("-", 1)[1]) for data in got]
        assert len(indexes) == len(set(indexes)), "duplicates at the remote"
        assert set(acked) <= set(indexes), "acknowledged messages missing at the remote"
        assert indexes == sorted(indexes)
        east_admin = admin_url(clusters.east)
        wait_until(
            lambda: replication_stats(east_admin, topic, "west").get("replicationBacklog") == 0,
            timeout_s=30,
            what="the new owner's replication backlog drained",
        )
    finally:
        east.close()
        west.close()
        if killed is not None:
            clusters.east.brokers[killed].start()
