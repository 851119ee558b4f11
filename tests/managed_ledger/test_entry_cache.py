"""The tailing-read cache: byte bound and gradual eviction of read entries."""

from __future__ import annotations

from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.position import Position


def fill(cache: EntryCache, ledger_id: int, first: int, count: int) -> None:
    for e in range(first, first + count):
        cache.insert(Position(ledger_id, e), b"x" * 10, 1)


def test_byte_bound_drops_oldest_inserted() -> None:
    cache = EntryCache(size_max_bytes=100)
    fill(cache, 1, 0, 15)
    assert len(cache) == 10 and cache.size_bytes == 100
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
    assert cache.size_bytes == len(cache) * 10
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
