"""A cluster of real processes with a :class:`~magnetar.testing.fault_proxy.FaultProxy` on
every link a scenario breaks, and the faults of issue 38 as seeded steps on it.

Processes: ZooKeeper (the session-wide test server, under a chroot of the cluster's own),
three ``magnetar bookie`` and two ``magnetar broker`` (E/Qw/Qa 2/2/2, so one bookie is
spare for an ensemble change; deduplication on; 2 s sessions). Links:

* broker → ZooKeeper: one proxy per broker (``zk_links``);
* broker → bookie: one proxy per bookie (``bookie_links``), listening on ``127.0.0.2`` on the
  bookie's own port; the bookie advertises ``127.0.0.2``, so every broker reaches it through
  the proxy;
* bookie → ZooKeeper: one proxy per bookie (``bookie_zk_links``), independent of its links
  to the brokers;
* client → broker and broker → broker (lookups' owner probes): one proxy per broker
  (``client_links``), the broker's advertised listener.

One bookie keeps its data on a small tmpfs (``disk_bookie``) for the full-disk fault. A
broker that stops because its session expired (Pulsar's default policy) is restarted on the
same ports by :meth:`FaultCluster.supervise`, as a process supervisor would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.bookie_protocol.layout import AVAILABLE_PATH
from magnetar.metadata import connect
from magnetar.metadata.zookeeper_server import ZooKeeperServer, free_port
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess
from magnetar.testing.disk import Tmpfs, fill_disk
from magnetar.testing.fault_proxy import Direction, FaultProxy

SESSION_TIMEOUT_S = 2.0
BOOKIES = 3
BROKERS = 2
NAMESPACE = "public/faults"
DISK_MIB = 150


class FaultCluster:
    """Start with :meth:`start`; :meth:`close` ends every process and proxy (idempotent)."""

    def __init__(self, zookeeper: ZooKeeperServer, root: Path, chroot: str) -> None:
        self.root = root
        self.metadata_url = zookeeper.url(chroot)
        self.zk_port = zookeeper.port
        self.chroot = chroot
        self.bookies: list[BookieProcess] = []
        self.bookie_links: list[FaultProxy] = []
        self.bookie_zk_links: list[FaultProxy] = []
        self.brokers: list[BrokerProcess] = []
        self.zk_links: list[FaultProxy] = []
        self.client_links: list[FaultProxy] = []
        self.disk = Tmpfs(root / "disk", DISK_MIB)
        self.restarts = 0

    @property
    def disk_bookie(self) -> int:
        return BOOKIES - 1

    def start(self) -> None:
        self.disk.mount()
        for i in range(BOOKIES):
            port = free_port()
            link = FaultProxy("127.0.0.1", port, listen_host="127.0.0.2", listen_port=port)
            self.bookie_links.append(link.start())
            zk_link = FaultProxy("127.0.0.1", self.zk_port).start()
            self.bookie_zk_links.append(zk_link)
            data = self.disk.path / "bookie" if i == self.disk_bookie else self.root / f"bookie{i}"
            bookie = BookieProcess(
                f"zk://{zk_link.address}{self.chroot}", data, port,
                "--advertised-host", "127.0.0.2",
            )  # fmt: skip
            bookie.log_path = self.root / f"bookie{i}.log"
            self.bookies.append(bookie)
            bookie.start()
        for bookie in self.bookies:
            wait_until(lambda b=bookie: " ready" in b.log(), timeout_s=60, what=bookie.bookie_id)  # type: ignore[misc]
        for i in range(BROKERS):
            zk_link = FaultProxy("127.0.0.1", self.zk_port).start()
            self.zk_links.append(zk_link)
            port = free_port()
            client_link = FaultProxy("127.0.0.1", port).start()
            self.client_links.append(client_link)
            broker = BrokerProcess(
                f"zk://{zk_link.address}{self.chroot}", self.root / f"broker{i}.log",
                "--port", str(port), "--session-timeout-s", str(SESSION_TIMEOUT_S),
                "--advertised-listeners", f"internal:pulsar://{client_link.address}",
                "--deduplication", "--ensemble-size", "2", "--write-quorum", "2",
                "--ack-quorum", "2",
            )  # fmt: skip
            self.brokers.append(broker)
            broker.start()
        request = urllib.request.Request(
            f"{self.brokers[0].http_url}/admin/v2/namespaces/{NAMESPACE}", data=b"", method="PUT"
        )
        urllib.request.urlopen(request, timeout=30).close()

    def close(self) -> None:
        for broker in self.brokers:
            broker.kill()
        for bookie in self.bookies:
            bookie.kill()
        for link in [*self.zk_links, *self.client_links, *self.bookie_links,
                     *self.bookie_zk_links]:  # fmt: skip
            link.stop()
        self.disk.unmount()

    @property
    def service_url(self) -> str:
        return "pulsar://" + ",".join(link.address for link in self.client_links)

    def alive(self) -> list[int]:
        return [
            i for i, b in enumerate(self.brokers) if b.proc is not None and b.proc.poll() is None
        ]

    def supervise(self) -> None:
        """Restart every broker that exited (its session expired), on the same ports."""
        for i, broker in enumerate(self.brokers):
            if broker.proc is not None and broker.proc.poll() is not None:
                self.zk_links[i].heal()
                broker.start()
                self.restarts += 1

    def http(self, path: str, via: int | None = None) -> object:
        """GET ``path`` from broker ``via``, by default from the first live broker that
        answers (one whose session expired answers 500 until it has stopped, which can take
        a while), following redirects, as JSON."""
        failed: OSError | None = None
        for index in self.alive() if via is None else [via]:
            try:
                url = f"{self.brokers[index].http_url}{path}"
                with urllib.request.urlopen(url, timeout=30) as response:
                    return json.load(response)
            except OSError as exc:
                failed = exc
        raise failed or OSError("no broker is running")

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` (forced: its subscriptions too) on its owner, so its ledgers
        are deleted and the bookies collect their space (the disk bookie's volume is small).
        Raises ``OSError`` if the owner does not answer 204."""
        local = topic.removeprefix("persistent://")
        owner = self.brokers[self.owner(topic)]
        request = urllib.request.Request(
            f"{owner.http_url}/admin/v2/persistent/{local}?force=true", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=30).close()

    def owner(self, topic: str) -> int:
        """Index of the broker that owns ``topic`` (lookup; claims the bundle if no one has)."""
        local = topic.removeprefix("persistent://")
        got = self.http(f"/lookup/v2/topic/persistent/{local}")
        url = str(got["brokerUrl"])  # type: ignore[index]
        return next(i for i, link in enumerate(self.client_links) if url.endswith(link.address))

    def registered_writable(self, bookie: int) -> bool:
        """Whether bookie ``bookie`` is registered writable (``/ledgers/available/<id>``)."""
        bookie_id = f"127.0.0.2:{self.bookies[bookie].port}"

        async def look() -> bool:
            store = await connect(self.metadata_url, session_timeout_s=10)
            try:
                return await store.exists(f"{AVAILABLE_PATH}/{bookie_id}") is not None
            finally:
                await store.close()

        return asyncio.run(look())

    def controller(self, via: int | None = None) -> tuple[int, int]:
        """``(broker index, epoch)`` of the elected controller, as broker ``via`` sees it."""
        got = self.http("/admin/v2/brokers/leaderBroker", via)
        url = str(got["serviceUrl"]).rstrip("/")  # type: ignore[index]
        index = next(i for i, b in enumerate(self.brokers) if b.http_url.rstrip("/") == url)
        return index, int(got.get("controllerEpoch", 0))  # type: ignore[attr-defined]


@dataclass
class Fault:
    """One injected fault: what it was, and how to heal it (idempotent)."""

    name: str
    heals: list[Callable[[], None]] = field(default_factory=list)
    duration_s: float = 0.0
    expires_session: bool = False
    """Long enough to expire the broker's session: it stops, and is restarted on heal."""
    recovered: Callable[[], bool] | None = None
    """What must hold again soon after the heal, beyond sends being acknowledged."""

    def heal(self) -> None:
        for step in self.heals:
            with contextlib.suppress(Exception):
                step()
        self.heals.clear()


def cut(link: FaultProxy, fault: Fault, direction: Direction = Direction.BOTH) -> None:
    link.cut(direction)
    fault.heals.append(lambda: link.heal(direction))


def session_cut_s(rng: random.Random) -> float:
    return SESSION_TIMEOUT_S * rng.uniform(2.0, 2.5)


# --- the faults, each chosen by a seeded generator --------------------------------------


def controller_partitioned(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """The controller cut from ZooKeeper and the other brokers (and the clients on their
    side), still reaching its bookies: the cluster's minority side."""
    index, epoch = c.controller()
    f = Fault(f"controller broker{index} partitioned", duration_s=session_cut_s(rng))
    f.expires_session = True
    cut(c.zk_links[index], f)
    cut(c.client_links[index], f)
    f.recovered = lambda: controller_moved(c, index, epoch)
    return f


def controller_moved(c: FaultCluster, old: int, epoch: int) -> bool:
    """Whether another broker than ``old`` is the controller at a later epoch than
    ``epoch``, as that other broker sees it (the topic written may not be on ``old``, so
    sends alone do not show a controller role nobody took)."""
    other = next(i for i in range(BROKERS) if i != old)
    try:
        index, now = c.controller(via=other)
    except (OSError, StopIteration, ValueError):  # 503 while none is elected; a restart
        return False
    return index != old and now > epoch


def bookie_partitioned(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """A bookie cut from the brokers, not from ZooKeeper (it stays registered)."""
    index = rng.randrange(BOOKIES)
    f = Fault(f"bookie{index} cut from the brokers", duration_s=rng.uniform(1.0, 12.0))
    cut(c.bookie_links[index], f)
    return f


def bookie_cut_from_zookeeper(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """A bookie cut from ZooKeeper only (its links to the brokers intact), for less than its
    session timeout or past it: it keeps serving adds, and registers again (writable) once
    the link heals, on a new session if the old one expired."""
    index = rng.randrange(BOOKIES)
    seconds = rng.choice([rng.uniform(0.5, 1.5), session_cut_s(rng)])
    f = Fault(f"bookie{index} cut from zk", duration_s=seconds)
    cut(c.bookie_zk_links[index], f)
    f.recovered = lambda: c.registered_writable(index)
    return f


def bookie_disk_full(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """One bookie's disk full (the others have room) until the heal deletes the filler;
    recovered once that bookie is registered writable again (its ledgers, a cursor's too,
    can be recovered by the next round only then: a recovery add needs the whole write
    set)."""
    filler = c.disk.path / "filler"
    fill_disk(filler)
    index = c.disk_bookie
    f = Fault(f"bookie{index} disk full", duration_s=rng.uniform(2.0, 6.0))
    f.heals.append(lambda: filler.unlink(missing_ok=True))
    f.recovered = lambda: c.registered_writable(index)
    return f


def slow_bookie(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """A slow disk on one bookie, modelled by delaying every byte of its link (the proxy;
    nothing test-only in the bookie): its answers come ``ms`` late."""
    index = rng.randrange(BOOKIES)
    ms = rng.randrange(100, 600)
    link = c.bookie_links[index]
    link.delay(ms)
    f = Fault(f"bookie{index} slow ({ms} ms)", duration_s=rng.uniform(2.0, 6.0))
    f.heals.append(lambda: link.delay(0))
    return f


def asymmetric(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """One direction of one link cut: a bookie's or the owner's link to ZooKeeper."""
    direction = rng.choice([Direction.TO_TARGET, Direction.FROM_TARGET])
    if rng.random() < 0.5:
        index = rng.randrange(BOOKIES)
        f = Fault(f"bookie{index} link cut {direction.value}", duration_s=rng.uniform(1.0, 12.0))
        cut(c.bookie_links[index], f, direction)
        return f
    owner = c.owner(topic)
    f = Fault(f"owner broker{owner} zk link cut {direction.value}", duration_s=session_cut_s(rng))
    f.expires_session = True
    cut(c.zk_links[owner], f, direction)
    return f


def owner_cut_and_bookie_cut(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """Two at once: the owner cut from ZooKeeper past its session, and a bookie from the
    brokers (the new owner fences and recovers the old ledger without it)."""
    owner = c.owner(topic)
    bookie = rng.randrange(BOOKIES)
    f = Fault(f"owner broker{owner} cut from zk + bookie{bookie} cut")
    f.duration_s = session_cut_s(rng)
    f.expires_session = True
    cut(c.zk_links[owner], f)
    cut(c.bookie_links[bookie], f)
    return f


def client_links_cut(c: FaultCluster, rng: random.Random, topic: str) -> Fault:
    """The clients' links to the owner reset (RST) or cut both ways for a while."""
    owner = c.owner(topic)
    link = c.client_links[owner]
    if rng.random() < 0.5:
        link.reset_connections()
        return Fault(f"client links of broker{owner} reset", duration_s=rng.uniform(0.2, 1.0))
    f = Fault(f"client links of broker{owner} cut", duration_s=rng.uniform(0.5, 4.0))
    cut(link, f)
    return f


SCENARIOS: dict[str, Callable[[FaultCluster, random.Random, str], Fault]] = {
    "controller-partitioned": controller_partitioned,
    "bookie-partitioned": bookie_partitioned,
    "bookie-cut-from-zk": bookie_cut_from_zookeeper,
    "bookie-disk-full": bookie_disk_full,
    "slow-bookie": slow_bookie,
    "asymmetric": asymmetric,
    "owner-and-bookie-cut": owner_cut_and_bookie_cut,
    "client-links-cut": client_links_cut,
}


def until(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end
