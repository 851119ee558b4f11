"""A compact set of positions stored as closed ranges, kept per ledger.

A cursor acknowledges entries out of order; everything at or before its mark-delete position
is acknowledged, and the acknowledged entries *beyond* it form holes-and-islands that this
set records as closed ranges ``[first, last]`` of entry ids within one ledger. The set must
stay small and fast with millions of holes, so each ledger's ranges live in two sorted
``array('q')`` columns (starts, ends): 16 bytes per range, bisect to find one, and an
append-only fast path for the common case of acknowledgements arriving roughly in order.

Ranges never cross a ledger boundary: whether ``(L, last)`` and ``(L', 0)`` are adjacent
depends on the ledger list (``L``'s last entry id and whether ledgers between are empty), which
this set does not know. Callers that do know it pass it in: :meth:`first_missing_after` takes a
"next position" function, and :meth:`merged_spans` takes the ledger list (id, entry count) to
join ranges across ledger boundaries.

Not thread-safe; owned by one cursor.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Sequence

from magnetar.managed_ledger.position import Position

_FORMAT_VERSION = 1
_LEDGER_HEADER = struct.Struct("<qI")
_BIG_ENDIAN = sys.byteorder == "big"


class _Ranges:
    """The ranges of one ledger: parallel sorted columns of inclusive starts and ends."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")


class PositionRangeSet:
    """A set of positions, stored as disjoint, non-adjacent closed ranges per ledger.

    ``len(s)`` is the number of ranges; :attr:`size` is the number of positions.
    """

    __slots__ = ("_by_ledger", "_ledgers", "_size")

    def __init__(self) -> None:
        self._by_ledger: dict[int, _Ranges] = {}
        self._ledgers: list[int] = []  # sorted ids of ledgers that hold at least one range
        self._size = 0

    # --- queries -----------------------------------------------------------------------

    def __len__(self) -> int:
        return sum(len(r.starts) for r in self._by_ledger.values())

    @property
    def size(self) -> int:
        """Number of positions in the set."""
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __contains__(self, position: object) -> bool:
        if not isinstance(position, tuple):
            return False
        ledger_id, entry_id = position
        r = self._by_ledger.get(ledger_id)
        if r is None:
            return False
        i = bisect_right(r.starts, entry_id)
        return i > 0 and r.ends[i - 1] >= entry_id

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        """The range ``(first, last)`` holding ``position``, or ``None``."""
        r = self._by_ledger.get(position[0])
        if r is None:
            return None
        i = bisect_right(r.starts, position[1])
        if i > 0 and r.ends[i - 1] >= position[1]:
            return Position(position[0], r.starts[i - 1]), Position(position[0], r.ends[i - 1])
        return None

    def first(self) -> Position | None:
        """The smallest position in the set, or ``None`` when empty."""
        if not self._ledgers:
            return None
        ledger_id = self._ledgers[0]
        return Position(ledger_id, self._by_ledger[ledger_id].starts[0])

    def last(self) -> Position | None:
        """The largest position in the set, or ``None`` when empty."""
        if not self._ledgers:
            return None
        ledger_id = self._ledgers[-1]
        return Position(ledger_id, self._by_ledger[ledger_id].ends[-1])

    def ranges(self) -> Iterator[tuple[Position, Position]]:
        """Every range ``(first, last)`` in position order. Do not mutate while iterating."""
        for ledger_id in self._ledgers:
            r = self._by_ledger[ledger_id]
            for start, end in zip(r.starts, r.ends, strict=True):
                yield Position(ledger_id, start), Position(ledger_id, end)

    def ledger_ids(self) -> list[int]:
        """Ids of the ledgers that hold at least one position, ascending (a copy)."""
        return list(self._ledgers)

    def count_in(self, first: Position, last: Position) -> int:
        """How many positions of the set lie in ``[first, last]`` (both inclusive)."""
        if last < first:
            return 0
        total = 0
        lo = bisect_left(self._ledgers, first[0])
        hi = bisect_right(self._ledgers, last[0])
        for ledger_id in self._ledgers[lo:hi]:
            r = self._by_ledger[ledger_id]
            a = first[1] if ledger_id == first[0] else -(2**62)
            b = last[1] if ledger_id == last[0] else 2**62
            total += _count_clipped(r, a, b)
        return total

    def next_start_after(self, position: Position) -> int | None:
        """Entry id where the next range of ``position``'s ledger after it starts, if any."""
        r = self._by_ledger.get(position[0])
        if r is None:
            return None
        i = bisect_right(r.starts, position[1])
        return r.starts[i] if i < len(r.starts) else None

    def first_missing_after(
        self, position: Position, next_position: Callable[[Position], Position]
    ) -> Position:
        """The first position after ``position`` that is not in the set.

        ``next_position`` maps a position to the one that follows it in the log (it knows
        ledger boundaries and empty ledgers); this method hops over whole ranges with it.
        """
        candidate = next_position(position)
        while True:
            r = self._by_ledger.get(candidate[0])
            if r is None:
                return candidate
            i = bisect_right(r.starts, candidate[1])
            if i == 0 or r.ends[i - 1] < candidate[1]:
                return candidate
            candidate = next_position(Position(candidate[0], r.ends[i - 1]))

    def merged_spans(
        self, ledgers: Sequence[tuple[int, int]]
    ) -> Iterator[tuple[Position, Position]]:
        """Ranges joined across ledger boundaries, normalised by the ledger list.

        ``ledgers`` is the log's ledger list as ``(ledger_id, entry_count)`` in order. A range
        ending at a ledger's last entry joins a range starting at entry 0 of the next
        non-empty ledger. Ranges of ledgers absent from the list are dropped, and ranges are
        clipped to each ledger's entries.
        """
        pending: tuple[Position, Position] | None = None
        chain_open = False  # ``pending`` ends at the last entry of the previous ledger
        for ledger_id, entry_count in ledgers:
            if entry_count <= 0:
                continue  # an empty ledger neither breaks nor extends a chain
            r = self._by_ledger.get(ledger_id)
            if r is None:
                if pending is not None:
                    yield pending
                pending, chain_open = None, False
                continue
            for start, end in zip(r.starts, r.ends, strict=True):
                if start >= entry_count:
                    break
                stop = Position(ledger_id, min(end, entry_count - 1))
                if pending is not None and chain_open and start == 0:
                    pending = (pending[0], stop)
                else:
                    if pending is not None:
                        yield pending
                    pending = (Position(ledger_id, start), stop)
                chain_open = False
            chain_open = pending is not None and pending[1] == (ledger_id, entry_count - 1)
            if pending is not None and not chain_open:
                yield pending
                pending = None
        if pending is not None:
            yield pending

    # --- updates -----------------------------------------------------------------------

    def add(self, position: Position) -> bool:
        """Add one position; returns ``False`` if it was already present."""
        ledger_id, entry_id = position
        r = self._by_ledger.get(ledger_id)
        if r is None:
            r = _Ranges()
            self._by_ledger[ledger_id] = r
            insort(self._ledgers, ledger_id)
            r.starts.append(entry_id)
            r.ends.append(entry_id)
            self._size += 1
            return True
        starts, ends = r.starts, r.ends
        last_end = ends[-1]
        if entry_id > last_end:  # fast path: acknowledgements mostly arrive in order
            if entry_id == last_end + 1:
                ends[-1] = entry_id
            else:
                starts.append(entry_id)
                ends.append(entry_id)
            self._size += 1
            return True
        i = bisect_right(starts, entry_id)
        if i > 0 and ends[i - 1] >= entry_id:
            return False
        merge_left = i > 0 and ends[i - 1] == entry_id - 1
        merge_right = i < len(starts) and starts[i] == entry_id + 1
        if merge_left and merge_right:
            ends[i - 1] = ends[i]
            del starts[i]
            del ends[i]
        elif merge_left:
            ends[i - 1] = entry_id
        elif merge_right:
            starts[i] = entry_id
        else:
            starts.insert(i, entry_id)
            ends.insert(i, entry_id)
        self._size += 1
        return True

    def add_range(self, first: Position, last: Position) -> int:
        """Add every position in ``[first, last]`` (one ledger); returns how many were new."""
        if first[0] != last[0]:
            raise ValueError("a range lies within one ledger")
        if last[1] < first[1]:
            return 0
        ledger_id, a, b = first[0], first[1], last[1]
        r = self._by_ledger.get(ledger_id)
        if r is None:
            r = _Ranges()
            self._by_ledger[ledger_id] = r
            insort(self._ledgers, ledger_id)
        starts, ends = r.starts, r.ends
        lo = bisect_left(ends, a - 1)  # first range that overlaps or touches [a, b]
        hi = bisect_right(starts, b + 1)  # ranges before hi start at or before b + 1
        covered = 0
        new_start, new_end = a, b
        if lo < hi:
            covered = _count_clipped_slice(starts, ends, lo, hi, a, b)
            new_start = min(a, starts[lo])
            new_end = max(b, ends[hi - 1])
        starts[lo:hi] = array("q", (new_start,))
        ends[lo:hi] = array("q", (new_end,))
        added = (b - a + 1) - covered
        self._size += added
        return added

    def remove_up_to(self, position: Position) -> list[tuple[Position, Position]]:
        """Remove every position ``<= position``; returns the removed ranges (clipped)."""
        removed: list[tuple[Position, Position]] = []
        cut = bisect_right(self._ledgers, position[0])
        for ledger_id in self._ledgers[:cut]:
            r = self._by_ledger[ledger_id]
            if ledger_id < position[0]:
                for start, end in zip(r.starts, r.ends, strict=True):
                    removed.append((Position(ledger_id, start), Position(ledger_id, end)))
                    self._size -= end - start + 1
                del self._by_ledger[ledger_id]
                continue
            # the ledger of ``position`` itself: drop or clip the ranges starting at or before
            entry_id = position[1]
            k = bisect_right(r.starts, entry_id)
            for j in range(k):
                start, end = r.starts[j], r.ends[j]
                stop = min(end, entry_id)
                removed.append((Position(ledger_id, start), Position(ledger_id, stop)))
                self._size -= stop - start + 1
            keep_clipped = k > 0 and r.ends[k - 1] > entry_id
            tail_end = r.ends[k - 1] if keep_clipped else 0
            del r.starts[:k]
            del r.ends[:k]
            if keep_clipped:
                r.starts.insert(0, entry_id + 1)
                r.ends.insert(0, tail_end)
            if not r.starts:
                del self._by_ledger[ledger_id]
        self._ledgers = [lid for lid in self._ledgers if lid in self._by_ledger]
        return removed

    def pop_range_starting_at(self, position: Position) -> Position | None:
        """If a range starts exactly at ``position``, remove it and return its last
        position; else ``None``. (How a cursor's mark-delete swallows a closed gap.)"""
        r = self._by_ledger.get(position[0])
        if r is None:
            return None
        i = bisect_left(r.starts, position[1])
        if i == len(r.starts) or r.starts[i] != position[1]:
            return None
        end = r.ends[i]
        del r.starts[i]
        del r.ends[i]
        self._size -= end - position[1] + 1
        if not r.starts:
            del self._by_ledger[position[0]]
            self._ledgers.remove(position[0])
        return Position(position[0], end)

    def clear(self) -> None:
        self._by_ledger.clear()
        self._ledgers.clear()
        self._size = 0

    # --- encoding ----------------------------------------------------------------------

    def serialize(self, ranges_max: int | None = None) -> bytes:
        """Compact bytes: zlib over per-ledger columns of little-endian int64.

        ``ranges_max`` keeps only the first (oldest) ranges. Dropping later ranges is safe
        for a cursor: those entries would be redelivered after a restart, never lost.
        """
        parts: list[bytes] = [bytes((_FORMAT_VERSION,))]
        budget = ranges_max if ranges_max is not None else 2**62
        for ledger_id in self._ledgers:
            if budget <= 0:
                break
            r = self._by_ledger[ledger_id]
            n = min(len(r.starts), budget)
            budget -= n
            starts, ends = r.starts[:n], r.ends[:n]
            if _BIG_ENDIAN:
                starts.byteswap()
                ends.byteswap()
            parts.append(_LEDGER_HEADER.pack(ledger_id, n))
            parts.append(starts.tobytes())
            parts.append(ends.tobytes())
        return zlib.compress(b"".join(parts), 1)

    @classmethod
    def deserialize(cls, data: bytes) -> PositionRangeSet:
        """Inverse of :meth:`serialize`. Raises ``ValueError`` on malformed input."""
        try:
            raw = zlib.decompress(data)
        except zlib.error as exc:
            raise ValueError(f"bad range set encoding: {exc}") from exc
        if not raw or raw[0] != _FORMAT_VERSION:
            raise ValueError("unknown range set format")
        out = cls()
        offset = 1
        while offset < len(raw):
            if offset + _LEDGER_HEADER.size > len(raw):
                raise ValueError("truncated range set")
            ledger_id, n = _LEDGER_HEADER.unpack_from(raw, offset)
            offset += _LEDGER_HEADER.size
            width = 8 * n
            if offset + 2 * width > len(raw):
                raise ValueError("truncated range set")
            starts = array("q")
            starts.frombytes(raw[offset : offset + width])
            ends = array("q")
            ends.frombytes(raw[offset + width : offset + 2 * width])
            offset += 2 * width
            if _BIG_ENDIAN:
                starts.byteswap()
                ends.byteswap()
            # re-adding validates order and merges anything a producer left unmerged
            for start, end in zip(starts, ends, strict=True):
                out.add_range(Position(ledger_id, start), Position(ledger_id, end))
        return out

    @classmethod
    def from_ranges(cls, ranges: Iterable[tuple[Position, Position]]) -> PositionRangeSet:
        out = cls()
        for first, last in ranges:
            out.add_range(first, last)
        return out


def _count_clipped(r: _Ranges, a: int, b: int) -> int:
    lo = bisect_left(r.ends, a)
    hi = bisect_right(r.starts, b)
    return _count_clipped_slice(r.starts, r.ends, lo, hi, a, b) if lo < hi else 0


def _count_clipped_slice(
    starts: array[int], ends: array[int], lo: int, hi: int, a: int, b: int
) -> int:
    total = 0
    for j in range(lo, hi):
        s = starts[j] if starts[j] > a else a
        e = ends[j] if ends[j] < b else b
        if e >= s:
            total += e - s + 1
    return total
