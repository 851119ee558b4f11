"""Cursor state: what a subscription has read and acknowledged. Sans-IO.

A cursor holds:

* the **mark-delete position** — every entry at or before it is acknowledged (it may be a
  boundary ``(L, -1)``, "everything before ledger L");
* the **individually acknowledged ranges** beyond it (:class:`PositionRangeSet`);
* **batch-index acknowledgements** for partly acknowledged batch entries, as Java ``BitSet``
  words (a SET bit means that message is NOT yet acknowledged, Pulsar's ``ackSet``);
* the **read position** — the next entry to deliver.

When the gap after the mark-delete position closes, the mark-delete position advances over
every contiguous acknowledged range (across ledger boundaries, which only the ledger list
knows). The read position never lags the mark-delete position.

Backlog: entries and messages after the mark-delete position up to the last confirmed entry,
minus those acknowledged individually (and minus acknowledged messages of partial batches).
Counters are maintained incrementally, so backlog queries cost O(ledgers + partial batches),
and acknowledgements cost O(log ranges).

Every change that must be persisted bumps :attr:`CursorState.version`; the asyncio shell
persists a :class:`CursorSnapshot` at a bounded rate when the version moved.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from magnetar.managed_ledger.errors import InvalidCursorPosition
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.range_set import PositionRangeSet

_WORD_MASK = (1 << 64) - 1


def bits_to_words(bits: int, size: int) -> list[int]:
    """A Python int bitset as Java ``BitSet.toLongArray()`` words (signed int64)."""
    words: list[int] = []
    n_words = (size + 63) // 64
    for i in range(n_words):
        w = (bits >> (64 * i)) & _WORD_MASK
        words.append(w - (1 << 64) if w >= 1 << 63 else w)
    while words and words[-1] == 0:  # BitSet.toLongArray drops trailing zero words
        words.pop()
    return words


def words_to_bits(words: Iterable[int]) -> int:
    """Inverse of :func:`bits_to_words`."""
    bits = 0
    for i, w in enumerate(words):
        bits |= (w & _WORD_MASK) << (64 * i)
    return bits


@dataclass(slots=True)
class BatchAck:
    """A partly acknowledged batch entry: ``bits`` has a SET bit per unacknowledged index."""

    size: int
    bits: int

    @property
    def acked(self) -> int:
        return self.size - self.bits.bit_count()


@dataclass(slots=True)
class CursorSnapshot:
    """The persisted state of a durable cursor."""

    mark_delete: Position
    acked_ranges: bytes = b""
    """:meth:`PositionRangeSet.serialize` output (empty: no ranges)."""
    batch_acks: dict[Position, tuple[int, list[int]]] = field(default_factory=dict)
    """position -> (batch size, Java BitSet words with SET = not acknowledged)."""
    properties: dict[str, int] = field(default_factory=dict)

    _HEADER = struct.Struct("<4sBqqII")
    _BATCH = struct.Struct("<qqII")

    def encode(self) -> bytes:
        """Binary form for the cursor ledger: header, batch acks, properties, ranges."""
        props = "\n".join(f"{k}={v}" for k, v in sorted(self.properties.items())).encode()
        parts = [
            self._HEADER.pack(
                b"MLCS",
                1,
                self.mark_delete[0],
                self.mark_delete[1],
                len(self.batch_acks),
                len(props),
            )
        ]
        for pos, (size, words) in sorted(self.batch_acks.items()):
            parts.append(self._BATCH.pack(pos[0], pos[1], size, len(words)))
            parts.append(struct.pack(f"<{len(words)}q", *words))
        parts.append(props)
        parts.append(self.acked_ranges)
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes) -> CursorSnapshot:
        """Raises ``ValueError`` on malformed input."""
        try:
            magic, version, ml, me, n_batch, props_len = cls._HEADER.unpack_from(data, 0)
            if magic != b"MLCS" or version != 1:
                raise ValueError("not a cursor snapshot")
            off = cls._HEADER.size
            batch: dict[Position, tuple[int, list[int]]] = {}
            for _ in range(n_batch):
                bl, be, size, n_words = cls._BATCH.unpack_from(data, off)
                off += cls._BATCH.size
                words = list(struct.unpack_from(f"<{n_words}q", data, off))
                off += 8 * n_words
                batch[Position(bl, be)] = (size, words)
            props_raw = data[off : off + props_len].decode()
            off += props_len
        except (struct.error, UnicodeDecodeError) as exc:
            raise ValueError(f"bad cursor snapshot: {exc}") from exc
        props: dict[str, int] = {}
        for line in props_raw.split("\n"):
            if line:
                k, _, v = line.partition("=")
                props[k] = int(v)
        return cls(Position(ml, me), bytes(data[off:]), batch, props)


_NO_BATCH_ACKS: dict[Position, BatchAck] = {}
"""The batch-ack table of every cursor with none (never added to); most cursors have none."""


class CursorState:
    """One cursor's acknowledgement and read state over a :class:`LedgerList`.

    The ledger list is shared with the managed ledger (read-only here). Methods raise
    :class:`InvalidCursorPosition` for positions after the last confirmed entry.
    """

    __slots__ = (
        "_acked_messages",
        "_batch",
        "_ledgers",
        "acked",
        "mark_delete",
        "name",
        "properties",
        "read_position",
        "version",
    )

    def __init__(
        self,
        name: str,
        ledgers: LedgerList,
        mark_delete: Position,
        *,
        properties: dict[str, int] | None = None,
    ) -> None:
        self.name = name
        self._ledgers = ledgers
        self.mark_delete = mark_delete
        self.acked = PositionRangeSet()
        self._batch: dict[Position, BatchAck] = _NO_BATCH_ACKS
        """Partly acknowledged batch entries (the shared empty table until the first; added
        to through :meth:`_own_batch` only)."""
        self._acked_messages = 0
        self.properties: dict[str, int] = dict(properties or {})
        self.read_position = ledgers.next_position(mark_delete)
        self.version = 0

    # --- construction from persisted state ---------------------------------------------

    @classmethod
    def from_snapshot(cls, name: str, ledgers: LedgerList, snapshot: CursorSnapshot) -> CursorState:
        """Restore; the read position restarts at the first unacknowledged entry."""
        state = cls(name, ledgers, snapshot.mark_delete, properties=snapshot.properties)
        if snapshot.acked_ranges:
            state.acked = PositionRangeSet.deserialize(snapshot.acked_ranges)
            state.acked.remove_up_to(snapshot.mark_delete)
            state._acked_messages = sum(
                ledgers.messages_in(first, last) for first, last in state.acked.ranges()
            )
        for pos, (size, words) in snapshot.batch_acks.items():
            if pos > snapshot.mark_delete and pos not in state.acked:
                state._own_batch()[pos] = BatchAck(size, words_to_bits(words))
        state._advance()
        state.read_position = state.first_unacked()
        state.version = 0
        return state

    def snapshot(self, ranges_max: int | None = None) -> CursorSnapshot:
        """The state to persist. ``ranges_max`` bounds the stored ranges (dropping the
        newest only causes redelivery, never loss)."""
        return CursorSnapshot(
            mark_delete=self.mark_delete,
            acked_ranges=self.acked.serialize(ranges_max) if self.acked else b"",
            batch_acks={
                pos: (b.size, bits_to_words(b.bits, b.size)) for pos, b in self._batch.items()
            },
            properties=dict(self.properties),
        )

    # --- queries -----------------------------------------------------------------------

    def is_acked(self, position: Position) -> bool:
        return position <= self.mark_delete or position in self.acked

    def first_unacked(self) -> Position:
        """First entry after the mark-delete position not individually acknowledged."""
        return self.acked.first_missing_after(self.mark_delete, self._ledgers.next_position)

    def batch_ack_set(self, position: Position) -> list[int] | None:
        """Java BitSet words of a partly acknowledged batch (SET = still to deliver)."""
        b = self._batch.get(position)
        return None if b is None else bits_to_words(b.bits, b.size)

    @property
    def backlog_entries(self) -> int:
        """Entries after the mark-delete position not yet (individually) acknowledged."""
        total = self._ledgers.entries_between(self.mark_delete, self._ledgers.last_confirmed)
        return total - self.acked.size

    @property
    def backlog_messages(self) -> int:
        """Messages not yet acknowledged, counting each entry's batch size."""
        total = self._ledgers.messages_between(self.mark_delete, self._ledgers.last_confirmed)
        partial = sum(b.acked for b in self._batch.values())
        return total - self._acked_messages - partial

    @property
    def entries_to_read(self) -> int:
        """Entries at or after the read position (individually acked ones excluded)."""
        before = self._ledgers.previous_position(self.read_position)
        after = max(before, self.mark_delete)
        last = self._ledgers.last_confirmed
        return self._ledgers.entries_between(after, last) - self.acked.count_in(
            self._ledgers.next_position(after), last
        )

    @property
    def partial_batches(self) -> int:
        return len(self._batch)

    # --- acknowledgements ----------------------------------------------------------------

    def ack(self, position: Position) -> bool:
        """Individually acknowledge one entry (all of its messages). Returns whether the
        state changed. Acknowledging at or before the mark-delete position is a no-op."""
        if position <= self.mark_delete:
            return False
        if not self._ledgers.exists(position):
            raise InvalidCursorPosition(f"ack of {position}: no such entry")
        if not self.acked.add(position):
            return False
        self._acked_messages += self._ledgers.messages_at(position)
        if self._batch:
            self._batch.pop(position, None)
        if self._ledgers.next_position(self.mark_delete) == position:
            self._advance()
        self.version += 1
        return True

    def ack_many(self, positions: Iterable[Position]) -> int:
        """Acknowledge several entries (as :meth:`ack` each, in one pass); returns how many
        changed the state. Raises :class:`InvalidCursorPosition` at the first position (in
        log order) that does not exist; the positions before it are acknowledged."""
        return self.ack_positions(positions)[0]

    def ack_positions(self, positions: Iterable[Position]) -> tuple[int, int]:
        """:meth:`ack_many` that also counts the messages of the distinct existing entries
        named (acknowledged now or before): ``(entries changed, messages named)``.

        Sorted, the positions fall into runs of consecutive entries of one ledger (a
        client's grouped acknowledgement is mostly one run): each run is checked, counted
        and added to the acknowledged ranges at once, and the mark-delete position moves
        at most once."""
        ordered = sorted(set(positions))
        runs: list[tuple[int, int, int]] = []
        if ordered:
            run_ledger, run_first = ordered[0]
            run_last = run_first - 1
            for ledger_id, entry_id in ordered:
                if ledger_id == run_ledger and entry_id == run_last + 1:
                    run_last = entry_id
                    continue
                runs.append((run_ledger, run_first, run_last))
                run_ledger, run_first, run_last = ledger_id, entry_id, entry_id
            runs.append((run_ledger, run_first, run_last))
        changed = named = 0
        bad: Position | None = None
        for ledger_id, first, last in runs:
            seg = self._ledgers.get(ledger_id)
            if (ledger_id, last) <= self.mark_delete:
                named += 0 if seg is None else seg.messages_in(first, last)
                continue  # acknowledged already: as ack(), no check that they exist
            if seg is None or (first < 0 and (ledger_id, first) > self.mark_delete):
                bad = Position(ledger_id, first)
                break
            valid_last = min(last, seg.entries - 1)
            named += seg.messages_in(first, valid_last)
            changed += self._ack_run(seg, first, valid_last)
            if valid_last < last:
                bad = Position(ledger_id, valid_last + 1)
                break
        if changed:
            self._advance()
            self.version += 1
        if bad is not None:
            raise InvalidCursorPosition(f"ack of {bad}: no such entry")
        return changed, named

    def _ack_run(self, seg: LedgerSegment, first: int, last: int) -> int:
        """Acknowledge existing entries ``first..last`` of ``seg``'s ledger; the caller
        advances the mark-delete position and bumps the version. Returns how many changed."""
        ledger_id = seg.ledger_id
        md = self.mark_delete
        if md[0] == ledger_id:
            first = max(first, md[1] + 1)
        elif md[0] > ledger_id:
            return 0
        if last < first:
            return 0
        start, end = Position(ledger_id, first), Position(ledger_id, last)
        acked = self.acked
        if acked.count_in(start, end):  # some acknowledged already: one at a time
            changed = 0
            for e in range(first, last + 1):
                p = Position(ledger_id, e)
                if acked.add(p):
                    changed += 1
                    self._acked_messages += seg.messages_in(e, e)
                    if self._batch:
                        self._batch.pop(p, None)
            return changed
        acked.add_range(start, end)
        self._acked_messages += seg.messages_in(first, last)
        if self._batch:
            for p in [p for p in self._batch if start <= p <= end]:
                del self._batch[p]
        return last - first + 1

    def ack_batch_indexes(
        self, position: Position, batch_size: int, indexes: Iterable[int]
    ) -> bool:
        """Acknowledge some messages of a batch entry. When the last one is acknowledged
        the entry counts as acknowledged (as :meth:`ack`)."""
        if self.is_acked(position):
            return False
        if not self._ledgers.exists(position):
            raise InvalidCursorPosition(f"ack of {position}: no such entry")
        b = self._batch.get(position)
        if b is None:
            b = BatchAck(batch_size, (1 << batch_size) - 1)
        before = b.bits
        for i in indexes:
            if not 0 <= i < b.size:
                raise InvalidCursorPosition(f"batch index {i} outside batch of {b.size}")
            b.bits &= ~(1 << i)
        if b.bits == 0:
            self._batch.pop(position, None)
            return self.ack(position)
        if b.bits == before and position in self._batch:
            return False
        self._own_batch()[position] = b
        self.version += 1
        return True

    def _own_batch(self) -> dict[Position, BatchAck]:
        if self._batch is _NO_BATCH_ACKS:
            self._batch = {}
        return self._batch

    def ack_cumulative(self, position: Position) -> bool:
        """Acknowledge every entry up to and including ``position``."""
        if position <= self.mark_delete:
            return False
        if position > self._ledgers.last_confirmed:
            raise InvalidCursorPosition(f"cumulative ack of {position} beyond the last entry")
        for first, last in self.acked.remove_up_to(position):
            self._acked_messages -= self._ledgers.messages_in(first, last)
        self.mark_delete = position
        self._advance()
        self.version += 1
        return True

    def _advance(self) -> None:
        """Swallow acknowledged ranges that now follow the mark-delete position."""
        md = self.mark_delete
        ledgers = self._ledgers
        while True:
            nxt = ledgers.next_position(md)
            end = self.acked.pop_range_starting_at(nxt)
            if end is None:
                break
            self._acked_messages -= ledgers.messages_in(nxt, end)
            md = end
        self.mark_delete = md
        if self._batch:
            for pos in [p for p in self._batch if p <= md]:
                del self._batch[pos]
        if self.read_position <= md:
            self.read_position = ledgers.next_position(md)

    # --- moving the read position ------------------------------------------------------

    def read_done(self, last_read: Position) -> None:
        """Entries up to ``last_read`` were delivered: continue after it."""
        nxt = self._ledgers.next_position(last_read)
        if nxt > self.read_position:
            self.read_position = nxt

    def advance_read_to(self, position: Position) -> None:
        """Move the read position forward to ``position`` (never backwards)."""
        if position > self.read_position:
            self.read_position = position

    def rewind(self) -> None:
        """Redeliver from the first unacknowledged entry."""
        self.read_position = self.first_unacked()

    def seek(self, position: Position) -> None:
        """Move the read position (never before the first unacknowledged entry)."""
        self.read_position = max(self._ledgers.normalize(position), self.first_unacked())

    def reset(self, position: Position) -> None:
        """Reset the subscription to ``position``: it is the next entry to deliver, every
        entry before it counts as acknowledged, and every entry from it on as not (this may
        move the mark-delete position backwards, as a subscription seek does)."""
        target = self._ledgers.normalize(position)
        self.mark_delete = self._ledgers.previous_position(target)
        self.acked.clear()
        self._acked_messages = 0
        self._batch = _NO_BATCH_ACKS
        self.read_position = target
        self.version += 1

    def skip(self, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged entries; returns how many."""
        ledgers = self._ledgers
        last = ledgers.last_confirmed
        pos = self.mark_delete
        skipped = 0
        while skipped < count:
            start = self.acked.first_missing_after(pos, ledgers.next_position)
            if start > last or not ledgers.exists(start):
                break
            segment = ledgers.get(start[0])
            assert segment is not None
            run_end = segment.entries - 1
            nxt_range = self.acked.next_start_after(start)
            if nxt_range is not None:
                run_end = min(run_end, nxt_range - 1)
            take = min(count - skipped, run_end - start[1] + 1)
            pos = Position(start[0], start[1] + take - 1)
            skipped += take
        if skipped:
            self.ack_cumulative(pos)
        return skipped

    def clear_backlog(self) -> None:
        last = self._ledgers.last_confirmed
        if last > self.mark_delete:
            self.ack_cumulative(last)

    def on_ledgers_trimmed(self) -> None:
        """After ledgers before this cursor's position were removed (eviction, TTL of a
        non-durable cursor): move the mark-delete position to the log's start if needed."""
        first = self._ledgers.first_position
        floor = self._ledgers.previous_position(first)
        if self.mark_delete < floor:
            # the removed ledgers' counts are gone from the list: recount what remains
            self.acked.remove_up_to(floor)
            self._acked_messages = sum(
                self._ledgers.messages_in(a, b) for a, b in self.acked.ranges()
            )
            self.mark_delete = floor
            self._advance()
            self.version += 1
        if self.read_position < first:
            self.read_position = first
