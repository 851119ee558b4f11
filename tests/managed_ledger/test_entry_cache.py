"""The tailing-read cache: byte bound and gradual eviction of read entries."""

from __future__ import annotations

import itertools
import tracemalloc
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.entry_cache import ENTRY_OVERHEAD_BYTES, EntryCache, EntryCacheBudget
from magnetar.managed_ledger.position import Position

U = 10 + ENTRY_OVERHEAD_BYTES
"""What one entry of :func:`fill` counts against the bounds (10 payload bytes and the
cache's own structures)."""


def fill(cache: EntryCache, ledger_id: int, first: int, count: int) -> None:
    for e in range(first, first + count):
        cache.insert(Position(ledger_id, e), b"x" * 10, 1)


def test_byte_bound_drops_oldest_inserted() -> None:
    cache = EntryCache(size_max_bytes=10 * U)
    fill(cache, 1, 0, 15)
    assert len(cache) == 10 and cache.size_bytes == 10 * U
    assert cache.get(Position(1, 4)) is None
    assert cache.get(Position(1, 5)) == b"x" * 10


def test_gradual_eviction_drops_a_bounded_number_now_and_the_rest_per_insert() -> None:
    cache = EntryCache(size_max_bytes=1 << 30)
    fill(cache, 1, 0, 5000)
    assert cache.evict_before_gradually(Position(1, 4000), now_max=1000) == 1000
    assert len(cache) == 4000
    assert cache.get(Position(1, 999)) is None and cache.get(Position(1, 1000)) is not None
    fill(cache, 1, 5000, 100)  # each insert drops two more below the floor
    assert len(cache) == 4000 + 100 - 200
    assert cache.get(Position(1, 1199)) is None and cache.get(Position(1, 1200)) is not None
    fill(cache, 1, 5100, 2000)
    # everything below the floor is gone; nothing at or after it was touched
    assert len(cache) == 1000 + 100 + 2000
    assert cache.get(Position(1, 3999)) is None
    assert cache.get(Position(1, 4000)) is not None
    assert cache.size_bytes == len(cache) * U
    assert cache.messages_of(Position(1, 3999)) is None
    assert cache.messages_of(Position(1, 4000)) == 1


def test_floor_at_or_before_the_first_entry_drops_nothing() -> None:
    cache = EntryCache(size_max_bytes=1 << 30)
    fill(cache, 2, 10, 10)
    assert cache.evict_before_gradually(Position(2, 10)) == 0
    assert cache.evict_before_gradually(Position(1, 99)) == 0
    fill(cache, 2, 20, 5)
    assert len(cache) == 15
    cache.evict_before_gradually(Position(3, 0))
    assert len(cache) == 0 and cache.size_bytes == 0


def test_caches_sharing_a_budget_hold_no_more_than_it_together() -> None:
    budget = EntryCacheBudget(size_max_bytes=100 * U, eviction_watermark=0.5)
    big = EntryCache(size_max_bytes=1 << 30, budget=budget)
    small = EntryCache(size_max_bytes=1 << 30, budget=budget)
    fill(small, 1, 0, 20)  # 20 entries
    fill(big, 2, 0, 80)  # 100 in all: at the budget, nothing evicted yet
    assert budget.size_bytes == 100 * U and budget.evicted_bytes == 0
    fill(big, 2, 80, 1)  # over it: down to half, the larger cache giving up the most
    assert budget.size_bytes <= 50 * U
    assert budget.size_bytes == big.size_bytes + small.size_bytes
    assert 81 * U - big.size_bytes > 20 * U - small.size_bytes > 0  # in proportion to size
    assert budget.evicted_bytes == 101 * U - budget.size_bytes
    # the oldest entries went first, in both
    assert big.get(Position(2, 0)) is None and big.get(Position(2, 80)) is not None
    assert small.get(Position(1, 0)) is None and small.get(Position(1, 19)) is not None
    for _ in range(50):
        fill(small, 1, 1000 + _ * 7, 7)
        fill(big, 2, 1000 + _ * 13, 13)
        assert budget.size_bytes <= 100 * U
        assert budget.size_bytes == big.size_bytes + small.size_bytes


def test_every_way_out_gives_bytes_back_to_the_budget() -> None:
    budget = EntryCacheBudget(size_max_bytes=1 << 30)
    a = EntryCache(size_max_bytes=10 * U, budget=budget)
    b = EntryCache(size_max_bytes=1 << 30, budget=budget)
    fill(a, 1, 0, 15)  # its own bound drops the oldest
    fill(b, 2, 0, 50)
    assert budget.size_bytes == (10 + 50) * U and budget.caches == 2
    b.evict_before_gradually(Position(2, 30), now_max=10)
    fill(b, 2, 50, 5)  # two more below the floor per insert
    assert budget.size_bytes == a.size_bytes + b.size_bytes == (10 + 50 - 10 + 5 - 10) * U
    a.clear()
    b.clear()
    assert budget.size_bytes == 0 and budget.caches == 0


def test_a_budget_of_zero_caches_nothing() -> None:
    budget = EntryCacheBudget(size_max_bytes=0)
    cache = EntryCache(size_max_bytes=1 << 20, budget=budget)
    fill(cache, 1, 0, 10)
    assert len(cache) == 0 and budget.size_bytes == 0


def test_an_emptied_cache_gives_its_tables_back() -> None:
    cache = EntryCache(size_max_bytes=1 << 30)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for e in range(30_000):
            cache.insert(Position(1, e), b"x", 1)
        cache.evict_before_gradually(Position(2, 0), now_max=30_000)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) == 0 and cache.size_bytes == 0
    assert held < 64 * 1024, held


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),  # gap after the previous run (appends: fresh positions)
            st.lists(st.integers(0, 60), min_size=1, max_size=12),  # entry sizes
        ),
        max_size=12,
    )
)
def test_a_run_is_cached_as_inserts_one_by_one_would(runs: list[tuple[int, list[int]]]) -> None:
    bound = 200 + 3 * ENTRY_OVERHEAD_BYTES  # a few entries fit
    by_runs = EntryCache(size_max_bytes=bound, budget=EntryCacheBudget(1 << 20))
    one_by_one = EntryCache(size_max_bytes=bound, budget=EntryCacheBudget(1 << 20))
    first = 0
    for gap, sizes in runs:
        first += gap
        datas = [bytes([i % 256]) * size for i, size in enumerate(sizes)]
        counts = [i + 1 for i in range(len(sizes))]
        by_runs.insert_run(3, first, datas, counts)
        for i, data in enumerate(datas):
            one_by_one.insert(Position(3, first + i), data, counts[i])
        first += len(sizes)
    assert len(by_runs) == len(one_by_one)
    assert by_runs.size_bytes == one_by_one.size_bytes <= bound
    for e in range(first):
        p = Position(3, e)
        assert by_runs.get(p) == one_by_one.get(p)
        assert by_runs.messages_of(p) == one_by_one.messages_of(p)


def test_entries_leave_by_age_between_the_threshold_and_twice_it() -> None:
    budget = EntryCacheBudget(size_max_bytes=1 << 30)
    cache = EntryCache(size_max_bytes=1 << 30, budget=budget)
    fill(cache, 1, 0, 10)  # t=0
    assert cache.evict_older_than(0, 1000) == 0  # marks entry 9
    fill(cache, 1, 10, 5)  # t=500: after the mark
    assert cache.evict_older_than(500, 1000) == 0
    assert cache.evict_older_than(999, 1000) == 0
    assert cache.evict_older_than(1000, 1000) == 10  # 0..9 are a second old; marks 14
    assert cache.get(Position(1, 9)) is None and cache.get(Position(1, 10)) is not None
    assert cache.evict_older_than(1999, 1000) == 0
    assert cache.evict_older_than(2000, 1000) == 5
    assert len(cache) == 0 and cache.size_bytes == 0 and budget.size_bytes == 0
    assert budget.caches == 0
    assert cache.evict_older_than(5000, 1000) == 0  # empty: nothing marked
    fill(cache, 1, 15, 3)
    assert cache.evict_older_than(5000, 1000) == 0
    assert cache.evict_older_than(6000, 1000) == 3


def test_age_eviction_drops_a_bounded_number_per_call() -> None:
    cache = EntryCache(size_max_bytes=1 << 30)
    fill(cache, 1, 0, 2500)
    cache.evict_older_than(0, 10)
    assert cache.evict_older_than(10, 10, now_max=1000) == 1000
    assert cache.evict_older_than(11, 10, now_max=1000) == 1000
    fill(cache, 1, 2500, 10)  # after the mark, which is not reached yet: they stay
    assert cache.evict_older_than(12, 10, now_max=1000) == 500
    assert len(cache) == 10 and cache.get(Position(1, 2500)) is not None


def test_age_eviction_skips_a_mark_already_evicted_and_can_be_off() -> None:
    cache = EntryCache(size_max_bytes=1 << 30)
    fill(cache, 1, 0, 10)
    cache.evict_older_than(0, 100)
    cache.evict_before_gradually(Position(1, 10))  # the mark (entry 9) goes another way
    fill(cache, 1, 10, 4)
    assert cache.evict_older_than(100, 100) == 0  # marks entry 13 now
    assert cache.evict_older_than(200, 100) == 4
    fill(cache, 1, 20, 4)
    assert cache.evict_older_than(10**9, -1) == 0
    assert cache.evict_older_than(2 * 10**9, -1) == 0
    assert len(cache) == 4


def test_a_large_budget_eviction_is_spread_over_the_following_inserts() -> None:
    """Over the budget by a lot, an insert drops a bounded amount (twice its own bytes and a
    fixed step) and leaves the rest of the eviction to the next inserts; the caches never
    grow meanwhile and end at the watermark."""
    budget = EntryCacheBudget(size_max_bytes=4000 * U, eviction_watermark=0.5)
    cache = EntryCache(size_max_bytes=1 << 30, budget=budget)
    fill(cache, 1, 0, 4000)
    assert budget.size_bytes == 4000 * U and not budget.evicting
    fill(cache, 1, 4000, 1)  # over it: 2 001 entries to drop, more than one insert may
    first = budget.evicted_bytes
    assert 0 < first < 1000 * U
    assert budget.evicting
    sizes = [budget.size_bytes]
    e = 4001
    while budget.evicting:
        fill(cache, 1, e, 1)
        e += 1
        sizes.append(budget.size_bytes)
        assert e < 4100, "the eviction should end within a few inserts"
    assert all(b <= a for a, b in itertools.pairwise(sizes))
    # at the watermark, give or take what came in during the eviction
    assert budget.size_bytes <= (2000 + e - 4001) * U
    assert budget.size_bytes == cache.size_bytes == len(cache) * U
    # the oldest went, in order
    oldest = e - len(cache)
    assert cache.get(Position(1, oldest - 1)) is None and cache.get(Position(1, oldest)) is not None
    assert budget.evicted_bytes == (e - len(cache)) * U


def test_an_eviction_under_way_survives_a_cache_that_is_cleared() -> None:
    budget = EntryCacheBudget(size_max_bytes=4000 * U, eviction_watermark=0.5)
    a = EntryCache(size_max_bytes=1 << 30, budget=budget)
    b = EntryCache(size_max_bytes=1 << 30, budget=budget)
    fill(a, 1, 0, 2500)
    fill(b, 2, 0, 1500)
    fill(b, 2, 1500, 1)
    assert budget.evicting
    a.clear()
    fill(b, 2, 1501, 1)
    while budget.evicting:
        fill(b, 2, 1502 + len(b), 1)
    assert budget.size_bytes == b.size_bytes < 4000 * U
    assert budget.caches == 1


operations = st.lists(
    st.one_of(
        st.tuples(  # insert a run (it may overlap cached entries)
            st.just("insert"),
            st.integers(1, 2),
            st.integers(0, 200),
            st.lists(st.integers(0, 40), min_size=0, max_size=80),
        ),
        st.tuples(st.just("floor"), st.integers(1, 2), st.integers(0, 300), st.just([])),
        st.tuples(st.just("evict"), st.integers(1, 2), st.integers(0, 300), st.just([])),
    ),
    max_size=30,
)


def test_a_block_extended_over_an_older_blocks_evicted_front_is_still_found() -> None:
    """Entries 25..34 cached, then 10..19 (a block of their own); 25..27 leave; 20..27 come
    and extend the second block over the first one's old start: all are found there."""
    cache = EntryCache(size_max_bytes=1 << 30)
    cache.insert_run(1, 25, [b"y"] * 10)
    cache.insert_run(1, 10, [b"x"] * 10)
    assert cache.evict_before_gradually(Position(1, 28), now_max=3) == 3
    cache.insert_run(1, 20, [b"z"] * 8)
    assert [cache.get(Position(1, e)) for e in (19, 20, 26, 27, 28)] == [
        b"x",
        b"z",
        b"z",
        b"z",
        b"y",
    ]
    assert cache.run(1, 10, 34)[1] == [b"x"] * 10 + [b"z"] * 8 + [b"y"] * 7
    assert len(cache) == 25


class Model:
    """The cache's contract entry by entry: a table keyed by position, in insertion order."""

    def __init__(self, size_max_bytes: int) -> None:
        self.entries: OrderedDict[Position, tuple[bytes, int | None]] = OrderedDict()
        self.size_max_bytes = size_max_bytes
        self.size_bytes = 0
        self.floor: Position | None = None

    def insert_run(self, ledger: int, first: int, datas: list[bytes], counts: list[int]) -> None:
        for i, data in enumerate(datas):
            position = Position(ledger, first + i)
            size = len(data) + ENTRY_OVERHEAD_BYTES
            if size > self.size_max_bytes or position in self.entries:
                continue
            self.entries[position] = (data, counts[i])
            self.size_bytes += size
        if not self.entries:
            return
        if self.floor is not None:
            self.evict_below_floor(2 * len(datas))
        while self.size_bytes > self.size_max_bytes:
            self.pop_oldest()

    def pop_oldest(self) -> None:
        data, _ = self.entries.popitem(last=False)[1]
        self.size_bytes -= len(data) + ENTRY_OVERHEAD_BYTES

    def evict_below_floor(self, limit: int) -> int:
        assert self.floor is not None
        n = 0
        while n < limit and self.entries and next(iter(self.entries)) < self.floor:
            self.pop_oldest()
            n += 1
        if n < limit:
            self.floor = None
        return n


def _contents(cache: EntryCache) -> list[tuple[Position, bytes | None, int | None]]:
    """Every cached entry in the order the cache holds them (oldest cached first)."""
    return [
        (Position(block.ledger_id, block.first + i), block.datas[i], block.counts[i])
        for block in cache._blocks
        for i in range(block.start, len(block.datas))
    ]


@settings(max_examples=1500, deadline=None)
@given(ops=operations)
def test_the_cache_holds_what_entry_by_entry_steps_would(
    ops: list[tuple[str, int, int, list[int]]],
) -> None:
    """Blocks of consecutive entries keep the contract of a table of entries in insertion
    order: the same entries in the same order, the same bytes, the same floor, the same
    answers to reads; after every operation."""
    bound = 40 * (30 + ENTRY_OVERHEAD_BYTES)  # ~40 entries: long inserts drop the oldest too
    cache = EntryCache(size_max_bytes=bound)
    model = Model(bound)
    for kind, ledger, entry, sizes in ops:
        if kind == "insert":
            datas = [bytes([s]) * s for s in sizes]
            counts = [s + 1 for s in sizes]
            cache.insert_run(ledger, entry, datas, counts)
            model.insert_run(ledger, entry, datas, counts)
        elif kind == "floor":
            cache.set_floor(Position(ledger, entry))
            model.floor = Position(ledger, entry)
        else:
            model.floor = Position(ledger, entry)
            assert cache.evict_before_gradually(
                Position(ledger, entry), now_max=entry % 50
            ) == model.evict_below_floor(entry % 50)
        assert _contents(cache) == [(p, d, c) for p, (d, c) in model.entries.items()]
        assert cache.size_bytes == model.size_bytes and len(cache) == len(model.entries)
        assert cache._floor == model.floor
        for first in range(0, 300, 37):
            last = first + entry % 60
            expected = []
            for e in range(first, last + 1):
                found = model.entries.get(Position(ledger, e))
                if found is None:
                    break
                expected.append(found)
            positions, data, counts = cache.run(ledger, first, last)
            assert list(zip(data, counts, strict=True)) == expected
            assert positions == [Position(ledger, first + i) for i in range(len(expected))]
            whole = cache.run_whole(ledger, first, last)
            assert (whole is not None) == (len(expected) == last - first + 1)
