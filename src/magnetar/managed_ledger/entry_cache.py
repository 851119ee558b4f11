"""The tailing-read cache: recently appended entries served from memory.

Cursors that keep up with producers read what was just appended without touching bookies.
The cache is bounded in bytes; entries before the slowest active reader are evicted first
(nobody will ask for them), then the oldest inserted when over the bound. Catch-up reads
from bookies put only their read-ahead surplus here.

Eviction of read entries is spread out: :meth:`evict_before_gradually` drops a bounded
number at once and records the position as a floor (:meth:`set_floor` only records it); each
later :meth:`insert` drops a few more below it. A topic taking 30 000 entries a second would
otherwise drop 30 000 in one go each maintenance round, a 10 ms stall of the event loop every
second (the p99 of publish latency). The managed ledger moves the floor to its slowest reader
on every append (Pulsar evicts read entries every 10 ms), so a cache whose readers keep up
holds little more than the entries in flight: with the floor moved only by the
once-a-second maintenance, read entries piled up, ~40 000 at 25 000 msg/s, and resizing the
table the cache then was took 3-8 ms (a stall of the loop every few hundred milliseconds,
measured at that rate).

Entries also leave by age (Pulsar's ``managedLedgerCacheEvictionTimeThresholdMillis``):
:meth:`EntryCache.evict_older_than`, called each maintenance round, drops what has stayed
longer than the threshold. Without it an idle topic's cache kept the tail its consumers
never read (a backlog, or a subscription whose consumer left) until the shared budget
pushed it out, which on a quiet broker is never: after a benchmark pass that was ~14 MB of
entries and ~13 000 positions, holding the allocator's pages among the pass's freed garbage.

All the caches of a process share one :class:`EntryCacheBudget` (Pulsar's
``managedLedgerCacheSizeMB``): a topic's own bound alone let every topic hold 64 MiB, so a
broker's memory grew with the number of busy topics. When the caches together pass the
budget, the largest caches give up their oldest entries (in proportion to their size) until
the total is back under ``eviction_watermark`` of it; readers that miss read from bookies.
That too is spread out: each insert drops at most twice what it added plus
``_BUDGET_EVICT_STEP_BYTES`` of the plan, so the caches never grow during it and shrink to the
watermark within a few inserts. Done at once, a tenth of a 16 MiB budget of 100 B entries was
~4 000 entries, a 4-5 ms stall of the loop several times a second at 25 000 msg/s
(measured: the commonest stall over 2 ms at that rate, and the p99 publish latency).

Plain data structures, not thread-safe; a cache is owned by one managed ledger, the budget by
the process's event loop. Returned ``bytes`` are shared (immutable), never copied.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Sequence
from itertools import islice, repeat
from typing import Final

from magnetar.managed_ledger.entry_run import positions_of
from magnetar.managed_ledger.position import Position

_EVICT_PER_INSERT = 2
"""Entries below the floor dropped per insert: more than one, so the backlog of read
entries shrinks while appends go on."""

_COMPACT_MIN: Final = 64
"""A block drops the references of entries that left at once, and its list slots once at
least this many left and they are half of it (amortized: no copy per eviction)."""

_BUDGET_EVICT_STEP_BYTES: Final = 64 * 1024
"""Bytes of a budget eviction an insert performs besides twice its own (≈ 400 entries of
100 B, ~0.1 ms): the eviction ends within a few inserts without stalling any one of them."""


ENTRY_OVERHEAD_BYTES: Final = 56
"""What a cached entry costs besides its payload's length, counted against the bounds: its
slots in its block's two lists (≈ 17 bytes with their growth room, measured with
tracemalloc over 100 000 cached entries) and the ``bytes`` object's header (33). For
100 B messages unbatched that is a third of the memory: counted by payload alone, a
16 MiB budget would hold ≈ 24 MB."""

DEFAULT_CACHE_SIZE_MAX_BYTES: Final = 16 * 1024 * 1024
"""Default budget of all entry caches of a broker together (``--managed-ledger-cache-size-mb``).
A consumer that keeps up reads an entry within milliseconds of its write; 16 MiB is about
0.15 s of batched 100 B messages at a million a second. A slower one reads from bookies."""
DEFAULT_EVICTION_WATERMARK: Final = 0.9
"""Eviction brings the caches down to this fraction of the budget (Pulsar's
``managedLedgerCacheEvictionWatermark``), so it runs once per tenth of the budget inserted,
not on every insert."""


class EntryCacheBudget:
    """Bytes all the :class:`EntryCache` s sharing it may hold together.

    ``size_max_bytes <= 0`` turns caching off for every cache that shares it.
    """

    __slots__ = (
        "_caches",
        "_plan",
        "evicted_bytes",
        "eviction_watermark",
        "size_bytes",
        "size_max_bytes",
    )

    def __init__(
        self, size_max_bytes: int, eviction_watermark: float = DEFAULT_EVICTION_WATERMARK
    ) -> None:
        assert 0.0 < eviction_watermark <= 1.0, eviction_watermark
        self.size_max_bytes = size_max_bytes
        self.eviction_watermark = eviction_watermark
        self.size_bytes = 0
        """Bytes held by all caches sharing this budget."""
        self.evicted_bytes = 0
        """Bytes dropped so far because the budget was full (a counter, for metrics)."""
        self._caches: set[EntryCache] = set()
        self._plan: list[tuple[EntryCache, int]] = []
        """The eviction under way: caches and the bytes each still gives up, the next last."""

    @property
    def caches(self) -> int:
        """How many caches hold entries."""
        return len(self._caches)

    @property
    def evicting(self) -> bool:
        """Whether the caches are over the budget or an eviction is under way."""
        return self.size_bytes > self.size_max_bytes or bool(self._plan)

    def evict(self, now_max_bytes: int) -> int:
        """Bring the caches under the watermark: the largest caches, oldest entries first,
        each giving up its share of the excess in proportion to its size. Returns the bytes
        dropped. It drops about ``now_max_bytes`` at most now and keeps the rest of the
        plan for the next calls (:attr:`evicting` says one is due). Sorts the
        caches that hold entries once per eviction (as Pulsar's eviction policy does): with
        the watermark that is once per tenth of the budget inserted, not per insert."""
        target = int(self.size_max_bytes * self.eviction_watermark)
        if not self._plan:
            excess = self.size_bytes - target
            if excess <= 0:
                return 0
            total = self.size_bytes
            planned = 0
            for cache in sorted(self._caches, key=lambda c: c.size_bytes, reverse=True):
                if planned >= excess:
                    break
                share = -(-excess * cache.size_bytes // total)  # rounded up: never zero
                self._plan.append((cache, share))
                planned += share
            self._plan.reverse()
        plan = self._plan
        freed = 0
        while plan and freed < now_max_bytes and self.size_bytes > target:
            cache, share = plan.pop()
            dropped = cache.drop_oldest(min(share, now_max_bytes - freed))
            freed += dropped
            if 0 < dropped < share:
                plan.append((cache, share - dropped))
        if self.size_bytes <= target:
            plan.clear()
        self.evicted_bytes += freed
        return freed


class _Block:
    """Consecutive entries of one ledger, in the order they were cached: entries
    ``first + start`` .. ``first + len(datas) - 1`` (``datas[:start]`` have left; their
    slots hold None until the block is compacted). ``counts[i]`` is ``datas[i]``'s message
    count when its appender gave one."""

    __slots__ = ("counts", "datas", "first", "ledger_id", "start")

    def __init__(self, ledger_id: int, first: int) -> None:
        self.ledger_id = ledger_id
        self.first = first
        self.datas: list[bytes | None] = []
        self.counts: list[int | None] = []
        self.start = 0


_NONES: Final = (None,) * 256
"""What the slots of entries that left hold until their block is compacted."""


def _live_first(block: _Block) -> int:
    """The first entry id ``block`` still holds: a ledger's blocks are ordered by it (their
    live entries never overlap, so an eviction from a block's front keeps the order)."""
    return block.first + block.start


_NO_BLOCKS: deque[_Block] = deque()
_NO_LEDGERS: dict[int, list[_Block]] = {}
_NO_TOPS: dict[int, int] = {}
"""The tables of every empty cache (never added to: :meth:`EntryCache.insert_run` makes a
cache its own tables first). Most topics of a broker with many are idle, their caches
empty."""


class EntryCache:
    """Entries kept as blocks of consecutive entries of one ledger, in the order they were
    cached: appends extend the newest block (a list ``extend``), evictions take from the
    oldest block's front, reads slice a block, with no per-entry key or table slot. The
    order of entries across blocks is the order they came in, as a table keyed by position
    in insertion order would keep it (what the bounds and evictions go by)."""

    __slots__ = (
        "_age_mark",
        "_age_mark_ms",
        "_blocks",
        "_budget",
        "_by_ledger",
        "_count",
        "_floor",
        "_size_bytes",
        "_tops",
        "hits",
        "misses",
        "size_max_bytes",
    )

    def __init__(self, size_max_bytes: int, budget: EntryCacheBudget | None = None) -> None:
        """``size_max_bytes`` bounds this cache; ``budget`` (shared with the process's other
        caches) bounds them all together. Without one the cache has a budget of its own.
        The budget refers to a cache while it holds entries: its owner calls :meth:`clear`
        when done with it."""
        self.size_max_bytes = size_max_bytes
        self._budget = budget if budget is not None else EntryCacheBudget(size_max_bytes)
        self._blocks = _NO_BLOCKS
        """The blocks, oldest cached first."""
        self._by_ledger = _NO_LEDGERS
        """Each ledger's blocks (usually one), by the first entry each still holds
        (:func:`_live_first`)."""
        self._tops = _NO_TOPS
        """Per ledger with blocks, an entry id past every one it has cached (an upper
        bound: evictions leave it): a run from there on holds no entry already cached."""
        self._count = 0
        self._size_bytes = 0
        self._floor: Position | None = None
        """Entries before this are dropped a few per insert (see the module docstring)."""
        self._age_mark: Position | None = None
        """The newest entry when :meth:`evict_older_than` last looked (None: no mark)."""
        self._age_mark_ms = 0
        """When that was (the caller's clock, ms)."""
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def insert(self, position: Position, data: bytes, messages: int | None = None) -> None:
        """Cache one entry (with its message count if known); evicts the oldest inserted
        entries beyond the byte bound."""
        self.insert_run(
            position[0], position[1], (data,), None if messages is None else (messages,)
        )

    def insert_run(
        self,
        ledger_id: int,
        first_entry_id: int,
        datas: Sequence[bytes],
        messages: Sequence[int] | None = None,
    ) -> None:
        """Cache entries ``ledger_id:first_entry_id`` … (``messages[i]`` messages in
        ``datas[i]``, if known), as :meth:`insert` of each in order would: an entry already
        cached, or bigger than the bound, is skipped. The byte bounds are enforced once,
        after the run (the oldest inserted go first)."""
        budget = self._budget
        count = len(datas)
        if not count:
            return
        if not self._count and self._blocks is _NO_BLOCKS:
            self._blocks = deque()
            self._by_ledger = {}
            self._tops = {}
        size_max = self.size_max_bytes
        if budget.size_max_bytes < size_max:
            size_max = budget.size_max_bytes
        sizes = list(map(len, datas))
        tops = self._tops
        if (  # an append: past all the ledger has cached, every entry within the bound
            first_entry_id >= tops.get(ledger_id, first_entry_id)
            and max(sizes) + ENTRY_OVERHEAD_BYTES <= size_max
        ):
            last = self._tail_block(ledger_id, first_entry_id)
            tops[ledger_id] = first_entry_id + count
            last.datas.extend(datas)
            last.counts.extend(repeat(None, count) if messages is None else messages)
            self._count += count
            added_count = count
            added = sum(sizes) + ENTRY_OVERHEAD_BYTES * count
        else:
            added_count, added = self._insert_each(
                ledger_id, first_entry_id, datas, messages, sizes, size_max
            )
        if not self._count:
            self._forget(0)
            return
        if added_count:
            if not self._count - added_count:
                budget._caches.add(self)
            self._size_bytes += added
            budget.size_bytes += added
        if self._floor is not None:
            self._evict_below_floor(_EVICT_PER_INSERT * count)
        if self._size_bytes > self.size_max_bytes:
            self.drop_oldest(self._size_bytes - self.size_max_bytes)
        if budget.evicting:
            budget.evict(2 * added + _BUDGET_EVICT_STEP_BYTES)

    def _insert_each(
        self,
        ledger_id: int,
        first_entry_id: int,
        datas: Sequence[bytes],
        messages: Sequence[int] | None,
        sizes: list[int],
        size_max: int,
    ) -> tuple[int, int]:
        """:meth:`insert_run` entry by entry (a run that does not just extend the newest
        block); returns the entries and bytes added."""
        added_count = 0
        added = 0
        for i, data in enumerate(datas):
            size = sizes[i] + ENTRY_OVERHEAD_BYTES
            entry_id = first_entry_id + i
            if size > size_max or self._find(ledger_id, entry_id) is not None:
                continue
            last = self._tail_block(ledger_id, entry_id)
            if entry_id >= self._tops.get(ledger_id, 0):
                self._tops[ledger_id] = entry_id + 1
            last.datas.append(data)
            last.counts.append(None if messages is None else messages[i])
            added_count += 1
            added += size
        self._count += added_count
        return added_count, added

    def _tail_block(self, ledger_id: int, entry_id: int) -> _Block:
        """The block ``ledger_id:entry_id`` (not cached) goes to: the newest block when it
        ends right before it, else a new one (the newest then)."""
        blocks = self._blocks
        if blocks:
            last = blocks[-1]
            if last.ledger_id == ledger_id and last.first + len(last.datas) == entry_id:
                return last
        last = _Block(ledger_id, entry_id)
        blocks.append(last)
        insort(self._by_ledger.setdefault(ledger_id, []), last, key=_live_first)
        return last

    def _find(self, ledger_id: int, entry_id: int) -> tuple[_Block, int] | None:
        """The block holding ``ledger_id:entry_id`` and its index there (None: not cached)."""
        mine = self._by_ledger.get(ledger_id)
        if not mine:
            return None
        if len(mine) == 1:
            block = mine[0]
        else:  # the last block holding entries from at or before it: the only one it may be in
            k = bisect_right(mine, entry_id, key=_live_first) - 1
            if k < 0:
                return None
            block = mine[k]
        i = entry_id - block.first
        if block.start <= i < len(block.datas):
            return block, i
        return None

    def _drop_front(self, block: _Block, k: int) -> int:
        """Drop the ``k`` oldest entries of ``block`` (the oldest block); returns their
        bytes (the caller accounts for them with :meth:`_forget`)."""
        start = block.start
        datas = block.datas
        end = start + k
        if k == 1:
            freed = len(datas[start]) + ENTRY_OVERHEAD_BYTES  # type: ignore[arg-type]
        else:
            freed = sum(map(len, islice(datas, start, end))) + ENTRY_OVERHEAD_BYTES * k  # type: ignore[arg-type]
        self._count -= k
        if end == len(datas):
            self._blocks.popleft()
            mine = self._by_ledger[block.ledger_id]
            if len(mine) == 1:  # the ledger's last block
                del self._by_ledger[block.ledger_id]
                del self._tops[block.ledger_id]
            else:
                del mine[bisect_right(mine, _live_first(block), key=_live_first) - 1]
            return freed
        if k == 1:
            datas[start] = None
        else:  # (message counts are small ints: kept until compacted, they hold nothing)
            datas[start:end] = _NONES[:k] if k <= len(_NONES) else repeat(None, k)
        if end >= _COMPACT_MIN and 2 * end >= len(datas):
            del datas[:end]
            del block.counts[:end]
            block.first += end
            end = 0
        block.start = end
        return freed

    def drop_oldest(self, size_bytes: int) -> int:
        """Drop the oldest inserted entries until at least ``size_bytes`` are freed (or the
        cache is empty); returns the bytes freed."""
        blocks = self._blocks
        freed = 0
        while freed < size_bytes and blocks:
            block = blocks[0]
            datas = block.datas
            k = 0
            need = size_bytes - freed
            got = 0
            for data in islice(datas, block.start, None):
                got += len(data) + ENTRY_OVERHEAD_BYTES  # type: ignore[arg-type]
                k += 1
                if got >= need:
                    break
            freed += self._drop_front(block, k)
        self._forget(freed)
        return freed

    def _forget(self, size_bytes: int) -> None:
        """Account for ``size_bytes`` dropped from this cache, here and in the budget."""
        self._size_bytes -= size_bytes
        budget = self._budget
        budget.size_bytes -= size_bytes
        if not self._count:
            budget._caches.discard(self)
            # an emptied cache gives its tables back (an idle topic holds none)
            self._blocks = _NO_BLOCKS
            self._by_ledger = _NO_LEDGERS
            self._tops = _NO_TOPS

    def messages_of(self, position: Position) -> int | None:
        """The message count given when ``position`` was cached (None if not given or
        not cached)."""
        found = self._find(position[0], position[1])
        return None if found is None else found[0].counts[found[1]]

    def get(self, position: Position) -> bytes | None:
        found = self._find(position[0], position[1])
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        return found[0].datas[found[1]]

    def get_run(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """The cached prefix of entries ``first..last`` of one ledger (stops at a miss)."""
        return self.run(ledger_id, first, last)[1]

    def _collect(
        self, ledger_id: int, first: int, last: int
    ) -> tuple[list[bytes], list[int | None]]:
        """The cached prefix of entries ``first..last`` (``last >= first``): bytes and
        message counts, a slice of a block at a time."""
        lst = self._by_ledger.get(ledger_id)
        if lst is not None and len(lst) == 1:  # the usual case: one block, slices of it
            block = lst[0]
            i = first - block.first
            if block.start <= i < len(block.datas):
                j = min(last - block.first + 1, len(block.datas))
                return block.datas[i:j], block.counts[i:j]  # type: ignore[return-value]
            return [], []
        data: list[bytes] = []
        counts: list[int | None] = []
        entry_id = first
        while entry_id <= last:
            found = self._find(ledger_id, entry_id)
            if found is None:
                break
            block, i = found
            j = min(i + last - entry_id + 1, len(block.datas))
            data += block.datas[i:j]  # type: ignore[arg-type]
            counts += block.counts[i:j]
            entry_id += j - i
        return data, counts

    def run(
        self, ledger_id: int, first: int, last: int
    ) -> tuple[list[Position], list[bytes], list[int | None]]:
        """The cached prefix of entries ``first..last`` of one ledger (stops at a miss):
        their positions, bytes and message counts (None where the appender gave none)."""
        if last < first:
            return [], [], []
        data, counts = self._collect(ledger_id, first, last)
        if len(data) <= last - first:
            self.misses += 1
        self.hits += len(data)
        return positions_of(ledger_id, first, len(data)), data, counts

    def run_whole(
        self, ledger_id: int, first: int, last: int
    ) -> tuple[list[Position], list[bytes], list[int | None]] | None:
        """Like :meth:`run` when every entry ``first..last`` is cached; None (and no miss
        counted: the caller reads again through :meth:`run`) when one is not."""
        if last < first:
            return [], [], []
        data, counts = self._collect(ledger_id, first, last)
        if len(data) <= last - first:
            return None
        self.hits += len(data)
        return positions_of(ledger_id, first, len(data)), data, counts

    def evict_before_gradually(self, position: Position, now_max: int = 1024) -> int:
        """Drop at most ``now_max`` entries before ``position`` now (oldest inserted first)
        and the rest a few per later insert. Returns how many were dropped now."""
        self.set_floor(position)
        return self._evict_below_floor(now_max)

    def set_floor(self, position: Position) -> None:
        """Drop the entries before ``position`` a few per later insert, none now (the
        managed ledger calls it with its slowest reader's position on every append)."""
        self._floor = position

    def _evict_below_floor(self, limit: int) -> int:
        """Drop the oldest inserted entries while they are below the floor, ``limit`` at
        most; forget the floor once an entry at or past it (or none) is next."""
        floor = self._floor
        assert floor is not None
        floor_ledger, floor_entry = floor
        blocks = self._blocks
        n = 0
        freed = 0
        while n < limit and blocks:
            block = blocks[0]
            size = len(block.datas)
            ledger_id = block.ledger_id
            if ledger_id < floor_ledger:
                end = size
            elif ledger_id == floor_ledger:
                end = floor_entry - block.first
                if end > size:
                    end = size
            else:
                break
            below = end - block.start
            if below <= 0:
                break
            k = limit - n
            if k > below:
                k = below
            freed += self._drop_front(block, k)
            n += k
            if k < below or end < size:  # the limit, or an entry at the floor is next
                break
        if n < limit:
            self._floor = None  # nothing left below it
        if freed:
            self._forget(freed)
        return n

    def evict_older_than(self, now_ms: int, age_max_ms: int, now_max: int = 1024) -> int:
        """Drop entries cached more than ``age_max_ms`` ago (by the caller's clock, ``now_ms``
        on every call from the same clock), at most ``now_max`` now and the rest at the next
        calls. Returns how many were dropped. ``age_max_ms < 0`` turns this off.

        Called about once per maintenance round: each call marks the newest entry, and a later
        call at least ``age_max_ms`` after the mark drops every entry up to it (entries leave
        in the order they came, so no time is stored per entry and inserts cost nothing more).
        An entry thus goes between ``age_max_ms`` and about twice that plus two rounds after
        it came. An entry cached again after it left (a catch-up read) counts from then."""
        if age_max_ms < 0:
            return 0
        mark = self._age_mark
        dropped = 0
        if mark is not None and now_ms - self._age_mark_ms >= age_max_ms:
            found = self._find(mark[0], mark[1])
            if found is not None:
                marked_block, marked_i = found
                blocks = self._blocks
                freed = 0
                while dropped < now_max and blocks:
                    block = blocks[0]
                    if block is marked_block:
                        k = marked_i - block.start + 1
                    else:
                        k = len(block.datas) - block.start
                    take = min(k, now_max - dropped)
                    freed += self._drop_front(block, take)
                    dropped += take
                    if block is marked_block and take == k:
                        mark = None
                        break
                if freed:
                    self._forget(freed)
            else:  # already gone, with everything before it
                mark = None
        if mark is None:
            blocks = self._blocks
            if blocks:
                newest = blocks[-1]
                self._age_mark = Position(newest.ledger_id, newest.first + len(newest.datas) - 1)
                self._age_mark_ms = now_ms
            else:
                self._age_mark = None
        return dropped

    def clear(self) -> None:
        """Drop everything (the managed ledger closes); gives its bytes back to the budget."""
        self._floor = None
        self._age_mark = None
        self._count = 0
        self._forget(self._size_bytes)
