"""The managed ledger over real bookies (in this process, on loopback TCP, journals on disk)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct

import pytest

from magnetar.common.clock import ManualClock
from magnetar.common.errors import MagnetarError, ProtocolError
from magnetar.ledger import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger.config import BacklogQuotaPolicy, ManagedLedgerConfig
from magnetar.managed_ledger.errors import (
    BacklogQuotaExceeded,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
)
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.metadata_layout import (
    CursorInfo,
    ManagedLedgerInfo,
    cursor_path,
    ledger_path,
)
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.state import State
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.testing import wait_until_async

from .conftest import Cluster, try_add

NAME = "public/default/persistent/t1"


async def open_ml(cluster: Cluster, **cfg: object) -> ManagedLedger:
    clock = cfg.pop("clock", None)
    config = ManagedLedgerConfig(**cfg)  # type: ignore[arg-type]
    return await ManagedLedger.open(
        NAME,
        storage=cluster.storage,
        store=cluster.store,
        config=config,
        clock=clock,  # type: ignore[arg-type]
        background=False,
    )


async def stored_ledger_ids(cluster: Cluster) -> list[int]:
    got = await cluster.store.get(ledger_path(NAME))
    return [s.ledger_id for s in ManagedLedgerInfo.decode(got.value).ledgers]


async def test_append_read_across_rollovers_and_reopen(cluster: Cluster) -> None:
    ml = await open_ml(cluster, ledger_entries_max=7, cache_size_max_bytes=0)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = await asyncio.gather(*(ml.add_entry(b"m%d" % i) for i in range(40)))
    assert positions == sorted(positions)
    assert len({p.ledger_id for p in positions}) == 6  # 40 entries, 7 per ledger
    assert await stored_ledger_ids(cluster) == ml.ledger_ids()
    got = await cursor.read_entries(100)  # cache disabled: every read goes to bookies
    assert [e.data for e in got] == [b"m%d" % i for i in range(40)]
    assert [e.position for e in got] == positions
    assert await cursor.read_entries(10) == []
    await ml.close()

    again = await open_ml(cluster)
    assert again.last_confirmed == positions[-1]
    c2 = again.cursors["sub"]
    assert c2.backlog_entries == 40
    data = [e.data for e in await c2.read_entries(100)]
    assert data == [b"m%d" % i for i in range(40)]
    p = await again.add_entry(b"after")
    assert p > positions[-1]
    await again.close()


async def test_reader_at_the_end_parks_until_an_entry_arrives(cluster: Cluster) -> None:
    ml = await open_ml(cluster)
    cursor = await ml.open_cursor("tail")
    reader = asyncio.create_task(cursor.read_entries_or_wait(10))
    for _ in range(20):
        await asyncio.sleep(0)  # let the reader reach its park; nothing to wait for
    assert not reader.done()
    pos = await ml.add_entry(b"wake")
    got = await asyncio.wait_for(reader, 10)
    assert [(e.position, e.data) for e in got] == [(pos, b"wake")]
    assert ml.cache.hits >= 1  # a caught-up reader is served from memory
    await ml.close()


async def test_a_callback_taken_back_is_not_called_and_not_kept(cluster: Cluster) -> None:
    """A reader closed while parked takes its :meth:`call_on_append` back: it is not called
    and the idle log keeps nothing of it; taking back twice, or one never given, is a no-op."""
    ml = await open_ml(cluster)
    kept: list[bool] = []
    taken_back: list[bool] = []
    for _ in range(1000):
        ml.call_on_append(taken_back.append)
        ml.cancel_on_append(taken_back.append)
    ml.cancel_on_append(taken_back.append)
    ml.call_on_append(kept.append)
    assert ml._append_callbacks == [kept.append]
    await ml.add_entry(b"x")
    await asyncio.sleep(0)
    assert (kept, taken_back) == ([True], [])
    await ml.close()


async def test_second_owner_fences_the_first(cluster: Cluster) -> None:
    first = await open_ml(cluster)
    acked = [await first.add_entry(b"a%d" % i) for i in range(5)]
    other_client = LedgerClient(cluster.store)
    try:
        second = await ManagedLedger.open(
            NAME,
            storage=LedgerClientStorage(other_client),
            store=cluster.store,
            background=False,
        )
        with pytest.raises(ManagedLedgerFenced):
            await first.add_entry(b"diverge")
        with pytest.raises(ManagedLedgerFenced):
            await first.add_entry(b"again")
        assert first.is_fenced
        p = await second.add_entry(b"b0")
        cursor = await second.open_cursor("check", earliest=True)
        data = [e.data for e in await cursor.read_entries(100)]
        assert data == [b"a%d" % i for i in range(5)] + [b"b0"]
        assert p > acked[-1]
        await second.close()
    finally:
        await first.close()
        await other_client.close()


async def test_two_openers_of_a_new_managed_ledger_the_later_takes_over(cluster: Cluster) -> None:
    # Both find no node and create a first ledger; one creates the node with it, the other
    # deletes its ledger and takes the created one over (fencing it), as a second opener.
    other_client = LedgerClient(cluster.store)
    opened: list[ManagedLedger] = []
    try:
        for ml in await asyncio.gather(
            open_ml(cluster),
            ManagedLedger.open(
                NAME,
                storage=LedgerClientStorage(other_client),
                store=cluster.store,
                background=False,
            ),
        ):
            opened.append(ml)
        created = [ml for ml in opened if ml.created]
        taken = [ml for ml in opened if not ml.created]
        assert len(created) == 1 and len(taken) == 1
        stored = await stored_ledger_ids(cluster)
        assert stored == taken[0].ledger_ids() and len(stored) == 2
        assert stored[0] == created[0].ledger_ids()[0]
        with pytest.raises(ManagedLedgerFenced):
            await created[0].add_entry(b"fenced")
        assert await taken[0].add_entry(b"b0") > Position(stored[0], -1)
        ledgers = set(await cluster.client.list_ledgers())
        assert ledgers == set(stored)  # the loser's first ledger is gone
    finally:
        for ml in opened:
            await ml.close()
        await other_client.close()


async def test_cursor_state_survives_a_crash_up_to_the_last_persist(cluster: Cluster) -> None:
    ml = await open_ml(cluster, ledger_entries_max=10)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"%d" % i, messages=3) for i in range(30)]
    for p in positions[:12]:
        cursor.ack(p)
    for p in positions[15:20]:
        cursor.ack(p)
    cursor.ack_batch_indexes(positions[20], 3, [0, 2])
    await cursor.persist()
    cursor.ack(positions[12])  # not persisted: may be redelivered after the crash
    # "crash": abandon the instance without closing; a new owner opens the ledger
    other_client = LedgerClient(cluster.store)
    try:
        ml2 = await ManagedLedger.open(
            NAME, storage=LedgerClientStorage(other_client), store=cluster.store, background=False
        )
        c2 = ml2.cursors["sub"]
        assert c2.mark_delete_position == positions[11]
        assert all(c2.state.is_acked(p) for p in positions[15:20])
        assert not c2.state.is_acked(positions[12])
        assert c2.state.batch_ack_set(positions[20]) == [0b010]
        assert c2.backlog_entries == 30 - 12 - 5
        # 13 whole unacked entries of 3 messages, minus 2 acked messages of the batch
        assert c2.backlog_messages == 13 * 3 - 2
        got = [e.position for e in await c2.read_entries(100)]
        assert got == positions[12:15] + positions[20:]
        await ml2.close()
    finally:
        await other_client.close()
        await ml.close()


async def test_cursor_persists_write_its_metadata_node_once_per_cursor_ledger(
    cluster: Cluster,
) -> None:
    ml = await open_ml(cluster, cursor_ledger_entries_max=3)
    cursor = await ml.open_cursor("sub", earliest=True)
    path = cursor_path(NAME, "sub")
    positions = [await ml.add_entry(b"%d" % i) for i in range(10)]
    versions = []
    for p in positions[:6]:
        cursor.ack(p)
        await cursor.persist()
        versions.append((await cluster.store.get(path)).stat.version)
    # the node changes when a ledger starts (persists 1 and 4), not on the snapshots between
    assert versions[0] == versions[1] == versions[2] < versions[3] == versions[4] == versions[5]
    node = CursorInfo.decode((await cluster.store.get(path)).value)
    assert node.mark_delete == positions[3]  # the new ledger's first snapshot
    # "crash": a new owner resumes from the ledger's newest snapshot, past the node's
    other_client = LedgerClient(cluster.store)
    try:
        ml2 = await ManagedLedger.open(
            NAME, storage=LedgerClientStorage(other_client), store=cluster.store, background=False
        )
        assert ml2.cursors["sub"].mark_delete_position == positions[5]
        # the previous owner's next persist finds its cursor ledger fenced
        cursor.ack(positions[6])
        with pytest.raises(ManagedLedgerFenced):
            await cursor.persist()
        await ml2.close()
    finally:
        await other_client.close()
        with contextlib.suppress(ManagedLedgerError):
            await ml.close()


async def test_trim_deletes_exactly_the_consumed_ledgers(cluster: Cluster) -> None:
    ml = await open_ml(cluster, ledger_entries_max=5)
    fast = await ml.open_cursor("fast", earliest=True)
    slow = await ml.open_cursor("slow", earliest=True)
    reader = await ml.open_cursor("reader", earliest=True, durable=False)
    positions = [await ml.add_entry(b"x") for _ in range(23)]  # ledgers of 5: L0..L4
    ledgers = ml.ledger_ids()
    fast.ack_cumulative(positions[-1])
    slow.ack_cumulative(positions[11])  # inside the third ledger
    await ml.persist_cursors()
    cursor_ledgers = {c._ledger.ledger_id for c in (fast, slow) if c._ledger is not None}
    deleted = await ml.trim()
    assert deleted == ledgers[:2]
    assert ml.ledger_ids() == ledgers[2:]
    assert await stored_ledger_ids(cluster) == ledgers[2:]
    # the ledger client and the bookies agree: only what is needed is left
    assert set(await cluster.client.list_ledgers()) == set(ledgers[2:]) | cursor_ledgers
    await cluster.collect_garbage()
    assert cluster.bookie_ledgers() == set(ledgers[2:]) | cursor_ledgers
    # the non-durable reader did not hold trimming back and moved to the log's start
    assert reader.read_position == Position(ledgers[2], 0)
    assert slow.backlog_entries == 23 - 12
    await ml.close()


async def test_consumed_ledgers_are_trimmed_while_no_bookie_takes_writes(
    cluster: Cluster,
) -> None:
    """Every bookie read-only (their disks full): the cursor's position cannot be stored,
    and the maintenance round still trims the ledgers it consumed, which is how the disks
    get room again. Before, the failed persist ended the round first, every round, and a
    standalone filled to the threshold stayed read-only after its topics were drained."""
    ml = await open_ml(cluster, ledger_entries_max=5)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"x") for _ in range(23)]  # ledgers of 5: L0..L4
    ledgers = ml.ledger_ids()
    await ml.persist_cursors()
    for bookie in cluster.bookies:
        await bookie.set_readonly(True)
    try:
        cursor.ack_cumulative(positions[-1])
        with pytest.raises(MagnetarError):
            await ml.maintain(force=True)
        assert not cursor.persisted
        assert ml.ledger_ids() == ledgers[-1:]
        assert await stored_ledger_ids(cluster) == ledgers[-1:]
    finally:
        for bookie in cluster.bookies:
            await bookie.set_readonly(False)
    await ml.persist_cursors()
    assert cursor.persisted
    await ml.close()


async def test_a_maintenance_failure_is_logged_once_while_it_lasts(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A round fails every second while no bookie takes writes: one warning for it (a line
    per topic per second filled the log of a standalone with a full disk), and one line
    when a round works again."""
    clock = ManualClock()
    ml = await ManagedLedger.open(
        NAME, storage=cluster.storage, store=cluster.store, config=ManagedLedgerConfig(),
        clock=clock,
    )  # fmt: skip
    caplog.set_level(logging.INFO, logger="magnetar.managed_ledger.maintainer")
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"x") for _ in range(3)]
    for bookie in cluster.bookies:
        await bookie.set_readonly(True)

    def lines(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if text in r.getMessage()]

    async def ack_and_tick(position: Position) -> None:
        cursor.ack_cumulative(position)
        await wait_until_async(lambda: clock.sleepers == 1, what="the maintainer asleep")
        clock.advance(1.0)
        await wait_until_async(lambda: clock.sleepers == 1, what="its round done")

    try:
        for position in positions:
            await ack_and_tick(position)
        assert len(lines("maintenance failed")) == 1
    finally:
        for bookie in cluster.bookies:
            await bookie.set_readonly(False)
    cursor.ack_cumulative(positions[-1])
    clock.advance(1.0)
    await wait_until_async(lambda: lines("maintenance works again"), what="the line")
    assert len(lines("maintenance failed")) == 1
    await ml.close()


async def test_retention_keeps_consumed_ledgers_by_time_and_size(cluster: Cluster) -> None:
    clock = ManualClock()
    ml = await open_ml(
        cluster,
        clock=clock,
        ledger_entries_max=4,
        retention_time_ms=60_000,
        retention_size_bytes=-1,
    )
    cursor = await ml.open_cursor("sub", earliest=True)
    for _ in range(12):
        await ml.add_entry(b"y" * 10)
    cursor.clear_backlog()
    assert await ml.trim() == []  # consumed, but younger than the retention time
    clock.advance(61)
    ledgers = ml.ledger_ids()
    assert await ml.trim() == ledgers[:-1]
    await ml.close()


async def test_ttl_moves_cursors_past_old_entries(cluster: Cluster) -> None:
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock, ledger_entries_max=3, message_ttl_ms=10_000)
    cursor = await ml.open_cursor("sub", earliest=True)
    old = [await ml.add_entry(b"old") for _ in range(6)]
    clock.advance(11)
    new = [await ml.add_entry(b"new") for _ in range(2)]
    await ml.apply_ttl()
    assert cursor.mark_delete_position >= old[-1]
    assert [e.position for e in await cursor.read_entries(10)] == new
    await ml.close()


async def test_ttl_expires_entries_inside_the_open_ledger_by_publish_time(
    cluster: Cluster,
) -> None:
    """One ledger that keeps growing: TTL must not wait for it to close."""
    clock = ManualClock()

    def publish_time(data: bytes) -> int:
        if not data.startswith(b"T"):
            raise ProtocolError("no publish time")
        return int(struct.unpack(">Q", data[1:9])[0])

    def entry(publish_time_ms: int) -> bytes:
        return b"T" + struct.pack(">Q", publish_time_ms)

    ml = await ManagedLedger.open(
        NAME,
        storage=cluster.storage,
        store=cluster.store,
        config=ManagedLedgerConfig(message_ttl_ms=3_000, cache_size_max_bytes=0),
        clock=clock,
        background=False,
        publish_time_of=publish_time,
    )
    slow = await ml.open_cursor("slow", earliest=True)
    positions = []
    for _ in range(20):  # one entry every 500 ms, from t=0 to t=9.5 s
        positions.append(await ml.add_entry(entry(clock.now_ms())))
        clock.advance(0.5)
    fast = await ml.open_cursor("fast", earliest=True)
    fast.ack_cumulative(positions[15])
    # t=10 s: entries published before t=7 s (0..13) are expired
    await ml.apply_ttl()
    assert len(ml.ledger_ids()) == 1
    assert slow.mark_delete_position == positions[13]
    assert fast.mark_delete_position == positions[15]  # never moved backwards
    assert [e.position for e in await slow.read_entries(100)] == positions[14:]
    await ml.apply_ttl()  # nothing new expired: no change
    assert slow.mark_delete_position == positions[13]
    # an entry without a readable publish time counts as not expired (and breaks nothing)
    garbage = await ml.add_entry(b"garbage")
    clock.advance(1)
    later = await ml.add_entry(entry(clock.now_ms()))
    await ml.apply_ttl()  # t=11 s: 14 and 15 (published at 7 and 7.5 s) expire
    assert slow.mark_delete_position == positions[15]
    # once the ledger's last append is older than the TTL, all of it expires, unread
    clock.advance(60)
    await ml.apply_ttl()
    assert slow.mark_delete_position == later
    assert garbage < later
    await ml.close()


async def test_backlog_quota_rejects_producers_or_evicts(cluster: Cluster) -> None:
    ml = await open_ml(cluster, ledger_entries_max=4, backlog_quota_size_bytes=50)
    await ml.open_cursor("sub", earliest=True)
    for _ in range(10):
        await ml.add_entry(b"z" * 10)
    ml.apply_backlog_quota()
    with pytest.raises(BacklogQuotaExceeded):
        await ml.add_entry(b"rejected")
    await ml.close()

    ml = await open_ml(
        cluster,
        ledger_entries_max=4,
        backlog_quota_size_bytes=50,
        backlog_quota_policy=BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION,
    )
    cursor = ml.cursors["sub"]
    ml.apply_backlog_quota()
    assert ml.backlog_size_bytes(cursor) <= 50
    await ml.add_entry(b"accepted")
    await ml.close()


async def test_reset_to_publish_time(cluster: Cluster) -> None:
    ml = await open_ml(cluster, ledger_entries_max=6)
    positions = [await ml.add_entry(struct.pack(">Q", 1000 + 10 * i)) for i in range(25)]
    cursor = await ml.open_cursor("sub")

    def publish_time(data: bytes) -> int:
        return int(struct.unpack(">Q", data[:8])[0])

    pos = await cursor.reset_to_publish_time(1095, publish_time)
    assert pos == positions[10]
    assert (await cursor.read_entries(1))[0].position == positions[10]
    assert cursor.mark_delete_position == positions[9]
    assert await ml.find_position_by_publish_time(10**9, publish_time) == ml.ledgers.end_position
    await ml.close()


async def test_cancelled_reads_skip_nothing(cluster: Cluster) -> None:
    """A consumer's timeout may cancel a read between bookie round trips; the entries it
    did not return must come back on the next read."""
    ml = await open_ml(cluster, ledger_entries_max=10, cache_size_max_bytes=0)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = await asyncio.gather(*(ml.add_entry(b"%d" % i) for i in range(60)))
    seen: list[Position] = []
    cancelled = 0
    while len(seen) < len(positions):
        task = asyncio.create_task(cursor.read_entries(60))
        for _ in range(cancelled % 7):
            await asyncio.sleep(0)
        if cancelled < 20 and not task.done():
            task.cancel()
            cancelled += 1
            with contextlib.suppress(asyncio.CancelledError):
                seen.extend(e.position for e in await task)
            continue
        seen.extend(e.position for e in await task)
    assert cancelled > 0
    assert seen == positions
    await ml.close()


async def test_reads_skip_individually_acknowledged_entries_and_only_those(
    cluster: Cluster,
) -> None:
    """A read returns the run minus what is acknowledged: entries at or before the
    mark-delete position and individually acknowledged ones, whether the set of those is
    empty (no check per entry) or not."""
    ml = await open_ml(cluster)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"m%d" % i) for i in range(10)]
    assert [e.position for e in await cursor.read_entries(100)] == positions
    cursor.ack(positions[3])
    cursor.ack(positions[5])
    cursor.ack_cumulative(positions[1])
    cursor.rewind()
    got = [e.position for e in await cursor.read_entries(100)]
    assert got == [p for i, p in enumerate(positions) if i not in (0, 1, 3, 5)]
    cursor.ack_cumulative(positions[9])  # empties the individually acknowledged set
    more = [await ml.add_entry(b"n%d" % i) for i in range(3)]
    cursor.rewind()
    assert [e.position for e in await cursor.read_entries(100)] == more
    await ml.close()


async def test_an_entry_acknowledged_while_its_read_is_in_flight_is_not_returned(
    cluster: Cluster,
) -> None:
    """The check that skips per-entry lookups is made after the read's await: an ack that
    lands meanwhile still removes its entry from the result."""
    ml = await open_ml(cluster, cache_size_max_bytes=0)  # reads go to the bookies
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"m%d" % i) for i in range(6)]
    read = asyncio.get_running_loop().create_task(cursor.read_entries(100))
    await asyncio.sleep(0)  # the read is waiting for the bookie now
    assert not read.done()
    cursor.ack(positions[4])
    got = [e.position for e in await read]
    assert got == [p for i, p in enumerate(positions) if i != 4]
    await ml.close()


async def test_read_entries_leave_the_cache_as_new_ones_come(cluster: Cluster) -> None:
    """No maintenance round needed: each append moves the cache's floor to the slowest
    reader, and the inserts after it drop what is below; what a reader has not read stays."""
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock)
    fast = await ml.open_cursor("fast")
    slow = await ml.open_cursor("slow")
    first = [await ml.add_entry(b"a" * 100) for _ in range(50)]
    assert len(await fast.read_entries(50)) == 50
    assert len(await slow.read_entries(20)) == 20
    for _ in range(50):
        await ml.add_entry(b"b" * 100)
    # read by both: gone; read by one only, or by none: kept
    assert all(ml.cache.get(p) is None for p in first[:20])
    assert all(ml.cache.get(p) is not None for p in first[20:])
    assert len(ml.cache) == 80
    assert len(await slow.read_entries(100)) == 80
    await ml.add_entry(b"c" * 100)
    assert all(ml.cache.get(p) is None for p in first[20:22])
    await ml.close()


async def test_an_idle_topics_cache_empties_by_age(cluster: Cluster) -> None:
    """Entries nobody reads (a backlog, a consumer gone) do not stay cached for good: the
    maintenance rounds drop what is older than ``cache_eviction_age_ms``, and nothing
    younger. The entries are still read, from the bookies."""
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock, cache_eviction_age_ms=1000)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"z" * 100) for _ in range(20)]
    assert len(ml.cache) == 20
    await ml.maintain(force=True)
    clock.advance(0.5)
    await ml.maintain(force=True)
    assert len(ml.cache) == 20  # half a second old: kept
    clock.advance(0.5)
    await ml.maintain(force=True)
    assert len(ml.cache) == 0 and ml.cache.size_bytes == 0
    assert [e.position for e in await cursor.read_entries(20)] == positions
    await ml.close()


async def test_an_idle_ledger_rolls_over_so_consumed_entries_are_trimmed(
    cluster: Cluster,
) -> None:
    """A topic that stops taking appends does not keep its consumed ledger open (and its
    entries in the bookies' and the broker's memory) until the age limit: after
    ``ledger_inactive_rollover_ms`` maintenance starts a new, empty ledger and trimming
    removes the old one. An empty ledger is never rolled for inactivity."""
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock, ledger_inactive_rollover_ms=10_000)
    cursor = await ml.open_cursor("sub", earliest=True)
    for _ in range(5):
        await ml.add_entry(b"q" * 10)
    cursor.ack_cumulative((await cursor.read_entries(5))[-1].position)
    first = ml.ledger_ids()
    assert len(first) == 1
    clock.advance(9)
    await ml.maintain(force=True)
    await wait_rolled(ml)
    assert ml.ledger_ids() == first  # active 9 s ago: kept
    clock.advance(1)
    await ml.maintain(force=True)
    await wait_rolled(ml)
    await ml.maintain(force=True)  # trims the consumed ledger
    rolled = ml.ledger_ids()
    assert len(rolled) == 1 and rolled != first
    await cluster.collect_garbage()
    assert first[0] not in cluster.bookie_ledgers()
    clock.advance(60)
    await ml.maintain(force=True)
    await wait_rolled(ml)
    assert ml.ledger_ids() == rolled  # empty: not rolled again
    position = await ml.add_entry(b"after")
    assert position.ledger_id == rolled[0]
    assert [e.position for e in await cursor.read_entries(5)] == [position]
    await ml.close()


async def wait_rolled(ml: ManagedLedger) -> None:
    """Until a rollover maintenance requested (if any) is done."""
    await ml.adds.drain()


async def test_a_rollover_whose_close_fails_leaves_no_ledger_behind(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollover creates the next ledger while the current one closes. When the close fails
    (here its metadata write), the rollover fails, and the ledger created for it is deleted:
    the store ends up holding only the ledgers the managed ledger lists."""
    ml = await open_ml(cluster, ledger_entries_max=3, write_retry_backoff_min_ms=10)
    first = [await ml.add_entry(b"m%d" % i) for i in range(3)]
    full = first[0].ledger_id
    real_close = LedgerHandle.close

    async def close_failing_once(handle: LedgerHandle) -> None:
        if handle.ledger_id == full and not failed:
            failed.append(handle.ledger_id)
            raise OSError("metadata store unavailable")
        await real_close(handle)

    failed: list[int] = []
    monkeypatch.setattr(LedgerHandle, "close", close_failing_once)
    with pytest.raises(ManagedLedgerError, match="closing ledger"):
        await ml.add_entry(b"refused")  # the full ledger's rollover fails
    assert failed == [full]
    after = await wait_until_async(
        lambda: try_add(ml, b"after"), timeout_s=10, what="an add once closing works"
    )
    assert after.ledger_id > full
    await wait_until_async(
        lambda: _ledgers_match(cluster, ml), timeout_s=10, what="no ledger left behind"
    )
    await ml.close()


async def test_every_entry_of_a_ledger_whose_close_failed_stays_readable(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger whose close failed still says OPEN. Opened for reading apart from its
    writer, its end is the last confirmation the bookies heard, one entry short of what its
    writer confirmed (that confirmation rides on the next add, which never came): a reader
    was refused the last acknowledged entry. Its entries are read through its writer until
    it is closed."""
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock, ledger_entries_max=3, write_retry_backoff_min_ms=10)
    written = [await ml.add_entry(b"m%d" % i) for i in range(3)]
    full = written[0].ledger_id
    real_close = LedgerHandle.close

    async def close_failing(handle: LedgerHandle) -> None:
        if handle.ledger_id == full:
            raise OSError("metadata store unavailable")
        await real_close(handle)

    monkeypatch.setattr(LedgerHandle, "close", close_failing)
    with pytest.raises(ManagedLedgerError, match="closing ledger"):
        await ml.add_entry(b"refused")  # the full ledger's rollover fails
    assert ml.writer is None and ml.rollover.unclosed is not None
    ml.cache.clear()  # from storage, not memory
    cursor = await ml.open_cursor("sub", earliest=True)
    assert [e.position for e in await cursor.read_entries(3)] == written
    monkeypatch.setattr(LedgerHandle, "close", real_close)
    await ml.close()


async def _ledgers_match(cluster: Cluster, ml: ManagedLedger) -> bool:
    return (
        await cluster.client.list_ledgers() == ml.ledger_ids() == await stored_ledger_ids(cluster)
    )


async def test_a_young_ledger_takes_more_than_its_entry_count_until_its_minimum_age(
    cluster: Cluster,
) -> None:
    """Pulsar's minimum rollover time: a full ledger younger than ``ledger_age_min_ms``
    keeps taking appends; the first append after that age goes to a new ledger."""
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock, ledger_entries_max=3, ledger_age_min_ms=10_000)
    young = [await ml.add_entry(b"m%d" % i) for i in range(8)]
    assert {p.ledger_id for p in young} == {young[0].ledger_id}
    clock.advance(10)
    later = await ml.add_entry(b"later")
    assert later.ledger_id > young[0].ledger_id and later.entry_id == 0
    assert (
        await stored_ledger_ids(cluster) == ml.ledger_ids() == [young[0].ledger_id, later.ledger_id]
    )


async def test_reads_are_capped_in_bytes_by_the_average_entry_size(cluster: Cluster) -> None:
    """``read_runs(max_entries, max_bytes)`` (Pulsar's ``dispatcherMaxReadSizeBytes``) asks
    each ledger for as many entries as fit by its average size, at least one; and a catch-up
    read's read-ahead stops at ``read_ahead_bytes_max``, so a backlog of large entries is not
    read into memory a hundred at a time."""
    clock = ManualClock()
    ml = await open_ml(cluster, clock=clock, cache_eviction_age_ms=1000, read_ahead_bytes_max=3_000)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(bytes([i]) * 1000) for i in range(10)]
    await ml.maintain(force=True)
    clock.advance(1)
    await ml.maintain(force=True)
    assert len(ml.cache) == 0  # every read below goes to the bookies
    got = [p for run in await cursor.read_runs(100, 3_500) for p in run.positions]
    assert got == positions[:3]  # 3 of 1000 bytes fit in 3500
    assert len(ml.cache) == 0  # read ahead: 3000 bytes, the 3 entries asked for
    got = [p for run in await cursor.read_runs(100, 500) for p in run.positions]
    assert got == positions[3:4]  # at least one
    got = [p for run in await cursor.read_runs(2, 10_000) for p in run.positions]
    assert got == positions[4:6]  # the count still applies
    got = [p for run in await cursor.read_runs(100) for p in run.positions]
    assert got == positions[6:]  # 0: no bound in bytes
    await ml.close()


def _batch(messages: int, i: int) -> bytes:
    """An entry whose first byte says how many messages it holds (as a batch's metadata)."""
    return bytes([messages]) + b"e%d" % i


def _messages_of(data: bytes) -> int:
    if data[0] == 0:
        raise ProtocolError("unparseable entry")
    return data[0]


async def test_a_recovered_ledger_counts_the_messages_of_its_batches(cluster: Cluster) -> None:
    """The ledger a crashed owner was writing is recovered by the next owner: its message
    count in the metadata dates from when it started, so the new owner counts the entries'
    messages again (issue 34: msgBacklog 1,323 for 1,500 consumable messages)."""
    counts = [(i % 7) + 1 for i in range(30)]
    first = await ManagedLedger.open(
        NAME,
        storage=cluster.storage,
        store=cluster.store,
        config=ManagedLedgerConfig(ledger_entries_max=20),
        background=False,
        messages_of=_messages_of,
    )
    cursor = await first.open_cursor("sub", earliest=True)
    for i, n in enumerate(counts):
        await first.add_entry(_batch(n, i), messages=n)
    assert cursor.backlog_messages == sum(counts)
    assert len(first.ledger_ids()) == 2  # one closed ledger of 20 entries, the open one
    size_bytes = first.ledgers.total_size_bytes
    # the first owner stops without closing anything (a crash, or a lost session)
    other_client = LedgerClient(cluster.store)
    try:
        second = await ManagedLedger.open(
            NAME,
            storage=LedgerClientStorage(other_client),
            store=cluster.store,
            background=False,
            messages_of=_messages_of,
        )
        after = second.cursors["sub"]
        assert after.backlog_entries == len(counts)
        assert after.backlog_messages == sum(counts)
        assert second.ledgers.total_size_bytes == size_bytes  # counted from the entries too
        # per-entry counts of the recovered ledger are exact, not a proportional estimate
        recovered = second.ledger_ids()[1]
        assert second.ledgers.messages_in(Position(recovered, 3), Position(recovered, 6)) == sum(
            counts[23:27]
        )
        after.ack_cumulative(Position(recovered, 4))
        assert after.backlog_messages == sum(counts[25:])
        await second.close()
    finally:
        await first.close()
        await other_client.close()


async def test_an_unparseable_recovered_entry_counts_as_one_message(cluster: Cluster) -> None:
    first = await open_ml(cluster)
    cursor = await first.open_cursor("sub", earliest=True)
    await first.add_entry(_batch(4, 0), messages=4)
    await first.add_entry(_batch(0, 1), messages=1)
    assert cursor.backlog_messages == 5
    other_client = LedgerClient(cluster.store)
    try:
        second = await ManagedLedger.open(
            NAME,
            storage=LedgerClientStorage(other_client),
            store=cluster.store,
            background=False,
            messages_of=_messages_of,
        )
        assert second.cursors["sub"].backlog_messages == 5
        await second.close()
    finally:
        await first.close()
        await other_client.close()


async def test_the_lifecycle_states(cluster: Cluster) -> None:
    ml = await open_ml(cluster)
    assert ml.state is State.OPEN
    await ml.add_entry(b"a")
    await ml.terminate()
    assert ml.state is State.TERMINATED and ml.is_terminated
    with pytest.raises(ManagedLedgerTerminated):
        await ml.add_entry(b"b")
    await ml.close()
    assert ml.state is State.CLOSED
    with pytest.raises(ManagedLedgerClosed):
        await ml.add_entry(b"c")
    with pytest.raises(ManagedLedgerClosed):
        await ml.open_cursor("late")


async def test_a_new_owner_fences_the_previous_owners_cursor_writes(cluster: Cluster) -> None:
    """The previous owner's cursor had no cursor ledger yet (nothing persisted since it
    opened), so its next persist starts a new one that the new owner's recovery cannot
    fence. Its metadata write must still fail: else it persists a mark-delete the new owner
    never sees (found by the data-path simulation, tests/simulation)."""
    first = await open_ml(cluster)
    positions = [await first.add_entry(b"a%d" % i) for i in range(4)]
    old_cursor = await first.open_cursor("sub", earliest=True)
    other_client = LedgerClient(cluster.store)
    try:
        second = await ManagedLedger.open(
            NAME, storage=LedgerClientStorage(other_client), store=cluster.store, background=False
        )
        new_cursor = second.cursors["sub"]
        old_cursor.ack_cumulative(positions[2])
        with pytest.raises(ManagedLedgerFenced):
            await old_cursor.persist()
        new_cursor.ack_cumulative(positions[0])
        await new_cursor.persist()  # the new owner is not fenced by the old one
        await second.close()
    finally:
        await first.close()
        await other_client.close()


async def test_a_fenced_ledger_stays_fenced_once_closed(cluster: Cluster) -> None:
    first = await open_ml(cluster)
    await first.add_entry(b"a")
    other_client = LedgerClient(cluster.store)
    try:
        second = await ManagedLedger.open(
            NAME, storage=LedgerClientStorage(other_client), store=cluster.store, background=False
        )
        with pytest.raises(ManagedLedgerFenced):
            await first.add_entry(b"diverge")
        assert first.state is State.FENCED
        await first.close()
        assert first.state is State.CLOSED and first.is_fenced
        with pytest.raises(ManagedLedgerFenced):  # the cause, not "closed"
            first.add_entry_nowait(b"again").result()
        await second.close()
    finally:
        await first.close()
        await other_client.close()


async def test_a_quiet_managed_ledger_holds_no_task_and_an_append_starts_one(
    cluster: Cluster,
) -> None:
    """An idle topic costs no task: the maintenance task ends once a round finds the ledger
    quiet (nothing time-driven applies to an empty ledger), and the next append starts a new
    one, which persists the cursor moved after it."""
    ml = await ManagedLedger.open(
        NAME,
        storage=cluster.storage,
        store=cluster.store,
        config=ManagedLedgerConfig(maintenance_interval_ms=10, cursor_persist_interval_ms=10),
    )
    try:
        cursor = await ml.open_cursor("sub")

        def maintenance_running() -> bool:
            return any(t.get_name() == f"ml-{NAME}" and not t.done() for t in asyncio.all_tasks())

        await wait_until_async(lambda: not maintenance_running(), what="the quiet task ended")
        position = await ml.add_entry(b"x")
        assert maintenance_running()
        cursor.ack(position)
        assert not cursor.persisted
        await wait_until_async(lambda: cursor.persisted, what="the cursor persisted")
    finally:
        await ml.close()
    assert not maintenance_running()


async def test_a_new_managed_ledger_opens_parked_and_its_first_append_starts_the_task(
    cluster: Cluster,
) -> None:
    """A managed ledger created by its open is quiet: it starts with no maintenance task (no
    task, timer or round per new topic), and its first append starts one."""
    ml = await ManagedLedger.open(NAME, storage=cluster.storage, store=cluster.store)
    try:

        def maintenance_running() -> bool:
            return any(t.get_name() == f"ml-{NAME}" and not t.done() for t in asyncio.all_tasks())

        assert ml.created and not maintenance_running()
        await ml.open_cursor("sub")  # created persisted: still nothing to look after
        assert not maintenance_running()
        await ml.add_entry(b"x")
        assert maintenance_running()
    finally:
        await ml.close()
