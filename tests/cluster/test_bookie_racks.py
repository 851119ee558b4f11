"""Rack placement set through ``magnetar admin bookies set-bookie-rack``, with real
``magnetar bookie`` and ``magnetar broker`` processes:

* used by the ledger client: 4 bookies on two racks, a broker with E=Qw=Qa=2, topics
  written with the official client; every ledger's ensemble (read from ZooKeeper) has one
  bookie on each rack. Without placement by rack a random pair of the four shares a rack
  one time in three, so 20 ledgers all spanning both racks would be chance once in about
  3 000 runs;
* used by the controller's autorecovery as soon as it is set: racks set while every
  bookie is up (no bookie joins after) decide the replacement of a SIGKILLed bookie.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from magnetar.ledger import LedgerClient
from magnetar.ledger.metadata import LEDGERS_PATH, LedgerMetadata, ledger_path
from magnetar.metadata import connect
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess

from .test_cluster_processes import cluster_procs, controller, start_bookies, start_brokers

__all__ = ["cluster_procs"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(240)

TOPICS = 20


def admin(http_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def ensembles(url: str) -> list[tuple[str, ...]]:
    store = await connect(url)
    try:
        names = [n for n in await store.children(LEDGERS_PATH) if n.startswith("L")]
        out = []
        for name in names:
            metadata = LedgerMetadata.from_bytes(
                (await store.get(ledger_path(int(name[1:])))).value
            )
            out.extend(ensemble for _, ensemble in metadata.ensembles)
        return out
    finally:
        await store.close()


def test_racks_set_by_the_cli_spread_every_ensemble(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    bookies = start_bookies(cluster_procs, zookeeper_url, tmp_path, 4)
    broker = BrokerProcess(
        zookeeper_url,
        tmp_path / "broker.log",
        "--ensemble-size", "2", "--write-quorum", "2", "--ack-quorum", "2",
    )  # fmt: skip
    cluster_procs.append(broker)
    broker.start()
    rack_of = {}
    for i, bookie in enumerate(bookies):
        rack = "/region/rack-a" if i < 2 else "rack-b"  # Pulsar's form and a bare name
        group = "default" if i % 2 == 0 else "other"
        done = admin(
            broker.http_url, "bookies", "set-bookie-rack", "-b", bookie.bookie_id,
            "-r", rack, "-g", group, "--hostname", f"host-{i}",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        rack_of[bookie.bookie_id] = rack if rack.startswith("/") else "/" + rack
    done = admin(broker.http_url, "bookies", "racks-placement")
    assert done.returncode == 0, done.stderr
    placement = json.loads(done.stdout)
    assert placement["default"][bookies[0].bookie_id] == {
        "rack": "/region/rack-a",
        "hostname": "host-0",
    }
    assert placement["other"][bookies[3].bookie_id] == {"rack": "/rack-b", "hostname": "host-3"}

    client = pulsar.Client(broker.url, operation_timeout_seconds=30)
    try:
        for i in range(TOPICS):
            producer = client.create_producer(f"persistent://public/default/racks-{i}")
            producer.send(b"x")
            producer.close()
    finally:
        client.close()
    found = asyncio.run(ensembles(zookeeper_url))
    assert len(found) >= TOPICS
    for ensemble in found:
        assert {rack_of[b] for b in ensemble} == {"/region/rack-a", "/rack-b"}, ensemble

    # removed: the bookie is shown nowhere and counts as on the default rack
    done = admin(broker.http_url, "bookies", "delete-bookie-rack", "-b", bookies[0].bookie_id)
    assert done.returncode == 0, done.stderr
    done = admin(broker.http_url, "bookies", "get-bookie-rack", "-b", bookies[0].bookie_id)
    assert done.returncode != 0 and "not found" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    done = admin(broker.http_url, "bookies", "delete-bookie-rack", "-b", bookies[0].bookie_id)
    assert done.returncode != 0 and "not found" in done.stderr, done.stderr
    # expected errors: one line, a non-zero exit, the broker still serving
    for bad in (("-b", bookies[1].bookie_id, "-r", ""), ("-b", bookies[1].bookie_id, "-r", "/")):
        done = admin(broker.http_url, "bookies", "set-bookie-rack", *bad)
        assert done.returncode != 0, done.stdout
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    done = admin(broker.http_url, "bookies", "get-bookie-rack", "-b", bookies[1].bookie_id)
    assert done.returncode == 0 and json.loads(done.stdout)["rack"] == "/region/rack-a"


async def closed_ledger(url: str) -> tuple[int, tuple[str, ...]]:
    """A ledger of 20 entries on two bookies, closed: its id and ensemble."""
    store = await connect(url)
    client = LedgerClient(store)
    try:
        handle = await client.create(2, 2, 2)
        await asyncio.gather(*(handle.add_nowait(b"e-%d" % i) for i in range(20)))
        await handle.close()
        return handle.ledger_id, tuple(handle.metadata.current_ensemble)
    finally:
        await client.close()
        await store.close()


async def ensemble_of(url: str, ledger_id: int) -> tuple[str, ...]:
    store = await connect(url)
    try:
        metadata = LedgerMetadata.from_bytes((await store.get(ledger_path(ledger_id))).value)
        return metadata.current_ensemble
    finally:
        await store.close()


def test_a_rack_set_while_every_bookie_is_up_places_the_next_replica(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    """A closed ledger on bookies ``kept`` and ``lost``; the two spares are ``lo`` and
    ``hi`` (in id order). Racks are set once the controller leads, with all four up:
    ``kept`` and ``lo`` on ``/r1``, ``lost`` and ``hi`` on ``/r2``. ``lost`` is SIGKILLed:
    the controller's replacement must be ``hi``, the only one keeping the ledger over two
    racks. A controller still placing by the racks it read when it won (none) ranks the
    spares alike and takes the first in id order, ``lo``."""
    bookies = start_bookies(cluster_procs, zookeeper_url, tmp_path, 4)
    (broker,) = start_brokers(cluster_procs, zookeeper_url, tmp_path, 1)
    wait_until(lambda: controller(broker), timeout_s=30, what="a controller")
    ledger_id, (kept, lost) = asyncio.run(closed_ledger(zookeeper_url))
    lo, hi = sorted({b.bookie_id for b in bookies} - {kept, lost})
    for bookie, rack in ((kept, "/r1"), (lo, "/r1"), (lost, "/r2"), (hi, "/r2")):
        done = admin(broker.http_url, "bookies", "set-bookie-rack", "-b", bookie, "-r", rack)
        assert done.returncode == 0, done.stderr
    (victim,) = [b for b in bookies if b.bookie_id == lost]
    victim.kill()

    def replaced() -> tuple[str, ...] | None:
        ensemble = asyncio.run(ensemble_of(zookeeper_url, ledger_id))
        return None if lost in ensemble else ensemble

    healed = wait_until(
        replaced, timeout_s=60, interval_s=0.5, what=f"ledger {ledger_id} re-replicated off {lost}"
    )
    assert set(healed) == {kept, hi}, f"replacement on {healed} (/r1: {kept} {lo}; /r2: {hi})"
