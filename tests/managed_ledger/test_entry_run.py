"""Entries read as runs: the cache and the cursor hand the dispatcher a run of entries in
one call, with a number of function calls that does not grow with the run's length."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.entry_run import EntryRun, positions_of
from magnetar.managed_ledger.errors import ManagedLedgerClosed
from magnetar.managed_ledger.position import Position
from tests.call_count import calls_made

from .conftest import Cluster
from .test_managed_ledger import open_ml


def filled(count: int) -> EntryCache:
    cache = EntryCache(size_max_bytes=1 << 30)
    for e in range(count):
        cache.insert(Position(3, e), b"e%d" % e, e % 4 + 1)
    return cache


def test_positions_of_builds_positions() -> None:
    got = positions_of(7, 5, 3)
    assert got == [Position(7, 5), Position(7, 6), Position(7, 7)]
    assert all(type(p) is Position for p in got)
    assert positions_of(7, 5, 0) == []


def test_cache_run_returns_the_cached_prefix_with_counts() -> None:
    cache = filled(10)
    cache.insert(Position(3, 12), b"e12", None)
    positions, data, messages = cache.run(3, 8, 14)
    assert positions == [Position(3, 8), Position(3, 9)]  # stops at the miss of 3:10
    assert data == [b"e8", b"e9"]
    assert messages == [1, 2]
    assert (cache.hits, cache.misses) == (2, 1)
    assert cache.run(3, 12, 12) == ([Position(3, 12)], [b"e12"], [None])
    assert cache.run(4, 0, 5) == ([], [], [])
    assert cache.run(3, 5, 4) == ([], [], [])
    assert cache.get_run(3, 0, 2) == [b"e0", b"e1", b"e2"]


def test_a_cache_run_costs_the_same_calls_for_10_or_1000_entries() -> None:
    cache = filled(1000)
    few = calls_made(lambda: cache.run(3, 0, 9))
    many = calls_made(lambda: cache.run(3, 0, 999))
    assert many == few
    assert calls_made(lambda: cache.get_run(3, 0, 9)) == calls_made(
        lambda: cache.get_run(3, 0, 999)
    )


async def test_cursor_reads_runs_with_counts_and_skips_acknowledged(cluster: Cluster) -> None:
    ml = await open_ml(cluster)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"m%d" % i, i % 3 + 1) for i in range(10)]
    runs = await cursor.read_runs(100)
    assert [(r.positions, r.data, r.messages) for r in runs] == [
        (positions, [b"m%d" % i for i in range(10)], [i % 3 + 1 for i in range(10)])
    ]
    assert await cursor.read_runs(100) == []
    cursor.ack(positions[4])
    cursor.rewind()
    runs = await cursor.read_runs(100)
    assert [r.positions for r in runs] == [positions[:4], positions[5:]]
    assert all(r.counts_known for r in runs)
    cursor.rewind()
    runs = await cursor.read_runs(6)  # the budget counts entries across runs
    assert [r.positions for r in runs] == [positions[:4], positions[5:7]]
    await ml.close()


async def test_entries_read_from_bookies_come_with_unknown_counts(cluster: Cluster) -> None:
    ml = await open_ml(cluster, cache_size_max_bytes=0)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"m%d" % i, 2) for i in range(5)]
    (run,) = await cursor.read_runs(100)
    assert run.positions == positions
    assert run.messages == [None] * 5
    assert not run.counts_known
    assert not EntryRun([positions[0]], [b"x"], [0]).counts_known
    await ml.close()


def test_cache_run_whole_is_all_or_nothing() -> None:
    cache = filled(10)
    assert cache.run_whole(3, 8, 9) == ([Position(3, 8), Position(3, 9)], [b"e8", b"e9"], [1, 2])
    assert cache.run_whole(3, 8, 10) is None  # 3:10 is not cached
    assert (cache.hits, cache.misses) == (2, 0)  # the caller reads again through run()
    assert cache.run_whole(3, 5, 4) == ([], [], [])


async def test_a_cached_read_gives_what_read_runs_gives_or_nothing(cluster: Cluster) -> None:
    """``read_runs_cached`` is the dispatcher's read without waiting: the runs
    ``read_runs`` gives while every entry is cached; None, the read position unchanged,
    once one is not."""
    ml = await open_ml(cluster)
    cursor = await ml.open_cursor("sub", earliest=True)
    positions = [await ml.add_entry(b"m%d" % i, i % 3 + 1) for i in range(10)]
    cursor.ack(positions[4])
    runs = cursor.read_runs_cached(6)
    assert runs is not None
    assert [(r.positions, r.messages) for r in runs] == [
        (positions[:4], [1, 2, 3, 1]),
        (positions[5:7], [3, 1]),
    ]
    assert cursor.read_runs_cached(100) is not None
    assert cursor.read_runs_cached(100) == []  # at the end of the log
    cursor.rewind()
    ml.cache.evict_before_gradually(Position(positions[0].ledger_id, 8))
    assert cursor.read_runs_cached(100) is None
    assert cursor.state.read_position == positions[0]  # nothing taken
    runs = await cursor.read_runs(100)
    assert [r.positions for r in runs] == [positions[:4], positions[5:]]
    await ml.close()


async def test_call_on_append_calls_once_after_the_next_append_or_the_close(
    cluster: Cluster,
) -> None:
    """The parked dispatchers' registration: ``callback(True)`` on a loop turn after the
    next append (once), ``callback(False)`` when the log closes first; refused after."""
    ml = await open_ml(cluster)
    calls: list[bool] = []
    ml.call_on_append(calls.append)
    await asyncio.sleep(0)
    assert calls == []
    await ml.add_entry(b"a", 1)
    await asyncio.sleep(0)
    assert calls == [True]
    await ml.add_entry(b"b", 1)
    await asyncio.sleep(0)
    assert calls == [True]  # once per registration
    ml.call_on_append(calls.append)
    await ml.close()
    await asyncio.sleep(0)
    assert calls == [True, False]
    with pytest.raises(ManagedLedgerClosed):
        ml.call_on_append(calls.append)


@pytest.mark.parametrize("max_bytes", [0, 1, 40, 130, 10_000])
async def test_cached_reads_follow_read_runs_step_by_step(cluster: Cluster, max_bytes: int) -> None:
    """Tailing reads (the cached read's shortcut) and reads past acknowledged entries take
    the same entries, budget by budget, as :meth:`read_runs` does."""
    ml = await open_ml(cluster)
    cached = await ml.open_cursor("cached", earliest=True)
    plain = await ml.open_cursor("plain", earliest=True)
    positions = [await ml.add_entry(b"m" * (10 + i % 7), i % 3 + 1) for i in range(12)]
    for step, budget in enumerate([1, 2, 3, 100, 100, 4]):
        if step == 4:  # now with an acknowledged entry ahead of both
            await ml.add_entry(b"late", 1)
            more = [await ml.add_entry(b"x%d" % i, 1) for i in range(5)]
            for cursor in (cached, plain):
                cursor.ack(more[1])
        got = cached.read_runs_cached(budget, max_bytes)
        want = await plain.read_runs(budget, max_bytes)
        assert got is not None
        assert [(r.positions, r.data, r.messages) for r in got] == [
            (r.positions, r.data, r.messages) for r in want
        ]
        assert cached.state.read_position == plain.state.read_position
    assert positions[0] < cached.state.read_position
    await ml.close()
