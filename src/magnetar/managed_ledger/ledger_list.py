"""The ordered list of ledgers (segments) that make up a managed ledger, as plain data.

This is the sans-IO view of the log that cursors and trimming reason about: which ledgers
exist, how many entries/bytes/messages each holds, where one ledger ends and the next
begins (skipping empty ledgers), and how many entries or messages lie between two positions.

Message counts: the caller gives the number of messages in each entry when appending (a
batch is one entry of many messages). For ledgers appended by this process the list keeps a
per-entry prefix sum (8 bytes per entry), so message counts of any span are exact. For
ledgers known only from metadata (written before a restart) only the ledger's total is known;
counts of a partial span of such a ledger are a proportional estimate (as Pulsar's backlog
in messages also is), and exact for whole ledgers.

Not thread-safe; owned by one managed ledger.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from magnetar.managed_ledger.offload import OffloadContext
from magnetar.managed_ledger.position import Position


@dataclass(slots=True)
class LedgerSegment:
    """One ledger of the log. ``entries`` counts entries 0..entries-1 that exist."""

    ledger_id: int
    entries: int = 0
    size_bytes: int = 0
    messages: int = 0
    created_ms: int = 0
    closed_ms: int | None = None
    """When the ledger was closed (no more appends), ``None`` while it is the open ledger."""
    last_add_ms: int = 0
    """When the last entry was appended (every entry of the ledger is at least this old)."""
    offload: OffloadContext | None = None
    """The tiered-storage attempt recorded for this ledger (None: never offloaded)."""
    message_prefix: array[int] | None = field(default=None, repr=False)
    """``message_prefix[i]`` = messages in entries ``< i`` (length ``entries + 1``), or
    ``None`` when per-entry counts are unknown (ledger known only from metadata) or every
    entry so far holds one message (``messages == entries``: unbatched publishing, where
    the array would cost 8 bytes an entry to say what the counts already say)."""

    @property
    def offloaded(self) -> bool:
        """Whether a complete tiered-storage copy exists."""
        return self.offload is not None and self.offload.complete

    @property
    def on_bookies(self) -> bool:
        """Whether the bookie copy still exists."""
        return self.offload is None or not self.offload.bookkeeper_deleted

    def messages_in(self, first: int, last: int) -> int:
        """Messages in entries ``first..last`` (inclusive, clipped to the ledger)."""
        first = max(first, 0)
        last = min(last, self.entries - 1)
        if last < first:
            return 0
        if self.message_prefix is not None:
            return self.message_prefix[last + 1] - self.message_prefix[first]
        # Proportional estimate through an estimated prefix sum, so estimates of adjacent
        # spans add up exactly (cursor counters stay consistent) and a whole ledger is exact.
        n = max(self.entries, 1)
        return (self.messages * (last + 1)) // n - (self.messages * first) // n

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "entries": self.entries,
            "size_bytes": self.size_bytes,
            "messages": self.messages,
            "created_ms": self.created_ms,
            "closed_ms": self.closed_ms,
            "last_add_ms": self.last_add_ms,
            "offload": None if self.offload is None else self.offload.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LedgerSegment:
        closed = data.get("closed_ms")
        offload = data.get("offload")
        return cls(
            ledger_id=int(data["ledger_id"] or 0),
            entries=int(data.get("entries") or 0),
            size_bytes=int(data.get("size_bytes") or 0),
            messages=int(data.get("messages") or 0),
            created_ms=int(data.get("created_ms") or 0),
            closed_ms=None if closed is None else int(closed),
            last_add_ms=int(data.get("last_add_ms") or 0),
            offload=None if offload is None else OffloadContext.from_json(offload),
        )


_ledger_id = attrgetter("ledger_id")


class LedgerList:
    """The log's ledgers in order (ascending ids). The last one may be open for appends."""

    __slots__ = ("_segments",)

    def __init__(self, segments: Sequence[LedgerSegment] = ()) -> None:
        self._segments: list[LedgerSegment] = []
        """Ascending ids: a ledger is found by bisection (no index table: one log of an idle
        topic holds one or two ledgers, and a table was ~220 B)."""
        for segment in segments:
            self.add_ledger(segment)

    # --- structure ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LedgerSegment]:
        return iter(self._segments)

    def __contains__(self, ledger_id: object) -> bool:
        return isinstance(ledger_id, int) and self._find(ledger_id) is not None

    def get(self, ledger_id: int) -> LedgerSegment | None:
        i = self._find(ledger_id)
        return None if i is None else self._segments[i]

    def _find(self, ledger_id: int) -> int | None:
        """The index of ledger ``ledger_id`` in the list (None: not in it)."""
        segments = self._segments
        n = len(segments)
        if n and segments[-1].ledger_id == ledger_id:  # the open ledger: most lookups
            return n - 1
        i = bisect_left(segments, ledger_id, key=_ledger_id)
        return i if i < n and segments[i].ledger_id == ledger_id else None

    @property
    def segments(self) -> list[LedgerSegment]:
        """The live list, oldest first. Callers must not mutate it."""
        return self._segments

    @property
    def last_segment(self) -> LedgerSegment | None:
        return self._segments[-1] if self._segments else None

    def add_ledger(self, segment: LedgerSegment) -> None:
        """Append a ledger; its id must exceed every id already in the list."""
        if self._segments and segment.ledger_id <= self._segments[-1].ledger_id:
            raise ValueError("ledger ids must increase")
        self._segments.append(segment)

    def remove_ledgers(self, ledger_ids: set[int]) -> list[LedgerSegment]:
        """Drop ledgers (trimming). Returns the removed segments in order."""
        removed = [s for s in self._segments if s.ledger_id in ledger_ids]
        if removed:
            self._segments = [s for s in self._segments if s.ledger_id not in ledger_ids]
        return removed

    def restore_front(self, segments: Sequence[LedgerSegment]) -> None:
        """Put back ledgers removed by :meth:`remove_ledgers` (a failed trim)."""
        self._segments = [*segments, *self._segments]

    def record_append(
        self, ledger_id: int, entry_id: int, size_bytes: int, messages: int, now_ms: int = 0
    ) -> None:
        """Account one appended entry of the open (last) ledger, in entry-id order."""
        self.record_appends(ledger_id, entry_id, size_bytes, (messages,), now_ms)

    def record_appends(
        self,
        ledger_id: int,
        first_entry_id: int,
        size_bytes: int,
        messages: Sequence[int],
        now_ms: int = 0,
    ) -> None:
        """Account appended entries ``first_entry_id`` … of the open (last) ledger, in
        entry-id order: ``size_bytes`` in all, ``messages[i]`` messages in the i-th."""
        segment = self._segments[-1]
        if segment.ledger_id != ledger_id or first_entry_id != segment.entries:
            raise ValueError(f"append {ledger_id}:{first_entry_id} out of order for {segment}")
        prefix = segment.message_prefix
        n = len(messages)
        if prefix is None and segment.messages != segment.entries:
            raise ValueError("per-entry counts unknown for a ledger with entries")
        if prefix is None and messages.count(1) == n:
            # One message an entry so far: no prefix array (8 bytes an entry), the
            # proportional count of :meth:`LedgerSegment.messages_in` is exact.
            added = n
        else:
            if prefix is None:
                prefix = segment.message_prefix = array("q", range(segment.entries + 1))
            start = total = prefix[-1]
            for m in messages:
                total += m
                prefix.append(total)
            added = total - start
        segment.entries += n
        segment.last_add_ms = now_ms
        segment.size_bytes += size_bytes
        segment.messages += added

    def ledger_pairs(self) -> list[tuple[int, int]]:
        """``(ledger_id, entry_count)`` for every ledger, in order."""
        return [(s.ledger_id, s.entries) for s in self._segments]

    # --- positions ---------------------------------------------------------------------

    @property
    def first_position(self) -> Position:
        """The first entry of the log (or the end position when the log holds none)."""
        for s in self._segments:
            if s.entries > 0:
                return Position(s.ledger_id, 0)
        return self.end_position

    @property
    def end_position(self) -> Position:
        """Where the next appended entry would go if the last ledger stays open:
        ``(last_ledger, entries)``. ``(-1, 0)`` for a list with no ledgers."""
        if not self._segments:
            return Position(-1, 0)
        s = self._segments[-1]
        return Position(s.ledger_id, s.entries)

    @property
    def last_confirmed(self) -> Position:
        """The last entry of the log, or the boundary before the first ledger if empty."""
        for s in reversed(self._segments):
            if s.entries > 0:
                return Position(s.ledger_id, s.entries - 1)
        if self._segments:
            return Position(self._segments[0].ledger_id, -1)
        return Position(-1, -1)

    def next_position(self, position: Position) -> Position:
        """The position after ``position`` in the log, skipping ledger ends, empty ledgers
        and trimmed ledgers. Past the last entry this is :attr:`end_position`."""
        ledger_id, entry_id = position
        i = self._find(ledger_id)
        if i is not None:
            if entry_id + 1 < self._segments[i].entries:
                return Position(ledger_id, entry_id + 1)
            start = i + 1
        else:
            start = self._first_index_after(ledger_id)
        for j in range(start, len(self._segments)):
            s = self._segments[j]
            if s.entries > 0:
                return Position(s.ledger_id, 0)
        end = self.end_position
        # a position already at/after the end stays where it is
        return max(end, Position(ledger_id, entry_id + 1)) if i == len(self._segments) - 1 else end

    def normalize(self, position: Position) -> Position:
        """The first existing entry at or after ``position`` (or :attr:`end_position`)."""
        if self.exists(position):
            return position
        return self.next_position(Position(position[0], max(position[1], 0) - 1))

    def previous_position(self, position: Position) -> Position:
        """The entry before ``position`` (``(L, -1)`` boundary of the first ledger if none)."""
        ledger_id, entry_id = position
        i = self._find(ledger_id)
        if i is not None and entry_id > 0:
            return Position(ledger_id, entry_id - 1)
        stop = i if i is not None else self._first_index_after(ledger_id)
        for j in range(stop - 1, -1, -1):
            s = self._segments[j]
            if s.entries > 0:
                return Position(s.ledger_id, s.entries - 1)
        if self._segments:
            return Position(self._segments[0].ledger_id, -1)
        return Position(ledger_id, -1)

    def exists(self, position: Position) -> bool:
        s = self.get(position[0])
        return s is not None and 0 <= position[1] < s.entries

    def entries_between(self, after: Position, upto: Position) -> int:
        """Number of existing entries ``e`` with ``after < e <= upto``."""
        return self._sum_between(after, upto, messages=False)

    def messages_between(self, after: Position, upto: Position) -> int:
        """Messages in the existing entries ``e`` with ``after < e <= upto``."""
        return self._sum_between(after, upto, messages=True)

    def size_between(self, after: Position, upto: Position) -> int:
        """Bytes of the entries ``after < e <= upto``; partial ledgers are estimated
        proportionally (per-entry sizes are not kept)."""
        if upto <= after:
            return 0
        total = 0
        for s in self._segments:
            if s.ledger_id < after[0] or s.entries == 0:
                continue
            if s.ledger_id > upto[0]:
                break
            first = after[1] + 1 if s.ledger_id == after[0] else 0
            last = min(upto[1] if s.ledger_id == upto[0] else s.entries - 1, s.entries - 1)
            if last >= first:
                total += s.size_bytes * (last - first + 1) // s.entries
        return total

    def messages_at(self, position: Position) -> int:
        """Messages in one entry (0 if it does not exist)."""
        s = self.get(position[0])
        return 0 if s is None else s.messages_in(position[1], position[1])

    def messages_in(self, first: Position, last: Position) -> int:
        """Messages in entries ``first..last`` of one ledger."""
        s = self.get(first[0])
        return 0 if s is None else s.messages_in(first[1], last[1])

    @property
    def total_entries(self) -> int:
        return sum(s.entries for s in self._segments)

    @property
    def total_size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    def _sum_between(self, after: Position, upto: Position, *, messages: bool) -> int:
        if upto <= after:
            return 0
        total = 0
        for s in self._segments:
            if s.ledger_id < after[0] or s.entries == 0:
                continue
            if s.ledger_id > upto[0]:
                break
            first = after[1] + 1 if s.ledger_id == after[0] else 0
            last = upto[1] if s.ledger_id == upto[0] else s.entries - 1
            last = min(last, s.entries - 1)
            if last < first:
                continue
            total += s.messages_in(first, last) if messages else last - first + 1
        return total

    def _first_index_after(self, ledger_id: int) -> int:
        return bisect_right(self._segments, ledger_id, key=_ledger_id)
