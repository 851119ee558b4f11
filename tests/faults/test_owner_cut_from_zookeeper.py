"""The topic owner cut off from ZooKeeper only, not from its clients or bookies (issue 38).

Real processes: ZooKeeper, two ``magnetar bookie`` and two ``magnetar broker`` (E/Qw/Qa
2/2/2, deduplication on, 2 s sessions), each broker reaching ZooKeeper through its own
:class:`~magnetar.testing.fault_proxy.FaultProxy`. The official client produces (windowed
``send_async``) through a service URL naming both brokers, and ``magnetar client consume``
consumes through the same URL. The owner's link to ZooKeeper is cut (both ways) for twice
the session timeout, then healed.

Checked at the end:

* the :class:`~magnetar.testing.history.History` of the sends: every acknowledged message
  in the topic exactly once and in the producer's order (read on a subscription that
  acknowledges nothing, made before the first send);
* the consumer never exited and received every acknowledged message;
* the old owner stopped (its session expired) and the topic moved to the other broker;
* no interleaving of two owners' writes: in the producer's order, once a message was
  acknowledged in the new owner's ledger, none was acknowledged in an older one after it.

Seeded (how many messages go before the cut, and the cut's length; the seed is printed,
``MAGNETAR_TEST_SEED`` replays one); ``MAGNETAR_LONG_TESTS=1`` runs it 5 times.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.metadata.zookeeper_server import ZooKeeperServer
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess
from magnetar.testing.fault_proxy import FaultProxy
from magnetar.testing.history import History
from tests.faults.consume_output import consumed
from tests.faults.history_sender import HistorySender

pytestmark = pytest.mark.timeout(240)

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
RUNS = 5 if LONG else 1
SESSION_TIMEOUT_S = 2.0
AFTER_HEAL = 30


class Cluster:
    """Processes and proxies of one run; :meth:`close` ends them all."""

    def __init__(self) -> None:
        self.procs: list[BookieProcess | BrokerProcess] = []
        self.proxies: list[FaultProxy] = []
        self.consumer: subprocess.Popen[bytes] | None = None

    def close(self) -> None:
        if self.consumer is not None and self.consumer.poll() is None:
            self.consumer.kill()
            self.consumer.wait(10)
        for proc in reversed(self.procs):
            proc.kill()
        for proxy in self.proxies:
            proxy.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


def owner_url(broker: BrokerProcess, topic: str) -> str:
    local = topic.removeprefix("persistent://")
    url = f"{broker.http_url}/lookup/v2/topic/persistent/{local}"
    with urllib.request.urlopen(url, timeout=30) as response:  # follows 307 to the owner
        return str(json.load(response)["brokerUrl"])


@pytest.mark.parametrize("run", range(RUNS))
def test_owner_cut_from_zookeeper_loses_and_duplicates_nothing(
    zookeeper: ZooKeeperServer, tmp_path: Path, cluster: Cluster, run: int
) -> None:
    seed = int(os.environ.get("MAGNETAR_TEST_SEED") or random.randrange(2**32))
    print(f"seed {seed} (replay: MAGNETAR_TEST_SEED={seed})")
    rng = random.Random(seed)
    before_cut = rng.randrange(20, 80)
    cut_s = SESSION_TIMEOUT_S * rng.uniform(2.0, 2.5)

    chroot = f"/owner-cut-{run}-{seed}"
    direct_url = zookeeper.url(chroot)
    bookies = [BookieProcess(direct_url, tmp_path / f"bookie{i}") for i in range(2)]
    for bookie in bookies:
        bookie.start()
        cluster.procs.append(bookie)
    for bookie in bookies:
        wait_until(lambda b=bookie: " ready" in b.log(), timeout_s=30, what=bookie.bookie_id)  # type: ignore[misc]
    brokers = []
    for i in range(2):
        proxy = FaultProxy("127.0.0.1", zookeeper.port).start()
        cluster.proxies.append(proxy)
        broker = BrokerProcess(
            f"zk://{proxy.address}{chroot}", tmp_path / f"broker{i}.log",
            "--session-timeout-s", str(SESSION_TIMEOUT_S), "--deduplication",
            "--ensemble-size", "2", "--write-quorum", "2", "--ack-quorum", "2",
        )  # fmt: skip
        cluster.procs.append(broker)
        broker.start()
        brokers.append(broker)
    request = urllib.request.Request(
        f"{brokers[0].http_url}/admin/v2/namespaces/public/faults", data=b"", method="PUT"
    )
    urllib.request.urlopen(request, timeout=30).close()
    topic = "persistent://public/faults/owner-cut"
    old_url = owner_url(brokers[0], topic)
    old = next(i for i, b in enumerate(brokers) if b.url == old_url)
    service_url = "pulsar://" + ",".join(b.url.removeprefix("pulsar://") for b in brokers)

    out_path = tmp_path / "consumer.out"
    with out_path.open("wb") as out, (tmp_path / "consumer.err").open("wb") as err:
        cluster.consumer = subprocess.Popen(
            [
                sys.executable, "-m", "magnetar.cli.main", "client", "--url", service_url,
                "--output", "json", "consume", topic, "-s", "checker", "-n", "0",
                "-p", "earliest",
            ],
            stdout=out, stderr=err,
        )  # fmt: skip

    history = History()
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    try:
        # Holds every message (nothing acknowledged on it), so no ledger is trimmed.
        audit = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        read_back = history.open_consumer("audit")
        producer = client.create_producer(
            topic, producer_name="checked", batching_enabled=False, send_timeout_millis=60_000
        )
        sender = HistorySender(producer, "checked", history)

        sender.send_until(lambda: sender.sent >= before_cut)
        producer.flush()
        proxy = cluster.proxies[old]
        proxy.cut()
        heal_at = time.monotonic() + cut_s
        sender.send_until(lambda: time.monotonic() >= heal_at)
        proxy.heal()
        old_proc = brokers[old].proc
        assert old_proc is not None
        # Pulsar's default: a broker that learns its session expired stops.
        wait_until(lambda: old_proc.poll() is not None, timeout_s=60, what="the old owner stops")
        last = sender.sent + AFTER_HEAL
        sender.send_until(lambda: sender.sent >= last)
        sender.drain()

        receipted = history.receipted()
        assert receipted[-1].index == sender.sent - 1, (
            "sends after the failover were never acknowledged"
        )
        assert owner_url(brokers[1 - old], topic) == brokers[1 - old].url

        # No interleaving of two owners' writes, in the producer's order.
        ledgers = [s.receipt[0] for s in receipted]  # type: ignore[index]
        seen: list[int] = []
        for ledger in ledgers:
            if not seen or seen[-1] != ledger:
                assert ledger not in seen, f"ledger {ledger} written again after {seen[-1]}"
                seen.append(ledger)

        wanted = {s.payload for s in receipted}
        wait_until(
            lambda: wanted <= set(consumed(out_path)) or cluster.consumer.poll() is not None,  # type: ignore[union-attr]
            timeout_s=60, what="the consumer received every acknowledged message",
        )  # fmt: skip
        assert cluster.consumer.poll() is None, (tmp_path / "consumer.err").read_text()
        assert wanted <= set(consumed(out_path))

        last_payload = receipted[-1].payload
        while ("checked", last_payload) not in read_back.received:
            payload = audit.receive(timeout_millis=30_000).data().decode()
            history.received(read_back, "checked", payload)
        assert history.check(read_back, dedup=True) == []
    finally:
        client.close()
