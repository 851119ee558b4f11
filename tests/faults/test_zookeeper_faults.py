"""ZooKeeper itself failing while a topic is produced to (issue 38).

Real processes: a ZooKeeper of the test's own (fsync on, a fixed port so it restarts on the
same address), two ``magnetar bookie`` and one ``magnetar broker`` (E/Qw/Qa 2/2/2,
deduplication on, 2 s sessions). The official client produces (windowed ``send_async``,
every send recorded in a :class:`~magnetar.testing.history.History`) while ZooKeeper is

* ``kill``: SIGKILLed, then restarted on its data after a seeded 1-4 s;
* ``pause``: SIGSTOPped for 1.5-2 times the session timeout, then SIGCONTed. ZooKeeper's
  session clock ran on through the pause, so on resuming it expires the sessions past their
  timeout, unless a client's reconnection reaches it first: the reconnection revalidates
  (renews) the session before the expiry pass runs, a race inside ZooKeeper (seen in 3 of
  12 runs under load). So the broker either keeps its session and serves on, or stops
  (Pulsar's ``zookeeperSessionExpiredPolicy`` default, ``shutdown``) and the test restarts
  it on the same ports, as a process supervisor would. A bookie whose session expired
  restarts itself on a new session and registers again (it stayed up unseen by brokers
  before, "need 2 bookies, 0 available").

Checked: the history (every receipted message read back exactly once, in the producer's
order) and that the service is back within the session timeout plus a few seconds after the
fault heals (after the restart, for a pause) (a new client's send to a new topic gets a receipt). Seeded (the seed is printed,
``MAGNETAR_TEST_SEED`` replays one); ``MAGNETAR_LONG_TESTS=1`` repeats each 5 times.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.metadata.zookeeper_server import ZooKeeperServer, free_port
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess
from magnetar.testing.history import History
from tests.faults.history_sender import HistorySender

pytestmark = pytest.mark.timeout(180)

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
RUNS = 5 if LONG else 1
SESSION_TIMEOUT_S = 2.0
BACK_WITHIN_S = SESSION_TIMEOUT_S + 8.0
TOPIC = "persistent://public/default/zk-fault"


def zookeeper_java_pid(server: ZooKeeperServer) -> int:
    """ZooKeeper's own process: the only child of its lifeline supervisor."""
    assert server.pid is not None
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.zookeeper = ZooKeeperServer(tmp_path / "zk", port=free_port(), fsync=True)
        self.procs: list[BookieProcess | BrokerProcess] = []

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.kill()
        self.zookeeper.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.close()


def kept_session(broker: BrokerProcess) -> bool:
    """The broker reconnected to ZooKeeper on its old session (kazoo logs CONNECTED after
    the loss, and no expiry)."""
    log = broker.log_path.read_text(errors="replace")
    lost = log.rfind("Zookeeper connection lost")
    return lost >= 0 and "state: CONNECTED" in log[lost:] and "EXPIRED" not in log[lost:]


def new_topic_receipt(url: str, topic: str) -> None:
    """A send to a topic nobody owned yet: its ownership, ledger and cursor all need a
    working ZooKeeper."""
    client = pulsar.Client(url, operation_timeout_seconds=int(BACK_WITHIN_S))
    try:
        client.create_producer(topic).send(b"probe")
    finally:
        client.close()


@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize(
    "fault",
    ["kill", "pause"],
)
def test_zookeeper_fault_loses_nothing_and_service_returns(
    tmp_path: Path, cluster: Cluster, fault: str, run: int
) -> None:
    seed = int(os.environ.get("MAGNETAR_TEST_SEED") or random.randrange(2**32))
    print(f"seed {seed} (replay: MAGNETAR_TEST_SEED={seed})")
    rng = random.Random(seed)
    before = rng.randrange(20, 80)
    down_s = rng.uniform(1.0, 4.0) if fault == "kill" else SESSION_TIMEOUT_S * rng.uniform(1.5, 2)

    zk = cluster.zookeeper
    zk.start()
    bookies = [BookieProcess(zk.url("/zk-fault"), tmp_path / f"bookie{i}") for i in range(2)]
    for bookie in bookies:
        bookie.start()
        cluster.procs.append(bookie)
    for bookie in bookies:
        wait_until(lambda b=bookie: " ready" in b.log(), timeout_s=30, what=bookie.bookie_id)  # type: ignore[misc]
    broker = BrokerProcess(
        zk.url("/zk-fault"), tmp_path / "broker.log",
        "--port", str(free_port()), "--http-port", str(free_port()),
        "--session-timeout-s", str(SESSION_TIMEOUT_S), "--deduplication",
        "--ensemble-size", "2", "--write-quorum", "2", "--ack-quorum", "2",
    )  # fmt: skip
    cluster.procs.append(broker)
    broker.start()

    history = History()
    client = pulsar.Client(broker.url, operation_timeout_seconds=30)
    try:
        audit = client.subscribe(TOPIC, "audit", initial_position=pulsar.InitialPosition.Earliest)
        read_back = history.open_consumer("audit")
        producer = client.create_producer(
            TOPIC, producer_name="checked", batching_enabled=False, send_timeout_millis=60_000
        )
        sender = HistorySender(producer, "checked", history)
        sender.send_until(lambda: sender.sent >= before)
        producer.flush()

        java = zookeeper_java_pid(zk)
        os.kill(java, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        heal_at = time.monotonic() + down_s
        sender.send_until(lambda: time.monotonic() >= heal_at)
        if fault == "kill":
            wait_until(lambda: zk.pid is None or not Path(f"/proc/{java}").exists(), timeout_s=10)
            zk.stop()  # reaps the supervisor; the data directory is the test's, so it stays
            zk.start()
        else:
            os.kill(java, signal.SIGCONT)
            resumed = broker.proc
            assert resumed is not None
            wait_until(
                lambda: resumed.poll() is not None or kept_session(broker), timeout_s=30,
                what="the broker stops on its expired session or keeps it",
            )  # fmt: skip
            if resumed.poll() is not None:
                broker.start()
        healed = time.monotonic()

        new_topic_receipt(broker.url, f"{TOPIC}-after-{fault}")
        back_s = time.monotonic() - healed
        print(f"{fault}: down {down_s:.1f} s, service back {back_s:.1f} s after the heal")
        assert back_s < BACK_WITHIN_S
        last = sender.sent + 30
        sender.send_until(lambda: sender.sent >= last)
        sender.drain()
        assert broker.proc is not None and broker.proc.poll() is None, broker.log_tail()

        receipted = {s.payload for s in history.receipted()}
        assert str(sender.sent - 1) in receipted, "sends after the heal were never receipted"
        while str(sender.sent - 1) not in {p for _, p in read_back.received}:
            payload = audit.receive(timeout_millis=30_000).data().decode()
            history.received(read_back, "checked", payload)
        assert history.check(read_back, dedup=True) == []
    finally:
        client.close()
