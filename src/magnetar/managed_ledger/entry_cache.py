"""The tailing-read cache: recently appended entries served from memory.

Cursors that keep up with producers read what was just appended without touching bookies.
The cache is bounded in bytes; entries before the slowest active reader are evicted first
(nobody will ask for them), then the oldest inserted when over the bound. Catch-up reads
from bookies put only their read-ahead surplus here.

Eviction of read entries is spread out: :meth:`evict_before_gradually` drops a bounded
number at once and records the position as a floor; each later :meth:`insert` drops a few
more below it. A topic taking 30 000 entries a second would otherwise drop 30 000 in one
go each maintenance round, a 10 ms stall of the event loop every second (the p99 of
publish latency).

Plain data structure, not thread-safe; owned by one managed ledger. Returned ``bytes`` are
shared (immutable), never copied.
"""

from __future__ import annotations

from collections import OrderedDict

from magnetar.managed_ledger.position import Position

_EVICT_PER_INSERT = 2
"""Entries below the floor dropped per insert: more than one, so the backlog of read
entries shrinks while appends go on."""


class EntryCache:
    __slots__ = (
        "_entries",
        "_floor",
        "_messages",
        "_size_bytes",
        "hits",
        "misses",
        "size_max_bytes",
    )

    def __init__(self, size_max_bytes: int) -> None:
        self.size_max_bytes = size_max_bytes
        self._entries: OrderedDict[Position, bytes] = OrderedDict()
        self._messages: dict[Position, int] = {}
        """Message counts of cached entries whose appender knew them (saves a parse)."""
        self._size_bytes = 0
        self._floor: Position | None = None
        """Entries before this are dropped a few per insert (see the module docstring)."""
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def insert(self, position: Position, data: bytes, messages: int | None = None) -> None:
        """Cache one entry (with its message count if known); evicts the oldest inserted
        entries beyond the byte bound."""
        if self.size_max_bytes <= 0 or len(data) > self.size_max_bytes:
            return
        if position in self._entries:
            return
        self._entries[position] = data
        if messages is not None:
            self._messages[position] = messages
        self._size_bytes += len(data)
        if self._floor is not None:
            self._evict_below_floor(_EVICT_PER_INSERT)
        while self._size_bytes > self.size_max_bytes:
            old_position, old = self._entries.popitem(last=False)
            self._messages.pop(old_position, None)
            self._size_bytes -= len(old)

    def messages_of(self, position: Position) -> int | None:
        """The message count given when ``position`` was cached (None if not given or
        not cached)."""
        return self._messages.get(position)

    def get(self, position: Position) -> bytes | None:
        data = self._entries.get(position)
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def get_run(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """The cached prefix of entries ``first..last`` of one ledger (stops at a miss)."""
        out: list[bytes] = []
        entries = self._entries
        for e in range(first, last + 1):
            data = entries.get(Position(ledger_id, e))
            if data is None:
                self.misses += 1
                break
            out.append(data)
        self.hits += len(out)
        return out

    def evict_before_gradually(self, position: Position, now_max: int = 1024) -> int:
        """Drop at most ``now_max`` entries before ``position`` now (oldest inserted first)
        and the rest a few per later insert. Returns how many were dropped now."""
        self._floor = position
        return self._evict_below_floor(now_max)

    def _evict_below_floor(self, limit: int) -> int:
        floor = self._floor
        assert floor is not None
        entries = self._entries
        messages = self._messages
        n = 0
        while n < limit and entries:
            first = next(iter(entries))
            if first >= floor:
                break
            self._size_bytes -= len(entries.pop(first))
            messages.pop(first, None)
            n += 1
        if n < limit:
            self._floor = None  # nothing left below it
        return n

    def clear(self) -> None:
        self._floor = None
        self._entries.clear()
        self._messages.clear()
        self._size_bytes = 0
