"""Key_Shared routing (reference §6.6 "Key_Shared routing", §6.5 STICKY overlap)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.key_shared import (
    NONE_KEY,
    AutoSplitSelector,
    HashRange,
    KeySharedRouter,
    RecentlyJoinedConsumers,
    StickySelector,
    sticky_key,
    sticky_key_hash,
)
from magnetar.common.errors import ConsumerAssignError, ServerError

from .java_reference import java_make_hash


def test_sticky_key_precedence() -> None:
    # "key = ordering_key, else partition_key (base64-decoded if partition_key_b64_encoded),
    # else the bytes NONE_KEY"
    assert sticky_key(b"ord", "pk") == b"ord"
    assert sticky_key(b"", "pk") == b""
    assert sticky_key(None, "pk") == b"pk"
    assert sticky_key(None, base64.b64encode(b"\x00\x01").decode(), True) == b"\x00\x01"
    assert sticky_key(None, "not base64!", True) == b"not base64!"
    assert sticky_key(None, None) == NONE_KEY == b"NONE_KEY"


@given(st.binary(max_size=40))
def test_hash_slot(key: bytes) -> None:
    # "Hash = Murmur3_32(key) mapped into a 65536-slot range"
    slot = java_make_hash(key) % 65536
    assert sticky_key_hash(key) == (1 if slot == 0 else slot)


def test_auto_split_layout_matches_java_javadoc() -> None:
    # First consumer: 0 -> 65536(c1); second splits: 0 -> 32768(c2) -> 65536(c1).
    sel = AutoSplitSelector()
    sel.add(1)
    assert sel.ranges() == {1: [(0, 65536)]}
    sel.add(2)
    assert sel.ranges() == {2: [(0, 32768)], 1: [(32769, 65536)]}
    sel.add(3)  # ties: the first (lowest) largest range is split
    assert sel.ranges() == {3: [(0, 16384)], 2: [(16385, 32768)], 1: [(32769, 65536)]}
    assert sel.select(100) == 3 and sel.select(32768) == 2 and sel.select(65535) == 1
    sel.remove(1)  # owner of the top boundary: the one below moves up to 65536
    assert sel.ranges() == {3: [(0, 16384)], 2: [(16385, 65536)]}
    sel.remove(3)  # otherwise slots go to the next boundary up
    assert sel.ranges() == {2: [(0, 65536)]}


def test_auto_split_exhaustion() -> None:
    sel = AutoSplitSelector(range_size=4)
    for cid in range(4):
        sel.add(cid)
    with pytest.raises(ConsumerAssignError) as info:
        sel.add(99)
    assert info.value.code is ServerError.ConsumerAssignError


class NaiveAutoSplit:
    """The AUTO_SPLIT rules over an explicit slot -> owner array.

    Java's top boundary key is ``range_size`` itself, one past the largest hash, so a
    consumer can own a range holding no hash at all (the top key, after the slot below it
    was split off). The model keeps that virtual slot ``size`` so such a consumer still
    exists here too; only slots ``0 .. size - 1`` are ever selected.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: list[int | None] = [None] * (size + 1)

    def segments(self) -> list[tuple[int, int, int]]:
        """(lower_key, key, owner) per run, with Java's key convention."""
        runs: list[tuple[int, int, int]] = []
        start = 0
        for i in range(1, self.size + 2):
            if i == self.size + 1 or self.slots[i] != self.slots[start]:
                owner = self.slots[start]
                assert owner is not None
                runs.append((start - 1 if start > 0 else 0, i - 1, owner))
                start = i
        return runs

    def add(self, cid: int) -> None:
        if self.slots[0] is None:
            self.slots = [cid] * (self.size + 1)
            return
        lower, key, _ = max(self.segments(), key=lambda s: (s[1] - s[0], -s[1]))
        if key - lower <= 1:
            raise ConsumerAssignError("full")
        split = key - (key - lower) // 2
        for s in range(lower + 1 if lower > 0 else 0, split + 1):
            self.slots[s] = cid

    def remove(self, cid: int) -> None:
        if self.slots[0] is None:
            return
        segs = self.segments()
        idx = next((i for i, s in enumerate(segs) if s[2] == cid), None)
        if idx is None:
            return
        if len(segs) == 1:
            self.slots = [None] * (self.size + 1)
            return
        heir = segs[idx - 1][2] if segs[idx][1] == self.size else segs[idx + 1][2]
        self.slots = [heir if o == cid else o for o in self.slots]


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 9)), max_size=40),
    st.sampled_from([8, 64, 256]),
)
def test_auto_split_matches_naive_slot_map(ops: list[tuple[bool, int]], size: int) -> None:
    fast, naive = AutoSplitSelector(size), NaiveAutoSplit(size)
    for is_add, cid in ops:
        if is_add:
            if cid in fast:
                continue
            try:
                naive.add(cid)
            except ConsumerAssignError:
                with pytest.raises(ConsumerAssignError):
                    fast.add(cid)
                continue
            fast.add(cid)
        else:
            fast.remove(cid)
            naive.remove(cid)
        assert [fast.select(h) for h in range(size)] == naive.slots[:size]


def test_sticky_ranges_and_overlap() -> None:
    sel = StickySelector()
    sel.add(1, [HashRange(0, 99), HashRange(200, 299)])
    sel.add(2, [HashRange(100, 199)])
    assert sel.select(150) == 2 and sel.select(250) == 1 and sel.select(300) is None
    # "Key_Shared STICKY ranges that overlap an existing consumer give ConsumerAssignError"
    for bad in ([HashRange(199, 200)], [HashRange(50, 60)], [HashRange(290, 400)]):
        with pytest.raises(ConsumerAssignError, match="Range conflict"):
            sel.add(3, bad)
    with pytest.raises(ConsumerAssignError, match="must not be empty"):
        sel.add(3, [])
    with pytest.raises(ConsumerAssignError, match="start > end"):
        sel.add(3, [HashRange(500, 400)])
    with pytest.raises(ConsumerAssignError, match="own ranges conflict"):
        sel.add(3, [HashRange(400, 500), HashRange(450, 460)])
    sel.remove(1)
    sel.add(3, [HashRange(0, 150 - 51)])
    assert sel.ranges() == {3: [(0, 99)], 2: [(100, 199)]}


@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 63), st.integers(0, 8)), min_size=1, max_size=3),
        max_size=8,
    )
)
def test_sticky_matches_naive(requests: list[list[tuple[int, int]]]) -> None:
    sel = StickySelector(range_size=64)
    owner: dict[int, int] = {}
    for cid, spec in enumerate(requests):
        ranges = [HashRange(s, min(63, s + w)) for s, w in spec]
        slots = [x for r in ranges for x in range(r.start, r.end + 1)]
        ok = len(slots) == len(set(slots)) and not any(x in owner for x in slots)
        if ok:
            sel.add(cid, ranges)
            owner.update(dict.fromkeys(slots, cid))
        else:
            with pytest.raises(ConsumerAssignError):
                sel.add(cid, ranges)
        assert [sel.select(h) for h in range(64)] == [owner.get(h) for h in range(64)]


def test_recently_joined_consumer_gets_only_older_positions() -> None:
    # A consumer joining while messages are unacked may only get positions before the read
    # position at its join, until the mark-delete position passes that point.
    rj = RecentlyJoinedConsumers()
    rj.on_consumer_added(1, (1, 0), consumer_count=1, entries_since_first_unacked=10)
    assert 1 not in rj  # the first consumer is never restricted
    rj.on_consumer_added(2, (1, 5), consumer_count=2, entries_since_first_unacked=10)
    rj.on_consumer_added(3, (1, 8), consumer_count=3, entries_since_first_unacked=1)
    assert 3 not in rj  # nothing (or one entry) unacked: no restriction needed
    positions = [(1, 3), (1, 4), (1, 5), (1, 6)]
    assert rj.max_entries(2, positions, permits=10, replay=False) == 2
    assert rj.max_entries(2, positions, permits=1, replay=False) == 1
    assert rj.max_entries(1, positions, permits=10, replay=False) == 4
    assert rj.release((1, 4)) == []
    assert rj.release((1, 5)) == [2]
    assert rj.max_entries(2, positions, permits=10, replay=False) == 4


def test_replay_bound_is_earliest_join() -> None:
    rj = RecentlyJoinedConsumers()
    rj.on_consumer_added(2, (1, 4), 2, 5)
    rj.on_consumer_added(3, (1, 9), 3, 9)
    positions = [(1, 2), (1, 3), (1, 5)]
    assert rj.max_entries(3, positions, 10, replay=False) == 3
    assert rj.max_entries(3, positions, 10, replay=True) == 2
    rj.on_consumer_removed(2, remaining_consumers=2)
    rj.on_consumer_removed(3, remaining_consumers=1)
    assert len(rj) == 0


def test_router_keeps_key_order_across_join() -> None:
    router = KeySharedRouter(sticky=False)
    router.add_consumer(1, read_position=(1, 0), entries_since_first_unacked=0)
    router.add_consumer(2, read_position=(1, 10), entries_since_first_unacked=10)
    owner_of = {h: router.selector.select(h) for h in (1, 40000)}
    assert owner_of[1] == 2 and owner_of[40000] == 1
    entries = [((1, 9), 1), ((1, 10), 1), ((1, 11), 40000)]
    routed = router.route(entries, {1: 5, 2: 5}, replay=False)
    assert routed.by_consumer == {2: [(1, 9)], 1: [(1, 11)]}
    assert routed.deferred == [(1, 10)]
    # Key hash 1 still waits for replay: a normal read must not overtake it.
    routed = router.route([((1, 12), 1)], {1: 5, 2: 5}, replay=False, hashes_pending_replay={1})
    assert routed.by_consumer == {} and routed.deferred == [(1, 12)]
    # No permits: deferred.
    assert router.route([((1, 13), 40000)], {2: 5}, replay=False).deferred == [(1, 13)]


def test_router_sticky_unowned_slot_is_deferred_and_out_of_order_allowed() -> None:
    router = KeySharedRouter(sticky=True, allow_out_of_order=True)
    router.add_consumer(1, (1, 0), 0, [HashRange(0, 100)])
    router.add_consumer(2, (1, 50), 50, [HashRange(101, 200)])
    assert 2 not in router.recently_joined
    routed = router.route([((1, 1), 5), ((1, 2), 150), ((1, 3), 300)], {1: 9, 2: 9}, False)
    assert routed.by_consumer == {1: [(1, 1)], 2: [(1, 2)]}
    assert routed.deferred == [(1, 3)]
    with pytest.raises(ConsumerAssignError):
        router.add_consumer(3, (1, 60), 0, [HashRange(100, 101)])
    router.remove_consumer(1)
    assert router.route([((1, 4), 5)], {2: 9}, False).deferred == [(1, 4)]
