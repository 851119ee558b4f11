"""Bookie processes on a real ZooKeeper, killed with SIGKILL or stopped with SIGSTOP."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.ledger import LedgerClient, LedgerClientConfig, LedgerState
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async
from magnetar.testing.bookie import BookieProcess


def payload(i: int) -> bytes:
    return (b"%08d:" % i) * 12


@pytest.fixture
async def store(zookeeper_url: str) -> AsyncIterator[MetadataStore]:
    s = await connect(zookeeper_url, session_timeout_s=5)
    yield s
    await s.close()


async def start(
    procs: list[BookieProcess],
    store: MetadataStore,
    url: str,
    base: Path,
    n: int,
    *extra_args: str,
) -> list[BookieProcess]:
    new = [
        BookieProcess(url, base / f"bookie{len(procs) + i}", None, *extra_args) for i in range(n)
    ]
    for p in new:
        p.start()
        procs.append(p)
    for p in new:
        await p.wait_registered(store)
    return new


async def test_crash_durability_sigkill_mid_stream(
    store: MetadataStore, zookeeper_url: str, tmp_path: Path, procs: list[BookieProcess]
) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    total = 100_000
    kill_at = rng.randrange(10_000, 90_000)
    # No periodic checkpoint while it runs: one that began while the bookie waited for the
    # client's next window would cover every acknowledged add (its entry logs synced), and
    # the restart would replay nothing, so the journal replay would go untested (seen in the
    # suite: 'replayed 0 entries' at 56 742 acknowledged). 100 000 adds stay well inside
    # the write cache, so none starts for want of room either.
    (bookie,) = await start(
        procs, store, zookeeper_url, tmp_path, 1, "--checkpoint-interval-ms", "600000"
    )
    client = LedgerClient(store, config=LedgerClientConfig(request_timeout_ms=3000))
    h = await client.create(1, 1, 1)
    acked: list[int] = []
    window = 2000
    i = 0
    failed = False
    while i < total and not failed:
        futs = [h.add_nowait(payload(e)) for e in range(i, min(total, i + window))]
        i += len(futs)
        for f in futs:
            try:
                acked.append(await f)
            except Exception:
                failed = True
                break
            if len(acked) == kill_at:
                bookie.signal(signal.SIGKILL)
    assert failed, "the bookie was killed, so some add must have failed"
    assert acked == list(range(len(acked)))
    assert len(acked) >= kill_at
    bookie.proc.wait(10)  # type: ignore[union-attr]
    await client.close()

    restarted = BookieProcess(zookeeper_url, bookie.data_dir, port=bookie.port)
    restarted.log_path = bookie.log_path
    restarted.start()
    procs.append(restarted)
    await restarted.wait_registered(store)
    m = re.findall(r"replayed (\d+) entries from journal", restarted.log())
    assert len(m) == 2 and int(m[-1]) > 0, restarted.log()

    reader_client = LedgerClient(store)
    r = await reader_client.open(h.ledger_id, recovery=True)
    assert r.last_add_confirmed >= acked[-1]
    entries = await r.read(0, acked[-1])
    bad = [e.entry_id for e in entries if e.data != payload(e.entry_id)]
    assert not bad, bad[:10]
    await reader_client.close()


async def test_replication_survives_a_killed_bookie(
    store: MetadataStore, zookeeper_url: str, tmp_path: Path, procs: list[BookieProcess]
) -> None:
    # E=3 needs a replacement outside the ensemble: three bookies plus one spare.
    await start(procs, store, zookeeper_url, tmp_path, 4)
    client = LedgerClient(store, config=LedgerClientConfig(request_timeout_ms=3000))
    h = await client.create(3, 2, 2)
    victim = next(p for p in procs if p.bookie_id in h.metadata.current_ensemble)
    acked: list[int] = []
    total = 20_000
    for start_id in range(0, total, 1000):
        futs = [h.add_nowait(payload(e)) for e in range(start_id, start_id + 1000)]
        if start_id == 8000:
            victim.signal(signal.SIGKILL)
        acked.extend(await asyncio.gather(*futs))
    assert acked == list(range(total))
    assert victim.bookie_id not in h.metadata.current_ensemble
    assert len(h.metadata.ensembles) >= 2
    await h.close()
    other = LedgerClient(store)
    r = await other.open(h.ledger_id)
    assert r.last_add_confirmed == total - 1
    entries = await r.read(0, total - 1)
    assert [e.entry_id for e in entries] == list(range(total))
    assert all(e.data == payload(e.entry_id) for e in entries)
    await other.close()
    await client.close()


WRITER = r"""
import asyncio, sys
from magnetar.metadata import connect
from magnetar.ledger import LedgerClient, LedgerClientConfig
async def main():
    store = await connect(sys.argv[1], session_timeout_s=30)
    client = LedgerClient(store, config=LedgerClientConfig(request_timeout_ms=60000))
    h = await client.create(3, 2, 2)
    print("LEDGER", h.ledger_id, flush=True)
    i = 0
    while True:
        try:
            await asyncio.gather(*(h.add_nowait(b"w%d" % e) for e in range(i, i + 50)))
        except Exception as exc:
            print("ERROR", type(exc).__name__, flush=True)
            return
        i += 50
        print("ACKED", i - 1, flush=True)
asyncio.run(main())
"""


async def test_fencing_old_writer_resumed_after_sigstop(
    store: MetadataStore, zookeeper_url: str, tmp_path: Path, procs: list[BookieProcess]
) -> None:
    await start(procs, store, zookeeper_url, tmp_path, 3)
    out_path = tmp_path / "writer.out"
    with out_path.open("wb") as out:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, zookeeper_url],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        await wait_until_async(
            lambda: out_path.read_text().count("ACKED") >= 20, 30, what="writer progress"
        )
        writer.send_signal(signal.SIGSTOP)
        text = out_path.read_text()
        ledger_id = int(re.search(r"LEDGER (\d+)", text).group(1))  # type: ignore[union-attr]
        acked_before = max(int(x) for x in re.findall(r"ACKED (\d+)", text))

        client = LedgerClient(store)
        r = await client.open(ledger_id, recovery=True)
        assert r.metadata.state == LedgerState.CLOSED
        last = r.last_add_confirmed
        assert last >= acked_before

        writer.send_signal(signal.SIGCONT)
        await wait_until_async(
            lambda: "ERROR" in out_path.read_text(), 30, what="old writer failing"
        )
        assert "ERROR LedgerFenced" in out_path.read_text()
        acked_after = max(int(x) for x in re.findall(r"ACKED (\d+)", out_path.read_text()))
        assert acked_after <= last

        # Every reader sees the same last entry and the same bytes.
        for _ in range(2):
            other = LedgerClient(store)
            again = await other.open(ledger_id)
            assert again.last_add_confirmed == last
            entries = await again.read(0, last)
            assert [e.data for e in entries] == [b"w%d" % e for e in range(last + 1)]
            await other.close()
        await client.close()
    finally:
        writer.send_signal(signal.SIGCONT)
        writer.kill()
        writer.wait(10)
