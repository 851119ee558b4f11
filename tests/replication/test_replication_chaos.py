"""Bounded chaos during a replicated stream, deduplication on: a local cluster ``east``
(2 brokers, 2 bookies) replicates to a standalone ``south`` while a producer in ``east``
keeps sending; a seeded sequence of faults:

* ``south`` SIGKILLed and restarted;
* ``south`` SIGSTOPped and SIGCONTed; while it is paused the namespace is unloaded, so that
  the topic is closed and loaded again by the other broker (a namespace isolation policy
  names that one while the controller reassigns the bundle): always in the default run,
  about every other pause in the long one;
* the topic's owner in ``east`` SIGKILLed: the other broker takes the topic; the killed one
  comes back at once, and may take the topic back during the next fault;
* the owner SIGKILLed while ``south`` is paused: the killed owner's replicator may have left
  sends in ``south``'s socket buffers, which ``south`` reads when it resumes, beside the new
  owner's replicator sending again from the cursor.

After each fault, while ``south`` is down, ``east``'s topic stats say
``connected: false`` and a growing ``replicationBacklog``; after each recovery they say
``connected: true`` and the backlog drains to 0. At the end ``south`` holds every message
``east`` acknowledged exactly once, in order.

The seed is printed; ``MAGNETAR_TEST_SEED`` replays one. Default: four faults (one of
each kind); ``MAGNETAR_LONG_TESTS=1``: 20 remote kills and pauses, and owner kills (with
``south`` up or paused) among them.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import LocalCluster
from magnetar.testing import StandaloneProcess
from magnetar.testing.wait import wait_until

from .local_clusters import (
    admin_url,
    local_cluster,
    owner_index,
    register,
    replicated_namespace,
    replication_stats,
    unload_namespace_to,
)

pytestmark = pytest.mark.timeout(1800)

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)
LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
STATS_TIMEOUT_S = 30.0
DOWN_NOTICED_S = 15.0
"""How soon stats must say a killed or paused remote is not connected."""
DRAIN_TIMEOUT_S = 90.0
SEND_INTERVAL_S = 0.005


@dataclass
class Stream:
    """A producer in ``east`` sending ``m-<i>`` until stopped; ``paused`` holds it."""

    producer: pulsar.Producer
    acked: set[int] = field(default_factory=set)
    settled: int = 0
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stopped.is_set():
            if not self.running.wait(0.1):
                continue
            i = self.sent
            self.sent += 1
            self.producer.send_async(f"m-{i}".encode(), self._done(i))
            self.stopped.wait(SEND_INTERVAL_S)

    def _done(self, i: int) -> object:
        def done(result: pulsar.Result, _: object) -> None:
            with self.lock:
                self.settled += 1
                if result == pulsar.Result.Ok:
                    self.acked.add(i)

        return done

    def quiesce(self) -> None:
        """Hold the stream and wait until every send is answered."""
        self.running.clear()
        self.producer.flush()
        wait_until(lambda: self.settled == self.sent, timeout_s=90, what="sends settled")


@dataclass
class Sites:
    east: LocalCluster
    south: StandaloneProcess


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[Sites]:
    east = local_cluster(tmp_path / "east", "east", bookies=2)
    try:
        with StandaloneProcess(
            tmp_path / "south", "--cluster-name", "south", "--no-functions-worker"
        ) as south:
            register(admin_url(east), "south", south.url, south.http_url)
            register(south.http_url, "east", east.service_url, east.web_service_url)
            yield Sites(east, south)
    finally:
        east.stop()


def _faults(rng: random.Random) -> list[str]:
    if not LONG:
        faults = ["remote-kill", "remote-pause", "owner-kill", "owner-kill-paused"]
        rng.shuffle(faults)
        return faults
    remote = [rng.choice(["remote-kill", "remote-pause"]) for _ in range(20)]
    kinds = ["owner-kill", "owner-kill-paused"]
    owner_kills = [*kinds, rng.choice(kinds)]
    for kind in owner_kills:
        remote.insert(rng.randrange(len(remote) + 1), kind)
    return remote


def _kill_owner(east: LocalCluster, topic: str) -> None:
    """SIGKILL ``topic``'s owner, wait until the other broker owns it, start the killed one
    again at once: it may take bundles from the other, so the topic can move again while
    the next fault has south down (stats must still tell the truth)."""
    owner = owner_index(east, topic)
    east.brokers[owner].kill()
    wait_until(
        lambda: owner_index(east, topic) != owner,
        timeout_s=STATS_TIMEOUT_S,
        what="another owner",
    )
    east.brokers[owner].start()


def _until_not_connected(stats: Callable[[], dict[str, object]], fault: str) -> None:
    """Wait until stats say ``connected: false``; the failure names what they said."""
    seen: list[object] = []

    def said_not_connected() -> bool:
        seen.append(stats().get("connected", "(no replicator in stats)"))
        return seen[-1] is False

    try:
        wait_until(
            said_not_connected,
            timeout_s=DOWN_NOTICED_S,
            what=f"stats say south is not connected ({fault})",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; stats said connected: {seen[-5:]}") from None


def test_replication_survives_remote_kills_pauses_and_owner_kills(sites: Sites) -> None:
    seed = int(os.environ.get("MAGNETAR_TEST_SEED", random.randrange(1 << 32)))
    print(f"replication chaos seed {seed} (MAGNETAR_TEST_SEED={seed} replays it)")
    rng = random.Random(seed)
    faults = _faults(rng)
    print("faults:", faults)
    east, south = sites.east, sites.south
    ns = replicated_namespace({"east": admin_url(east), "south": south.http_url})
    topic = f"persistent://{ns}/chaos"

    def stats() -> dict[str, object]:
        return replication_stats(admin_url(east), topic, "south")

    south_client = pulsar.Client(south.url, operation_timeout_seconds=30, logger=_log)
    south_client.subscribe(topic, "sub").close()  # the subscription keeps what arrives
    south_client.close()
    east_client = pulsar.Client(east.service_url, operation_timeout_seconds=30, logger=_log)
    producer = east_client.create_producer(
        topic, producer_name="p-east", send_timeout_millis=120_000, block_if_queue_full=True
    )
    stream = Stream(producer)
    thread = threading.Thread(target=stream.run, daemon=True)
    thread.start()
    try:
        stream.running.set()
        wait_until(lambda: stats().get("connected") is True, what="replicator connected")
        for fault in faults:
            stream.running.set()
            before = stream.sent
            wait_until(lambda b=before: stream.sent >= b + 100, what="a stream in progress")
            if fault == "owner-kill":
                _kill_owner(east, topic)
            else:
                if fault == "remote-kill":
                    south.kill()
                else:
                    assert south.proc is not None
                    os.kill(south.proc.pid, signal.SIGSTOP)
                if fault == "owner-kill-paused":
                    # the owner's replicator is mid-stream into the paused remote
                    _kill_owner(east, topic)
                if fault == "remote-pause" and (not LONG or rng.random() < 0.5):
                    # the topic's bundle is unloaded while south is paused, and loaded
                    # again by the other broker
                    owner = owner_index(east, topic)
                    unload_namespace_to(east, ns, topic, to=1 - owner, fallback=owner)
                    print(f"namespace unloaded with south paused: owner {owner} -> {1 - owner}")
                _until_not_connected(stats, fault)
                backlog = int(stats()["replicationBacklog"])  # type: ignore[call-overload]
                wait_until(
                    lambda b=backlog: int(stats()["replicationBacklog"]) > b,  # type: ignore[call-overload]
                    timeout_s=STATS_TIMEOUT_S,
                    what="the replication backlog grows while south is down",
                )
                if fault == "remote-kill":
                    south.start()
                else:
                    assert south.proc is not None
                    os.kill(south.proc.pid, signal.SIGCONT)
            stream.quiesce()
            wait_until(
                lambda: stats().get("connected") is True and stats().get("replicationBacklog") == 0,
                timeout_s=DRAIN_TIMEOUT_S,
                what=f"the replication backlog drained after {fault}",
            )
    finally:
        stream.stopped.set()
        stream.running.set()
        thread.join(10)
        east_client.close()

    south_client = pulsar.Client(south.url, operation_timeout_seconds=30, logger=_log)
    try:
        consumer = south_client.subscribe(topic, "sub")
        got: list[int] = []
        while True:
            try:
                msg = consumer.receive(timeout_millis=5000)
            except pulsar.Timeout:
                break
            consumer.acknowledge(msg)
            got.append(int(msg.data().decode().rsplit("-", 1)[1]))
    finally:
        south_client.close()
    print(f"sent {stream.sent}, acknowledged {len(stream.acked)}, at south {len(got)}")
    assert len(got) == len(set(got)), "duplicates at the remote"
    assert stream.acked <= set(got), "acknowledged messages missing at the remote"
    assert got == sorted(got)
