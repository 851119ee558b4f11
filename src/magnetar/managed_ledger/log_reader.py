"""Reading entries of a managed ledger's log: from the entry cache, else from storage.

Storage reads go to the current ledger's writer (its own entries), or to a reader of the
ledger opened on demand (at most ``open_readers_max`` stay open, least recently used
closed first), or to the offloader of the driver recorded for an offloaded ledger: always when the read priority is
tiered-storage-first or the bookie copy is deleted, else only when the bookies fail (the
offloader fetches whole blocks into its cache: read-ahead). Catch-up reads
go in batches of ``read_batch_max_entries`` and read ahead ``read_ahead_entries`` (at most
``read_ahead_bytes_max`` by the ledger's average entry size) into the cache.
Entries are opaque bytes, never copied.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.entry_run import EntryRun, positions_of
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.ledger_list import LedgerSegment
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerReader

if TYPE_CHECKING:
    from magnetar.managed_ledger.managed_ledger import ManagedLedger


_NO_READERS: OrderedDict[int, asyncio.Task[LedgerReader]] = OrderedDict()
"""The table of every log reader with no reader open (never added to: see
:meth:`LogReader._own_readers`); an empty ``OrderedDict`` is 128 B per idle topic."""


class LogReader:
    """The reads of one managed ledger (its ``reads``)."""

    __slots__ = (
        "_background",
        "_ml",
        "_readers",
    )

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self._readers: OrderedDict[int, asyncio.Task[LedgerReader]] = _NO_READERS
        self._background: set[asyncio.Future[None]] | None = None
        """Readers being closed (made at the first: an empty set is 216 B)."""

    def adopt(self, reader: LedgerReader) -> None:
        """Keep ``reader`` (a ledger opened for recovery) as that ledger's reader."""
        task = asyncio.get_running_loop().create_task(_ready(reader))
        self._own_readers()[reader.ledger_id] = task

    def _own_readers(self) -> OrderedDict[int, asyncio.Task[LedgerReader]]:
        """The table of open readers, this log's own (to add to)."""
        if self._readers is _NO_READERS:
            self._readers = OrderedDict()
        return self._readers

    async def read_range(
        self, ledger_id: int, first: int, last: int, *, read_ahead: bool = True
    ) -> list[bytes]:
        """See :meth:`ManagedLedger.read_range`."""
        ml = self._ml
        seg = ml.ledgers.get(ledger_id)
        if seg is None:
            raise ManagedLedgerError(f"{ml.name}: ledger {ledger_id} is not in the log")
        last = min(last, seg.entries - 1)
        if last < first:
            return []
        cfg = ml.config
        cache = ml.cache
        out = cache.get_run(ledger_id, first, last)
        start = first + len(out)
        while start <= last:
            upto = min(last, start + cfg.read_batch_max_entries - 1)
            fetch_last = upto
            if read_ahead and upto == last:
                ahead = cfg.read_ahead_entries
                if seg.size_bytes:  # by bytes too, from the ledger's average entry size
                    ahead = min(ahead, cfg.read_ahead_bytes_max * seg.entries // seg.size_bytes)
                fetch_last = min(
                    seg.entries - 1,
                    max(upto, start + ahead - 1),
                    start + cfg.read_batch_max_entries - 1,
                )
            data = await self._read_storage(seg, start, fetch_last)
            wanted = upto - start + 1
            out.extend(data[:wanted])
            for i in range(wanted, len(data)):
                cache.insert(Position(ledger_id, start + i), data[i])
            start = upto + 1
        return out

    async def read_run(self, ledger_id: int, first: int, last: int) -> EntryRun:
        """See :meth:`ManagedLedger.read_run`."""
        ml = self._ml
        seg = ml.ledgers.get(ledger_id)
        if seg is None:
            raise ManagedLedgerError(f"{ml.name}: ledger {ledger_id} is not in the log")
        last = min(last, seg.entries - 1)
        positions, data, messages = ml.cache.run(ledger_id, first, last)
        start = first + len(data)
        if start <= last:
            rest = await self.read_range(ledger_id, start, last)
            positions += positions_of(ledger_id, start, len(rest))
            data += rest
            messages += [None] * len(rest)
        return EntryRun(positions, data, messages)

    def read_run_cached(self, ledger_id: int, first: int, last: int) -> EntryRun | None:
        """Like :meth:`read_run` when the cache holds every entry asked (clipped to what
        exists); None when it does not, or the ledger is not in the log (:meth:`read_run`
        then reads storage or raises)."""
        seg = self._ml.ledgers.get(ledger_id)
        if seg is None:
            return None
        found = self._ml.cache.run_whole(ledger_id, first, min(last, seg.entries - 1))
        return None if found is None else EntryRun(*found)

    async def _read_storage(self, seg: LedgerSegment, first: int, last: int) -> Sequence[bytes]:
        ml = self._ml
        # the current ledger, or one being closed or whose close failed (it still says
        # OPEN: opened apart, its end would be what the bookies heard confirmed, one entry
        # short of what its writer confirmed; the last confirmation rides on the next add)
        for writer in (ml.writer, ml.rollover.unclosed):
            if writer is not None and writer.ledger_id == seg.ledger_id:
                return [e.data for e in await writer.read(first, last)]
        readable = seg.offload is not None and ml.offloads.offloader_of(seg.offload) is not None
        if seg.offloaded and (not seg.on_bookies or readable):
            if not seg.on_bookies or not ml.config.offload_read_bookkeeper_first:
                return await ml.offloads.read(seg, first, last)
            try:  # bookkeeper-first: the bookie copy while it exists
                reader = await self._reader(seg.ledger_id)
                return [e.data for e in await reader.read(first, last)]
            except MagnetarError:
                return await ml.offloads.read(seg, first, last)
        reader = await self._reader(seg.ledger_id)
        return [e.data for e in await reader.read(first, last)]

    async def _reader(self, ledger_id: int) -> LedgerReader:
        task = self._readers.get(ledger_id)
        if task is None:
            task = asyncio.ensure_future(self._ml.storage.open_ledger(ledger_id, recovery=False))
            self._own_readers()[ledger_id] = task
            while len(self._readers) > self._ml.config.open_readers_max:
                _, old = self._readers.popitem(last=False)
                closing = asyncio.ensure_future(_close_reader(old))
                if self._background is None:
                    self._background = set()
                self._background.add(closing)
                closing.add_done_callback(self._background.discard)
        else:
            self._readers.move_to_end(ledger_id)
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._readers.get(ledger_id) is task:
                del self._readers[ledger_id]
            raise

    async def first_entry_where(
        self, predicate: Callable[[bytes], bool], after: Position | None
    ) -> Position | None:
        """The first entry after ``after`` (``None``: from the oldest entry) for which
        ``predicate`` holds, by binary search; ``None`` if it holds for none. ``predicate``
        must be monotonic in log order (false, then true). Reads one entry per probe."""
        spans: list[tuple[int, int, int]] = []  # (ledger id, first entry, entries)
        for s in self._ml.ledgers:
            first = 0
            if after is not None:
                if s.ledger_id < after[0]:
                    continue
                if s.ledger_id == after[0]:
                    first = after[1] + 1
            if s.entries > first:
                spans.append((s.ledger_id, first, s.entries - first))
        total = sum(n for _, _, n in spans)
        lo, hi = 0, total  # answer index in [lo, hi]

        def at(index: int) -> Position:
            for ledger_id, first, n in spans:
                if index < n:
                    return Position(ledger_id, first + index)
                index -= n
            raise IndexError(index)

        while lo < hi:
            mid = (lo + hi) // 2
            pos = at(mid)
            data = await self.read_range(pos[0], pos[1], pos[1], read_ahead=False)
            if predicate(data[0]):
                hi = mid
            else:
                lo = mid + 1
        return at(lo) if lo < total else None

    async def forget(self, ledger_id: int) -> None:
        """Close the reader of a ledger leaving the log (trimmed)."""
        task = self._readers.pop(ledger_id, None)
        if task is not None:
            await _close_reader(task)

    async def close(self) -> None:
        """Close every open reader."""
        readers, self._readers = self._readers, _NO_READERS
        for task in readers.values():
            await _close_reader(task)


async def _ready(reader: LedgerReader) -> LedgerReader:
    return reader


async def _close_reader(task: Awaitable[LedgerReader]) -> None:
    with contextlib.suppress(Exception):
        reader = await task
        await reader.close()
