"""Bounded chaos: SIGKILL and restart random brokers, bookies and the controller while
official-client producers and consumers run; at the end nothing acknowledged is lost and
each producer's order holds.

Real processes (``magnetar.local_cluster.LocalCluster``): ZooKeeper, 4 bookies (E=3, Qw=2,
Qa=2, so an ensemble change has a spare), 3 brokers. One fault at a time: a process is
killed, left down for a random while, started again (same ports, same data, same id), then
the cluster is left alone for a random while. Runs ``CHAOS_S`` (40 s in the suite; 600 s with
``MAGNETAR_LONG_TESTS=1``). Prints its seed; ``MAGNETAR_TEST_SEED=<seed>`` replays the same
schedule of faults (the processes' own timing still varies).

What is checked, per topic, from the consumer's side:

* every acknowledged send was delivered (nothing acknowledged lost);
* each producer's messages arrive in its send order (first deliveries; a message the
  client re-sent after a failover, or one redelivered after a consumer reconnect, may come
  again — duplicates are counted, not failed);
* one message id never carries two payloads: two owners appending at once would each
  write their own ledger, and the stale one's acknowledged writes would be lost (the first
  check) or show up beside the new owner's under other ids in a contradicting order (the
  second); the fencing of the topic's ledger on takeover is what prevents it.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import ClusterProcess, LocalCluster, LocalClusterConfig
from magnetar.testing import wait_until
from tests.cluster.bundle_topics import topic_per_bundle

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
CHAOS_S = 600.0 if LONG else 40.0
PRODUCERS_PER_TOPIC = 2
TOPICS = 2
DRAIN_TIMEOUT_S = 180.0

pytestmark = pytest.mark.timeout(int(CHAOS_S) + 600)


@dataclass
class ProducerLog:
    name: str
    topic: str
    acked: list[int] = field(default_factory=list)
    failed: int = 0


class ProducerThread(threading.Thread):
    """Sends ``<name>:<seq>`` with seq 0, 1, 2, … until stopped; keeps what was
    acknowledged (a failed send is not acknowledged, and its seq is not reused)."""

    def __init__(self, client: pulsar.Client, log: ProducerLog, stop: threading.Event):
        super().__init__(daemon=True, name=log.name)
        self.client, self.log, self.stop = client, log, stop

    def run(self) -> None:
        producer = self.client.create_producer(
            self.log.topic, producer_name=self.log.name, send_timeout_millis=30_000
        )
        seq = 0
        while not self.stop.is_set():
            try:
                producer.send(f"{self.log.name}:{seq}".encode())
            except pulsar.PulsarException:
                self.log.failed += 1
            else:
                self.log.acked.append(seq)
            seq += 1
        producer.close()


class ConsumerThread(threading.Thread):
    """Receives and acknowledges until stopped; keeps (message id, payload) in order."""

    def __init__(self, client: pulsar.Client, topic: str, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"consumer {topic}")
        self.consumer = client.subscribe(topic, "chaos")
        self.stop = stop
        self.got: list[tuple[tuple[int, int, int, int], str]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            mid = msg.message_id()
            key = (mid.ledger_id(), mid.entry_id(), mid.batch_index(), mid.partition())
            self.got.append((key, msg.data().decode()))
            self.consumer.acknowledge(msg)


def controller_index(cluster: LocalCluster) -> int | None:
    """Index of the controller broker, asked of any running broker."""
    for i, broker in enumerate(cluster.brokers):
        if not broker.is_running():
            continue
        try:
            with urllib.request.urlopen(
                f"{cluster.broker_admin_url(i)}/admin/v2/brokers/leaderBroker", timeout=10
            ) as response:
                url = json.load(response)["serviceUrl"]
        except (OSError, ValueError, KeyError):
            continue
        for j in range(len(cluster.brokers)):
            if cluster.broker_admin_url(j) == url:
                return j
    return None


def check(logs: list[ProducerLog], consumers: dict[str, ConsumerThread]) -> list[str]:
    """What went wrong (empty when nothing did)."""
    problems: list[str] = []
    for topic, consumer in consumers.items():
        payload_at: dict[tuple[int, int, int, int], str] = {}
        firsts: dict[str, list[int]] = {}
        seen: set[str] = set()
        for key, value in consumer.got:
            if payload_at.setdefault(key, value) != value:
                problems.append(f"{topic}: {key} carried {payload_at[key]} and {value}")
            if value in seen:
                continue
            seen.add(value)
            name, seq = value.rsplit(":", 1)
            firsts.setdefault(name, []).append(int(seq))
        for log in (p for p in logs if p.topic == topic):
            order = firsts.get(log.name, [])
            if order != sorted(order):
                problems.append(f"{log.name}: out of order")
            missing = sorted(set(log.acked) - set(order))
            if missing:
                problems.append(f"{log.name}: {len(missing)} acknowledged lost: {missing[:10]}")
    return problems


def test_chaos_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = int(os.environ.get("MAGNETAR_TEST_SEED", random.randrange(1_000_000)))
    print(f"chaos seed {seed} (replay with MAGNETAR_TEST_SEED={seed}), {CHAOS_S:.0f} s")
    rng = random.Random(seed)
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "c", brokers=3, bookies=4, zookeeper_port=0, broker_port=0,
            http_port=0, bookie_port=0, ensemble_size=3, write_quorum=2, ack_quorum=2,
            session_timeout_s=4.0,
        )
    )  # fmt: skip
    stop = threading.Event()
    stop_sending = threading.Event()
    client: pulsar.Client | None = None
    faults: list[str] = []
    try:
        cluster.start()
        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        topics = topic_per_bundle("chaos")[:TOPICS]
        consumers = {t: ConsumerThread(client, t, stop) for t in topics}
        logs = [
            ProducerLog(f"p{t_index}-{i}", topic)
            for t_index, topic in enumerate(topics)
            for i in range(PRODUCERS_PER_TOPIC)
        ]
        threads: list[threading.Thread] = [*consumers.values()]
        threads += [ProducerThread(client, log, stop_sending) for log in logs]
        for thread in threads:
            thread.start()

        deadline = time.monotonic() + CHAOS_S
        while time.monotonic() < deadline:
            kind = rng.choice(["broker", "bookie", "controller"])
            victim: ClusterProcess
            if kind == "bookie":
                victim = rng.choice(cluster.bookies)
            elif kind == "controller":
                index = controller_index(cluster)
                victim = cluster.brokers[0 if index is None else index]
            else:
                victim = rng.choice(cluster.brokers)
            down_s, settle_s = rng.uniform(0.0, 6.0), rng.uniform(2.0, 8.0)
            faults.append(f"{kind} {victim.name} down {down_s:.1f} s")
            print(f"t={CHAOS_S - (deadline - time.monotonic()):.0f}s: SIGKILL {faults[-1]}")
            victim.kill()
            stop.wait(down_s)
            victim.start()
            stop.wait(settle_s)
            for process in cluster.processes():
                if not process.is_running():  # e.g. a broker that lost its session
                    print(f"{process.name} exited by itself; starting it again")
                    faults.append(f"{process.name} exited by itself")
                    process.start()

        # Let the producers send a little more on the calm cluster, then drain.
        before = sum(len(log.acked) for log in logs)
        wait_until(
            lambda: sum(len(log.acked) for log in logs) >= before + 20, timeout_s=120,
            what="sends acknowledged after the chaos",
        )  # fmt: skip
        stop_sending.set()
        for thread in threads:
            if isinstance(thread, ProducerThread):
                thread.join(120)

        def drained() -> bool:
            return not [p for p in check(logs, consumers) if "acknowledged lost" in p]

        wait_until(drained, timeout_s=DRAIN_TIMEOUT_S, what="every acknowledged message")
        stop.set()
        for consumer in consumers.values():
            consumer.join(30)
        problems = check(logs, consumers)
        acked = sum(len(log.acked) for log in logs)
        delivered = sum(len(c.got) for c in consumers.values())
        print(
            f"chaos seed {seed}: {len(faults)} faults, {acked} acknowledged, "
            f"{sum(log.failed for log in logs)} failed sends, {delivered} deliveries "
            f"({delivered - len({v for c in consumers.values() for _, v in c.got})} again)"
        )
        assert not problems, f"seed {seed}: {problems[:10]}; faults: {faults}"
        assert acked > 0
    finally:
        stop.set()
        stop_sending.set()
        if client is not None:
            client.close()
        cluster.stop()
