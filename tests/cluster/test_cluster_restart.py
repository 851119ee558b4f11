"""Brokers that come back under the ids they had: a whole cluster restarted over its data,
and one broker SIGKILLed and restarted while the controller lives on another broker.
Real processes (``magnetar.local_cluster.LocalCluster``: ZooKeeper, bookies, brokers) and
the official client; a topic in every bundle of ``public/default``, so no bundle can stay
unserved unnoticed."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from tests.cluster.bundle_topics import topic_per_bundle

pytestmark = pytest.mark.timeout(300)

MESSAGES = 20
OPERATION_TIMEOUT_S = 30


def config(data_dir: Path) -> LocalClusterConfig:
    return LocalClusterConfig(
        data_dir=data_dir,
        brokers=2,
        bookies=2,
        zookeeper_port=0,
        broker_port=0,
        http_port=0,
        bookie_port=0,
        session_timeout_s=2.0,
    )


@pytest.fixture
def clusters() -> Iterator[list[LocalCluster]]:
    started: list[LocalCluster] = []
    yield started
    for cluster in started:
        cluster.stop()


def produce(service_url: str, topics: list[str], tag: str) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S)
    try:
        for topic in topics:
            # the subscription keeps the messages (a topic without one may drop them)
            client.subscribe(topic, "s").close()
            producer = client.create_producer(topic)
            for i in range(MESSAGES):
                producer.send(f"{tag}-{i}".encode())
            producer.close()
    finally:
        client.close()


def consume_all(service_url: str, topics: list[str], subscription: str) -> dict[str, list[str]]:
    """Every message of every topic from the earliest, in order."""
    client = pulsar.Client(service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S)
    got: dict[str, list[str]] = {}
    try:
        for topic in topics:
            consumer = client.subscribe(
                topic, subscription, initial_position=pulsar.InitialPosition.Earliest
            )
            got[topic] = []
            while True:
                try:
                    msg = consumer.receive(timeout_millis=3_000)
                except pulsar.Timeout:
                    break
                got[topic].append(msg.data().decode())
                consumer.acknowledge(msg)
            consumer.close()
    finally:
        client.close()
    return got


def expected(topics: list[str], *tags: str) -> dict[str, list[str]]:
    return {t: [f"{tag}-{i}" for tag in tags for i in range(MESSAGES)] for t in topics}


@pytest.mark.parametrize("how", ["stopped", "brokers-killed"])
def test_a_cluster_restarted_over_its_data_serves_every_bundle_again(
    tmp_path: Path, clusters: list[LocalCluster], how: str
) -> None:
    topics = topic_per_bundle("restart")
    first = LocalCluster(config(tmp_path / "c"))
    clusters.append(first)
    first.start()
    service_url = first.service_url
    produce(service_url, topics, "before")
    if how == "brokers-killed":
        # a crash: the bundle records stay OWNED by the brokers as they were
        for broker in first.brokers:
            broker.kill()
    first.stop()

    # Same directory, same ports, so the same broker ids; the new controller (epoch 2)
    # resumes records OWNED at epoch 1 by brokers that hold no ownership node now.
    again = LocalCluster(config(tmp_path / "c"))
    clusters.append(again)
    again.start()
    assert again.service_url == service_url
    produce(service_url, topics, "after")
    assert consume_all(service_url, topics, "s") == expected(topics, "before", "after")


def test_a_broker_killed_and_restarted_under_its_id_serves_again(
    tmp_path: Path, clusters: list[LocalCluster]
) -> None:
    topics = topic_per_bundle("bounce")
    cluster = LocalCluster(config(tmp_path / "c"))
    clusters.append(cluster)
    cluster.start()
    produce(cluster.service_url, topics, "before")

    with urllib.request.urlopen(
        f"{cluster.admin_url}/admin/v2/brokers/leaderBroker", timeout=30
    ) as response:
        leader = json.load(response)
    controller_index = next(
        i for i in range(2) if cluster.broker_admin_url(i) == leader["serviceUrl"]
    )
    other = cluster.brokers[1 - controller_index]
    other.kill()
    # Back at once on its ports (its id): it waits out its old session's registration,
    # whose ownership nodes linger until that session expires.
    other.start()
    produce(cluster.service_url, topics, "after")
    assert consume_all(cluster.service_url, topics, "s") == expected(topics, "before", "after")
    assert cluster.exited() == []
