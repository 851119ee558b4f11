"""``magnetar standalone --metadata-url zk://…`` with E/Qw/Qa: its metadata in ZooKeeper,
its ledgers spread over its own bookie and ``magnetar bookie`` processes registered there;
the official client produces and consumes through it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.ledger.metadata import LEDGERS_PATH, LedgerMetadata, ledger_path
from magnetar.metadata import connect
from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.bookie import BookieProcess

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def bookies(zookeeper_url: str, tmp_path: Path) -> Iterator[list[BookieProcess]]:
    started = [BookieProcess(zookeeper_url, tmp_path / f"bookie{i}") for i in range(2)]
    try:
        for b in started:
            b.start()
        for b in started:
            wait_until(lambda b=b: " ready" in b.log(), timeout_s=30, what=f"bookie {b.bookie_id}")
        yield started
    finally:
        for b in started:
            b.kill()


async def ledgers_of(url: str) -> list[LedgerMetadata]:
    store = await connect(url)
    try:
        names = [n for n in await store.children(LEDGERS_PATH) if n.startswith("L")]
        return [
            LedgerMetadata.from_bytes((await store.get(ledger_path(int(n[1:])))).value)
            for n in names
        ]
    finally:
        await store.close()


def test_standalone_on_zookeeper_writes_over_three_bookies(
    zookeeper_url: str, tmp_path: Path, bookies: list[BookieProcess]
) -> None:
    quorums = ("--ensemble-size", "3", "--write-quorum", "2", "--ack-quorum", "2")
    with StandaloneProcess(tmp_path / "sa", "--metadata-url", zookeeper_url, *quorums) as node:
        client = pulsar.Client(node.url, operation_timeout_seconds=30)
        try:
            topic = "persistent://public/default/on-zookeeper"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            for i in range(30):
                producer.send(f"m-{i}".encode())
            got = [consumer.receive(timeout_millis=30_000).data().decode() for _ in range(30)]
            assert got == [f"m-{i}" for i in range(30)]
        finally:
            client.close()
        ledgers = asyncio.run(ledgers_of(zookeeper_url))
    assert ledgers, "no ledger in ZooKeeper"
    ensemble_bookies = {b for m in ledgers for _, ensemble in m.ensembles for b in ensemble}
    assert all((m.ensemble_size, m.write_quorum, m.ack_quorum) == (3, 2, 2) for m in ledgers)
    assert {b.bookie_id for b in bookies} <= ensemble_bookies


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ensemble-size", "2", "--write-quorum", "2", "--ack-quorum", "2"], "needs other"),
        (["--ensemble-size", "2", "--write-quorum", "3"], "--ensemble-size >= --write-quorum"),
        (["--metadata-url", "sqlite:///tmp/x.db"], "not a ZooKeeper URL"),
    ],
)
def test_settings_that_cannot_work_are_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir",
         str(tmp_path / "d"), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
