"""Recipes (election with epoch, sequential election, lock, cache) on every backend, with
candidates as tasks of this process, each on its own session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import pytest

from magnetar.metadata import (
    CreateOp,
    FencedByEpoch,
    MetadataStore,
    SessionExpired,
    SetOp,
)
from magnetar.metadata.cache import MetadataCache
from magnetar.metadata.election import LeaderElection, Leadership, SequentialElection
from magnetar.metadata.lock import Lock
from magnetar.metadata.store import GetResult
from magnetar.testing import wait_until_async

OpenStore = Callable[[], Awaitable[MetadataStore]]
WAIT_S = 15.0


async def test_election_one_leader_and_increasing_epochs(open_store: OpenStore) -> None:
    stores = [await open_store() for _ in range(3)]
    elections = [
        LeaderElection(s, "/ctl/controller", f"c{i}".encode()) for i, s in enumerate(stores)
    ]
    tasks = [asyncio.create_task(e.campaign()) for e in elections]
    epochs: list[int] = []
    previous: LeaderElection | None = None
    try:
        for _round in range(3):

            async def one_leader() -> bool:
                return sum(e.is_leader for e in elections) == 1

            await wait_until_async(one_leader, WAIT_S, what="no leader elected")
            leader = next(e for e in elections if e.is_leader)
            assert leader.epoch is not None
            assert not epochs or leader.epoch > epochs[-1]
            epochs.append(leader.epoch)
            assert await leader.current_leader() == (leader.candidate_id, leader.epoch)
            if previous is not None:
                assert previous.epoch is not None
                with pytest.raises(FencedByEpoch):
                    await leader.fenced_multi(previous.epoch, [CreateOp("/ctl/stale", b"")])
                assert await leader.store.exists("/ctl/stale") is None
            await leader.fenced_multi(leader.epoch, [SetOp("/ctl", str(leader.epoch).encode())])
            # the leader's session ends: it learns it is deposed; its writes are refused
            await leader.store.expire_session()  # type: ignore[attr-defined]
            async with asyncio.timeout(WAIT_S):
                await leader.wait_deposed()
            assert leader.leadership is Leadership.DEPOSED and not leader.is_leader
            with pytest.raises(SessionExpired):
                await leader.fenced_multi(leader.epoch, [CreateOp("/ctl/w", b"")])
            previous = leader
        assert epochs == sorted(set(epochs)) and len(epochs) == 3
    finally:
        for t in tasks:
            t.cancel()


async def test_resign_hands_over(open_store: OpenStore) -> None:
    a = LeaderElection(await open_store(), "/r/leader", b"a")
    b = LeaderElection(await open_store(), "/r/leader", b"b")
    epoch_a = await a.campaign()
    task_b = asyncio.create_task(b.campaign())
    await a.resign()
    async with asyncio.timeout(WAIT_S):
        epoch_b = await task_b
    assert epoch_b == epoch_a + 1 and b.is_leader and not a.is_leader
    with pytest.raises(FencedByEpoch):
        await a.fenced_multi(epoch_a, [CreateOp("/r/late", b"")])
    assert [r.path for r in await b.fenced_multi(epoch_b, [CreateOp("/r/ok", b"")])] == ["/r/ok"]


async def test_sequential_election_lowest_wins_in_order(open_store: OpenStore) -> None:
    elections = [
        SequentialElection(await open_store(), "/auditor", f"a{i}".encode()) for i in range(3)
    ]
    first = await elections[0].campaign()
    waiting = [asyncio.create_task(e.campaign()) for e in elections[1:]]

    async def all_queued() -> bool:
        return len(await elections[0].store.children("/auditor")) == 3

    await wait_until_async(all_queued, WAIT_S, what="three candidates queued")
    assert not any(t.done() for t in waiting)
    assert await elections[0].leader() == b"a0"
    # concurrent creates may be numbered in either order: find who is next in line
    nodes = [e.node for e in elections[1:]]
    assert nodes[0] is not None and nodes[1] is not None
    nxt, last = (0, 1) if nodes[0] < nodes[1] else (1, 0)
    await elections[0].resign()
    async with asyncio.timeout(WAIT_S):
        second = await waiting[nxt]
    assert second > first and not waiting[last].done()
    await elections[1 + nxt].store.close()  # the session ends: its node goes, the last leads
    async with asyncio.timeout(WAIT_S):
        await waiting[last]
    assert await elections[1 + last].leader() == elections[1 + last].candidate_id


async def test_lock_excludes_and_hands_over(open_store: OpenStore) -> None:
    s1, s2 = await open_store(), await open_store()
    lock1 = Lock(s1, "/locks/l", b"owner-1")
    lock2 = Lock(s2, "/locks/l", b"owner-2")
    assert await lock1.try_acquire() and lock1.held
    assert await lock1.try_acquire()  # re-entrant within the session that holds it
    assert not await lock2.try_acquire()
    assert await lock2.holder() == b"owner-1"
    waiting = _AttemptsSeen(s2, "/locks/l", b"owner-2")
    waiter = asyncio.create_task(waiting.acquire())
    await wait_until_async(lambda: waiting.attempts == [False], WAIT_S, what="a refused try")
    assert not waiter.done() and not waiting.held
    await lock1.release()
    async with asyncio.timeout(WAIT_S):
        await waiter
    # one more try, on the holder's release: the waiter waits without polling
    assert waiting.attempts == [False, True]
    assert waiting.held and await waiting.holder() == b"owner-2"
    await s2.expire_session()  # type: ignore[attr-defined]
    assert not waiting.held
    assert await lock1.try_acquire()


class _AttemptsSeen(Lock):
    """A lock that records the outcome of each of its tries (the waiter's progress, which
    a test waits on instead of sleeping)."""

    def __init__(self, store: MetadataStore, path: str, owner: bytes) -> None:
        super().__init__(store, path, owner)
        self.attempts: list[bool] = []

    async def try_acquire(self) -> bool:
        acquired = await super().try_acquire()
        self.attempts.append(acquired)
        return acquired


async def test_cache_reads_through_and_stays_fresh(open_store: OpenStore) -> None:
    writer = await open_store()
    reader = await open_store()
    await writer.put("/cfg/a", b"1")
    cache = MetadataCache(reader, "/cfg")
    await cache.start()
    try:
        got = await cache.get("/cfg/a")
        assert got is not None and got.value == b"1"
        assert await cache.get("/cfg/missing") is None
        assert await cache.children("/cfg") == ["a"]
        hits = cache.hits
        await cache.get("/cfg/a")
        assert cache.hits == hits + 1
        await writer.put("/cfg/a", b"2")
        await writer.put("/cfg/missing", b"now")

        async def fresh() -> bool:
            a = await cache.get("/cfg/a")
            m = await cache.get("/cfg/missing")
            kids = await cache.children("/cfg")
            return a is not None and a.value == b"2" and m is not None and kids == ["a", "missing"]

        await wait_until_async(fresh, WAIT_S, what="cache never saw the writes")
        await writer.delete("/cfg/a")

        async def gone() -> bool:
            return await cache.get("/cfg/a") is None and await cache.children("/cfg") == ["missing"]

        await wait_until_async(gone, WAIT_S, what="cache never saw the delete")
    finally:
        await cache.close()


async def test_cache_concurrent_misses_of_a_path_share_one_read(open_store: OpenStore) -> None:
    """Misses of one path while its read is in flight wait for that read; if its reader is
    cancelled, they read for themselves."""
    store = await open_store()
    await store.put("/cfg/a", b"1")
    await store.put("/cfg/slow", b"s")
    reads: list[str] = []
    gate = asyncio.Event()

    class Counted:
        """The real store, its ``get`` counted (and ``/cfg/slow`` held until the gate)."""

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def get(self, path: str) -> GetResult:
            reads.append(path)
            if path == "/cfg/slow":
                await gate.wait()
            return await store.get(path)

    cache = MetadataCache(cast(MetadataStore, Counted()), "/cfg")
    await cache.start()
    try:
        got = await asyncio.gather(
            *(cache.get("/cfg/a") for _ in range(5)), *(cache.get("/cfg/no") for _ in range(3))
        )
        assert [g.value if g is not None else None for g in got] == [b"1"] * 5 + [None] * 3
        assert sorted(reads) == ["/cfg/a", "/cfg/no"]
        reads.clear()
        first = asyncio.create_task(cache.get("/cfg/slow"))
        second = asyncio.create_task(cache.get("/cfg/slow"))
        await wait_until_async(lambda: reads == ["/cfg/slow"], what="the first read started")
        first.cancel()
        gate.set()
        later = await second
        assert later is not None and later.value == b"s"
        assert reads == ["/cfg/slow", "/cfg/slow"]
        assert first.cancelled()
    finally:
        await cache.close()
