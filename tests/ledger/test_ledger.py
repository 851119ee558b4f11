"""The ledger client against real bookies on loopback (in-process, embedded store).

Every test runs twice: over TCP (``BookieClient``) and with the bookies as local transports
(``LocalBookieTransport``, the standalone's path): both keep one contract."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.ledger import (
    EntryTooLarge,
    LedgerClient,
    LedgerClientConfig,
    LedgerClosed,
    LedgerFenced,
    LedgerState,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
)
from magnetar.metadata import MetadataStore, connect
from magnetar.testing.wait import wait_until_async


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await connect("memory:")
    yield s
    await s.close()


async def start_bookies(store: MetadataStore, base: Path, n: int, **kw: object) -> list[Bookie]:
    out = []
    for i in range(n):
        b = Bookie(
            BookieConfig(data_dir=base / f"b{i}", port=0, disk_free_min_bytes=0, **kw), store
        )  # type: ignore[arg-type]
        await b.start()
        out.append(b)
    return out


@pytest.fixture
async def bookies(store: MetadataStore, tmp_path: Path) -> AsyncIterator[list[Bookie]]:
    bs = await start_bookies(store, tmp_path, 4, entry_log_size_max_bytes=256 * 1024)
    yield bs
    for b in bs:
        await b.stop()


@pytest.fixture(params=["tcp", "local"])
async def client(
    request: pytest.FixtureRequest, store: MetadataStore, bookies: list[Bookie]
) -> AsyncIterator[LedgerClient]:
    c = LedgerClient(
        store,
        config=LedgerClientConfig(entry_size_max_bytes=100_000, request_timeout_ms=2000),
        local_bookies=bookies if request.param == "local" else (),
    )
    kinds = {type(c.pool.cached(b.bookie_id)).__name__ for b in bookies}
    assert kinds == ({"LocalBookieTransport"} if request.param == "local" else {"NoneType"})
    yield c
    await c.close()


async def test_write_read_close_open(client: LedgerClient) -> None:
    h = await client.create(3, 2, 2)
    ids = await asyncio.gather(*(h.add(f"e{i}".encode()) for i in range(500)))
    assert ids == list(range(500))
    assert h.last_add_confirmed == 499
    entries = await h.read(0, 499)
    assert [e.data for e in entries] == [f"e{i}".encode() for i in range(500)]
    with pytest.raises(NoSuchEntry):
        await h.read(499, 500)
    await h.close()
    with pytest.raises(LedgerClosed):
        await h.add(b"late")
    r = await client.open(h.ledger_id)
    assert r.metadata.state == LedgerState.CLOSED
    assert r.last_add_confirmed == 499
    assert r.metadata.length == sum(len(f"e{i}") for i in range(500))
    assert (await r.read(250)).pop().data == b"e250"


async def test_ledger_ids_are_unique_and_errors_are_typed(
    client: LedgerClient, bookies: list[Bookie]
) -> None:
    hs = [await client.create(2, 2, 1) for _ in range(5)]
    assert len({h.ledger_id for h in hs}) == 5
    with pytest.raises(EntryTooLarge):
        await hs[0].add(b"x" * 100_001)
    with pytest.raises(NotEnoughBookies):
        await client.create(5, 2, 2)
    with pytest.raises(ValueError):
        await client.create(2, 3, 1)
    with pytest.raises(NoSuchLedger):
        await client.open(10**9)
    with pytest.raises(NoSuchLedger):
        await client.delete(10**9)


async def test_ensemble_change_when_a_bookie_stops(
    client: LedgerClient, bookies: list[Bookie]
) -> None:
    h = await client.create(3, 2, 2)
    for i in range(100):
        await h.add(b"%d" % i)
    victim = next(b for b in bookies if b.bookie_id in h.metadata.current_ensemble)
    futs = [h.add_nowait(b"%d" % i) for i in range(100, 300)]
    await victim.stop()
    futs += [h.add_nowait(b"%d" % i) for i in range(300, 400)]
    assert await asyncio.gather(*futs) == list(range(100, 400))
    assert len(h.metadata.ensembles) >= 2
    assert victim.bookie_id not in h.metadata.current_ensemble
    await h.close()
    r = await client.open(h.ledger_id)
    assert [e.data for e in await r.read(0, 399)] == [b"%d" % i for i in range(400)]


async def test_recovery_fences_the_old_writer(client: LedgerClient, store: MetadataStore) -> None:
    h = await client.create(3, 2, 2)
    for i in range(50):
        await h.add(b"%d" % i)
    other = LedgerClient(store)
    r = await other.open(h.ledger_id, recovery=True)
    assert r.metadata.state == LedgerState.CLOSED
    assert r.last_add_confirmed == 49
    with pytest.raises(LedgerFenced):
        await h.add(b"after")
    # Closing the fenced handle agrees with the recovery (same last entry): no error.
    await h.close()
    assert h.metadata.last_entry_id == 49
    r2 = await client.open(h.ledger_id)
    assert r2.last_add_confirmed == 49
    await other.close()


async def test_non_recovery_open_reads_up_to_the_lac(client: LedgerClient) -> None:
    h = await client.create(2, 2, 2)
    for i in range(10):
        await h.add(b"%d" % i)
    r = await client.open(h.ledger_id, recovery=False)
    # The last add's confirmation travels with the next add: the bookies know 8.
    assert r.last_add_confirmed == 8
    assert len(await r.read(0, 8)) == 9
    await h.add(b"10")  # still writable: nothing was fenced
    await h.close()


async def test_delete_and_garbage_collection_shrink_disk(
    client: LedgerClient, bookies: list[Bookie], tmp_path: Path
) -> None:
    def disk_bytes() -> int:
        return sum(p.stat().st_size for p in tmp_path.rglob("entrylogs/*.log"))

    keep = await client.create(2, 2, 2)
    doomed = await client.create(2, 2, 2)
    payload = b"g" * 4096
    futs = []
    for i in range(300):
        futs.append(doomed.add_nowait(payload))
        if i % 10 == 0:
            futs.append(keep.add_nowait(b"k%d" % i))
    await asyncio.gather(*futs)
    await doomed.close()
    await keep.close()
    for b in bookies:
        await b.checkpoint()
    before = disk_bytes()
    assert before > 300 * 4096 * 2
    await client.delete(doomed.ledger_id)
    for b in bookies:
        await b.collect_garbage()
    after = disk_bytes()
    assert after < before / 10
    r = await client.open(keep.ledger_id)
    assert [e.data for e in await r.read(0, 29)] == [b"k%d" % i for i in range(0, 300, 10)]


@pytest.mark.parametrize("write_quorum", [3, 2])
async def test_ledgers_are_read_in_runs(
    client: LedgerClient, bookies: list[Bookie], write_quorum: int
) -> None:
    """A range comes in a few READ_ENTRIES (one per class of entries sharing a write set),
    striped or not, across an ensemble change and with a bookie of the first fragment
    gone."""
    h = await client.create(3, write_quorum, 2)
    data = [b"%d:" % i + b"r" * (i * 997 % 30_000) for i in range(600)]
    assert await asyncio.gather(*(h.add(d) for d in data[:300])) == list(range(300))
    victim = next(b for b in bookies if b.bookie_id == h.metadata.current_ensemble[0])
    await victim.stop()
    # The add that finds the victim gone starts the ensemble change; with Qw = E the other
    # two acknowledge it (Qa = 2) without waiting for the change, so wait for the change
    # before the rest: they are to make a second fragment.
    assert await h.add(data[300]) == 300
    await wait_until_async(
        lambda: len(h.metadata.ensembles) == 2, timeout_s=30, what="the ensemble change"
    )
    assert await asyncio.gather(*(h.add(d) for d in data[301:])) == list(range(301, 600))
    assert len(h.metadata.ensembles) == 2
    await h.close()
    r = await client.open(h.ledger_id)
    before = client.pool.next_request_id()
    assert [e.data for e in await r.read(0, 599)] == data
    # ~8.7 MB in runs of at most 1 MiB: about a dozen requests, not 600.
    assert client.pool.next_request_id() - before < 40
    assert [e.data for e in await r.read(123, 456)] == data[123:457]


async def test_a_damaged_copy_in_a_run_is_read_from_another_replica(
    client: LedgerClient, bookies: list[Bookie], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = await client.create(3, 3, 3)
    data = [b"entry-%04d-" % i + b"d" * 200 for i in range(100)]
    await asyncio.gather(*(h.add(d) for d in data))
    await h.close()
    first_replica = h.metadata.ensemble_for(17)[h.metadata.write_set(17)[0]]
    damaged = next(b for b in bookies if b.bookie_id == first_replica)
    await damaged.checkpoint()
    index = bookies.index(damaged)
    hits = 0
    for log_file in (tmp_path / f"b{index}").rglob("entrylogs/*.log"):
        raw = log_file.read_bytes()
        if b"entry-0017-" in raw:
            log_file.write_bytes(raw.replace(b"entry-0017-", b"entry-XXXX-"))
            hits += 1
    assert hits == 1
    r = await client.open(h.ledger_id)
    assert [e.data for e in await r.read(0, 99)] == data
    assert "checksum mismatch" in caplog.text
