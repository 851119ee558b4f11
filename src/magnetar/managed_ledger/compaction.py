"""Topic compaction, storage side: the compacted ledger and reading a cursor through it.

A compacted view is a ledger holding, in log order, the entries that survived compaction
of the log up to its ``horizon`` (the last position compacted). The broker's compactor
(:mod:`magnetar.broker.compactor`) decides what survives (key -> latest message, tombstones
remove keys) and writes the ledger; this module only knows positions and bytes.

Compacted ledger entry layout (one per surviving log entry; a batch may be rebuilt)::

    [magic "MCE1":4][ledger_id:i64 BE][entry_id:i64 BE][entry bytes ...]
    '------------- original position -------------'    '- as delivered -'

The original position is kept so consumers see the message ids they would have seen in
the log, acknowledgements land on the right cursor positions, and a reader can find where
to start by binary search (entries are written in position order).

:class:`CompactedCursorReader` is Pulsar's ``CompactedTopicUtils.asyncReadCompactedEntries``:
while a cursor's read position is at or before the horizon, entries come from the view
(entries the view dropped are skipped); once the view is exhausted the cursor continues in
the managed ledger after the horizon.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from magnetar.common.errors import MagnetarError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.position import EARLIEST, Position
from magnetar.managed_ledger.storage import LedgerReader, LedgerStorage

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger_list import LedgerList
    from magnetar.managed_ledger.managed_cursor import ManagedCursor
    from magnetar.managed_ledger.managed_ledger import Entry

_HEADER = struct.Struct(">4sqq")
_MAGIC = b"MCE1"

COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
"""Cursor property of the compaction cursor: id of the current compacted ledger (Pulsar's
name); ``compaction.horizon.ledger``/``.entry`` hold its horizon."""
HORIZON_LEDGER_PROPERTY = "compaction.horizon.ledger"
HORIZON_ENTRY_PROPERTY = "compaction.horizon.entry"


class CompactedLedgerCorrupt(ManagedLedgerError):
    """An entry of a compacted ledger does not have the compacted-entry layout."""


def encode_compacted_entry(position: Position, data: bytes | memoryview) -> bytes:
    """One compacted-ledger entry: the original position, then the entry bytes."""
    return _HEADER.pack(_MAGIC, position[0], position[1]) + bytes(data)


def decode_compacted_entry(raw: bytes) -> CompactedEntry:
    """Inverse of :func:`encode_compacted_entry`. Raises :class:`CompactedLedgerCorrupt`."""
    if len(raw) < _HEADER.size:
        raise CompactedLedgerCorrupt("compacted entry truncated")
    magic, ledger_id, entry_id = _HEADER.unpack_from(raw, 0)
    if magic != _MAGIC:
        raise CompactedLedgerCorrupt("not a compacted entry")
    return CompactedEntry(Position(ledger_id, entry_id), raw[_HEADER.size :])


@frozen_struct(kw_only=False)
class CompactedEntry:
    """A surviving entry: its position in the log and the bytes to deliver (the original
    entry, or a rebuilt batch holding only the surviving messages)."""

    position: Position
    data: bytes


class CompactedView(Protocol):
    @property
    def horizon(self) -> Position:
        """Every entry at or before this position is reflected in the view."""
        ...

    @property
    def ledger_id(self) -> int: ...

    @property
    def entries(self) -> int: ...

    async def read(self, after: Position, max_entries: int) -> Sequence[CompactedEntry]:
        """Entries of the view after ``after``, in position order, at most ``max_entries``;
        ``[]`` past the last one. Raises :class:`MagnetarError` on storage failures."""
        ...


class CompactedLedger:
    """:class:`CompactedView` over a closed compacted ledger. Owns ``reader`` (closed by
    :meth:`close`). Positions of entries are found by binary search, with a bounded cache
    of index -> position and a hint that makes sequential reads cost one storage read."""

    def __init__(
        self, reader: LedgerReader, horizon: Position, *, position_cache_max: int = 65_536
    ) -> None:
        self._reader = reader
        self._horizon = horizon
        self._entries = reader.last_add_confirmed + 1
        self._positions: dict[int, Position] = {}
        self._position_cache_max = position_cache_max
        self._hint: tuple[Position, int] | None = None
        """(position of entry i-1, i): where the next sequential read starts."""
        self.last_entry: CompactedEntry | None = None
        """The view's last entry (read by :meth:`open`); ``None`` when the view is empty."""

    @classmethod
    async def open(
        cls, storage: LedgerStorage, ledger_id: int, horizon: Position
    ) -> CompactedLedger:
        """Open a compacted ledger written (and closed) by the compactor."""
        reader = await storage.open_ledger(ledger_id, recovery=False)
        view = cls(reader, horizon)
        lac = reader.last_add_confirmed
        if lac >= 0:
            try:
                raw = (await reader.read(lac, lac))[0].data
                view.last_entry = decode_compacted_entry(bytes(raw))
            except BaseException:
                await view.close()
                raise
        return view

    @property
    def horizon(self) -> Position:
        return self._horizon

    @property
    def ledger_id(self) -> int:
        return self._reader.ledger_id

    @property
    def entries(self) -> int:
        return self._entries

    def _remember(self, index: int, position: Position) -> None:
        if len(self._positions) >= self._position_cache_max:
            self._positions.clear()
        self._positions[index] = position

    async def _position_at(self, index: int) -> Position:
        pos = self._positions.get(index)
        if pos is None:
            raw = (await self._reader.read(index, index))[0].data
            pos = decode_compacted_entry(bytes(raw)).position
            self._remember(index, pos)
        return pos

    async def _first_index_after(self, after: Position) -> int:
        hint = self._hint
        if hint is not None and hint[0] == after:
            return hint[1]
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if await self._position_at(mid) > after:
                hi = mid
            else:
                lo = mid + 1
        return lo

    async def read(self, after: Position, max_entries: int) -> list[CompactedEntry]:
        if max_entries <= 0 or self._entries == 0 or after >= self._horizon:
            return []
        first = await self._first_index_after(after)
        if first >= self._entries:
            return []
        last = min(self._entries - 1, first + max_entries - 1)
        stored = await self._reader.read(first, last)
        out = [decode_compacted_entry(bytes(e.data)) for e in stored]
        for i, e in enumerate(out):
            self._remember(first + i, e.position)
        if out:
            self._hint = (out[-1].position, first + len(out))
        return out

    async def close(self) -> None:
        with contextlib.suppress(MagnetarError):
            await self._reader.close()


ViewProvider = Callable[[], Awaitable[CompactedView | None]]
"""Returns the topic's current compacted view (``None``: never compacted)."""


class CompactedCursorReader:
    """Reads a cursor through the compacted view (one per read-compacted subscription).

    Contract: the subscription's dispatcher is the only reader of the cursor; it calls
    :meth:`read_entries` where it would call ``cursor.read_entries`` and passes
    ``still_current``, which turns False once the subscription rewound or sought during the
    read (then nothing here moves the cursor and the caller drops the result).

    Where reading starts in the view: after the entry before the cursor's read position; or
    from the very start of the view when the cursor has consumed nothing (mark-delete just
    before the first entry of the log) and sits at the first entry, so a reader from the
    earliest message also sees compacted entries of ledgers trimmed since compaction. A
    durable subscription that had consumed everything before those ledgers were trimmed
    looks the same and gets the compacted entries again (latest values, at least once).
    """

    def __init__(self, cursor: ManagedCursor, ledgers: LedgerList) -> None:
        self._cursor = cursor
        self._ledgers = ledgers
        self._resume: tuple[Position, Position] | None = None
        """(cursor read position left by the last view read, last view position read):
        continues in the view when the cursor cannot represent the position (trimmed)."""

    def _start_after(self) -> Position:
        state = self._cursor.state
        ledgers = self._ledgers
        read_pos = ledgers.normalize(state.read_position)
        if self._resume is not None and self._resume[0] == read_pos:
            return self._resume[1]
        first = ledgers.first_position
        if read_pos == first and state.mark_delete == ledgers.previous_position(first):
            return EARLIEST
        return ledgers.previous_position(read_pos)

    async def read_entries(
        self, views: ViewProvider, max_entries: int, still_current: Callable[[], bool]
    ) -> list[Entry]:
        """Up to ``max_entries`` entries for the subscription; ``[]`` when there is nothing
        to read now (as ``ManagedCursor.read_entries``). Raises :class:`ManagedLedgerError`."""
        from magnetar.managed_ledger.managed_ledger import Entry

        state = self._cursor.state
        ledgers = self._ledgers
        while True:
            view = await views()
            if view is None:
                return await self._cursor.read_entries(max_entries)
            after = self._start_after()
            horizon = view.horizon
            if after >= horizon:
                self._resume = None
                return await self._cursor.read_entries(max_entries)
            try:
                got = await view.read(after, max_entries)
            except MagnetarError:
                # the view may have been replaced (and its ledger deleted) meanwhile
                newer = await views()
                if newer is None or newer is view:
                    raise
                continue
            if not still_current():
                return []
            if not got:
                # the view is exhausted: continue in the log after the horizon
                self._resume = None
                state.advance_read_to(ledgers.normalize(ledgers.next_position(horizon)))
                return await self._cursor.read_entries(max_entries)
            last = got[-1].position
            if ledgers.exists(last):
                state.advance_read_to(ledgers.next_position(last))
            self._resume = (ledgers.normalize(state.read_position), last)
            out = [
                Entry(e.position, e.data)
                for e in got
                if not (ledgers.exists(e.position) and state.is_acked(e.position))
            ]
            if out:
                return out
