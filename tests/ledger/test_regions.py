"""The region-aware placement policy in the ledger client, against real ``magnetar bookie``
processes labelled with ``--rack /region/rack`` on a real ZooKeeper:

* an entry is not confirmed while only one region's bookies stored it (the other region's
  bookie paused with SIGSTOP), and is once that bookie answers — while the same setup
  without region awareness confirms it on the Qa acks of one region;
* with the minimums enforced, losing a whole region fails appends with a clear error
  instead of writing on in one region;
* autorecovery replaces a lost bookie by one that keeps the ensemble over both regions.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.broker.controller import ReplicaPolicy, ReplicaStateMachine, ReplicateFragment
from magnetar.ledger import LedgerClient, LedgerClientConfig, LedgerHandle
from magnetar.ledger.client import bookie_racks
from magnetar.ledger.placement import PlacementPolicy, PlacementUnmet, region_of
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async
from magnetar.testing.bookie import BookieProcess

from .autorecovery_round import controller_round

pytestmark = pytest.mark.timeout(180)

REGION_AWARE = PlacementPolicy(region_aware=True)


@pytest.fixture
async def store(zookeeper_url: str) -> AsyncIterator[MetadataStore]:
    s = await connect(zookeeper_url, session_timeout_s=5)
    yield s
    await s.close()


async def start_racked(
    procs: list[BookieProcess], store: MetadataStore, url: str, base: Path, racks: list[str]
) -> dict[str, BookieProcess]:
    """A bookie per rack of ``racks``; rack → its process."""
    new = {
        rack: BookieProcess(url, base / f"bookie{i}", None, "--rack", rack)
        for i, rack in enumerate(racks)
    }
    for p in new.values():
        p.start()
        procs.append(p)
    for p in new.values():
        await p.wait_registered(store)
    return new


async def stored_on(client: LedgerClient, bookie_id: str, ledger_id: int, entry_id: int) -> bool:
    resp, _ = await client.pool.call(
        bookie_id, Request(op=OpType.READ_ENTRY, ledger_id=ledger_id, entry_id=entry_id)
    )
    return resp.status == Status.OK


@pytest.mark.parametrize("region_aware", [True, False], ids=["region-aware", "rack-aware"])
async def test_acks_of_one_region_do_not_confirm_an_entry(
    store: MetadataStore,
    zookeeper_url: str,
    tmp_path: Path,
    procs: list[BookieProcess],
    region_aware: bool,
) -> None:
    bookies = await start_racked(
        procs, store, zookeeper_url, tmp_path, ["/east/r1", "/east/r2", "/west/r1"]
    )
    policy = PlacementPolicy(region_aware=region_aware)
    client = LedgerClient(
        store, config=LedgerClientConfig(request_timeout_ms=60_000, placement=policy)
    )
    try:
        handle = await client.create(3, 3, 2)  # Qa = 2: the two east bookies could confirm
        ensemble = handle.metadata.current_ensemble
        racks = await client.bookie_racks(ensemble)
        assert {region_of(racks[b]) for b in ensemble} == {"/east", "/west"}
        assert await handle.add(b"both regions up") == 0

        west = bookies["/west/r1"]
        west.signal(signal.SIGSTOP)
        try:
            pending = handle.add_nowait(b"west paused")
            east = [bookies["/east/r1"].bookie_id, bookies["/east/r2"].bookie_id]

            async def east_stored() -> bool:
                return all([await stored_on(client, b, handle.ledger_id, 1) for b in east])

            await wait_until_async(east_stored, timeout_s=30)
            if region_aware:
                # both east bookies acknowledged (stored and journalled): not enough
                await asyncio.sleep(0)  # let the acks' callbacks run
                assert not pending.done()
                assert handle.last_add_confirmed == 0
            else:
                assert await asyncio.wait_for(pending, 30) == 1
        finally:
            west.signal(signal.SIGCONT)
        assert await asyncio.wait_for(pending, 30) == 1
        assert handle.last_add_confirmed == 1
        await handle.close()
    finally:
        await client.close()


async def test_enforced_regions_fail_appends_when_a_region_is_lost(
    store: MetadataStore, zookeeper_url: str, tmp_path: Path, procs: list[BookieProcess]
) -> None:
    bookies = await start_racked(
        procs, store, zookeeper_url, tmp_path, ["/east/r1", "/east/r2", "/west/r1", "/west/r2"]
    )
    policy = PlacementPolicy(region_aware=True, enforce_min=True)
    client = LedgerClient(
        store, config=LedgerClientConfig(request_timeout_ms=10_000, placement=policy)
    )
    try:
        handle = await client.create(2, 2, 2)
        assert await handle.add(b"x") == 0
        for rack in ("/west/r1", "/west/r2"):
            bookies[rack].kill()
        with pytest.raises(PlacementUnmet, match="1 region"):
            await asyncio.wait_for(handle.add(b"y"), 60)

        async def creation_refused() -> bool:
            # Once their sessions expired, and the client's watched registrations heard of
            # it (a notification behind a fresh read of the store), no west bookie is left.
            try:
                created = await client.create(2, 2, 2)
            except PlacementUnmet:
                return True
            await client.delete(created.ledger_id)
            return False

        await wait_until_async(creation_refused, timeout_s=30)
        bookies["/west/r1"].start()  # until a west bookie is back
        await bookies["/west/r1"].wait_registered(store)

        async def created_again() -> LedgerHandle | None:
            # The client hears of the registration by its watch, after the store has it.
            try:
                return await client.create(2, 2, 2)
            except PlacementUnmet:
                return None

        again = await wait_until_async(created_again, timeout_s=30)
        assert await again.add(b"z") == 0
        await again.close()
    finally:
        await client.close()


async def test_autorecovery_keeps_a_ledger_over_both_regions(
    store: MetadataStore, zookeeper_url: str, tmp_path: Path, procs: list[BookieProcess]
) -> None:
    """The west bookie of a ledger placed over two regions is SIGKILLed: the replacement the
    controller's replica state machine picks (racks read from the bookies' registrations, as
    the controller reads them) is the west spare, not one of the east spares, and every
    entry reads back from the healed ensemble."""
    bookies = await start_racked(
        procs,
        store,
        zookeeper_url,
        tmp_path,
        ["/east/r1", "/east/r2", "/east/r3", "/west/r1", "/west/r2"],
    )
    client = LedgerClient(
        store, config=LedgerClientConfig(request_timeout_ms=3_000, placement=REGION_AWARE)
    )
    loop = asyncio.get_running_loop()
    try:
        handle = await client.create(2, 2, 2)
        await asyncio.gather(*(handle.add_nowait(f"e-{i}".encode()) for i in range(50)))
        await handle.close()
        md, version = await client.get_metadata(handle.ledger_id)
        live = await client.available_bookies()
        machine = ReplicaStateMachine(
            1,
            policy=ReplicaPolicy(placement=REGION_AWARE),
            ledgers={handle.ledger_id: (md, version)},
            live_bookies=live,
            racks=await bookie_racks(store, live),
        )
        assert machine.start(int(loop.time() * 1000)) == []
        racks = await client.bookie_racks(live)
        (west,) = [b for b in md.current_ensemble if region_of(racks[b]) == "/west"]
        (spare,) = {bookies["/west/r1"].bookie_id, bookies["/west/r2"].bookie_id} - {west}
        by_id = {p.bookie_id: p for p in bookies.values()}
        by_id[west].kill()
        tasks: list[ReplicateFragment] = []

        async def healthy() -> bool:
            tasks.extend(await controller_round(machine, client))
            return west not in machine.live_bookies and not machine.records

        await wait_until_async(healthy, timeout_s=60, what="the ledger to heal")
        assert [t.target_bookie for t in tasks] == [spare]
        healed, _ = await client.get_metadata(handle.ledger_id)
        assert {region_of(racks[b]) for b in healed.current_ensemble} == {"/east", "/west"}
        reader = await client.open(handle.ledger_id)
        entries = await reader.read(0, 49)
        assert [e.data for e in entries] == [f"e-{i}".encode() for i in range(50)]
    finally:
        await client.close()
