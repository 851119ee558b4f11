"""A cursor of a managed ledger: the asyncio shell around :class:`CursorState`.

Acknowledgements are synchronous and cheap (they only change :class:`CursorState`); a
durable cursor's state reaches storage at most ``cursor_persist_interval_ms`` later, when
the managed ledger's maintenance task calls :meth:`ManagedCursor.persist` (or on
:meth:`flush`/``close``). Persisting appends a :class:`CursorSnapshot` to the cursor's own
ledger; the cursor's metadata node (compare-and-set) names that ledger and the mark-delete
position of its first snapshot, and is written only when the cursor starts a new ledger (its
first persist, a failed add, ``cursor_ledger_entries_max`` reached): one metadata write per
ledger, not per persist, as Pulsar's cursors. On reopen the newest snapshot of the named
ledger wins (it is opened for recovery, which also fences a previous owner's cursor writes;
the owner's next add then fails as fenced, and its next ledger switch fails the version
check), so after a crash the cursor
resumes from what was persisted: never behind an acknowledged-and-persisted position, and
redelivering at most the acknowledgements of the last persist interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Generator, Iterable
from itertools import compress
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError
from magnetar.common.lazy_lock import lazy_lock
from magnetar.managed_ledger.cursor import CursorSnapshot, CursorState
from magnetar.managed_ledger.entry_run import Entry, EntryRun
from magnetar.managed_ledger.errors import ManagedLedgerFenced
from magnetar.managed_ledger.metadata_layout import CursorInfo, cursor_path
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerWriter, is_fenced
from magnetar.metadata.store import MUST_NOT_EXIST, BadVersion, NodeExists, NotFound

if TYPE_CHECKING:
    from magnetar.managed_ledger.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)


_NO_STALE_LEDGERS: list[int] = []
"""The stale ledgers of every cursor with none (never added to)."""


class ManagedCursor:
    """One subscription's position in a managed ledger. Obtain from
    ``ManagedLedger.open_cursor``. Reads on one cursor are serialised."""

    # Slots: one per topic on a broker holding thousands of idle topics.
    __slots__ = (
        "_epoch",
        "_info_version",
        "_ledger",
        "_ledger_entries",
        "_ml",
        "_persist_lock",
        "_persisted_version",
        "_read_lock",
        "_stale_ledgers",
        "durable",
        "persist_count",
        "persisted_mark_delete",
        "state",
    )

    def __init__(
        self,
        ml: ManagedLedger,
        state: CursorState,
        *,
        durable: bool,
        info_version: int = MUST_NOT_EXIST,
    ) -> None:
        self._ml = ml
        self.state = state
        self.durable = durable
        self._info_version = info_version
        self._ledger: LedgerWriter | None = None
        self._ledger_entries = 0
        self._stale_ledgers: list[int] = _NO_STALE_LEDGERS
        """Old cursor ledgers to delete (the shared empty list, never added to, until the
        first: add through :meth:`_retire`)."""
        self._persisted_version = state.version
        self._persist_lock: asyncio.Lock | None = None
        """Made at first use (:func:`lazy_lock`): an idle cursor never persists."""
        self._read_lock: asyncio.Lock | None = None
        """Made at first use (:func:`lazy_lock`): a cursor without consumers never reads."""
        self._epoch = 0
        self.persisted_mark_delete = state.mark_delete
        self.persist_count = 0

    @property
    def path(self) -> str:
        """The cursor's metadata node (made when needed: stored per cursor, the string was
        ~100 B per idle topic)."""
        return cursor_path(self._ml.name, self.state.name)

    @property
    def name(self) -> str:
        return self.state.name

    # --- restoring and creating ------------------------------------------------------------

    @classmethod
    async def restore(
        cls, ml: ManagedLedger, name: str, info: CursorInfo, version: int
    ) -> ManagedCursor:
        """The cursor ``name`` of a managed ledger being taken over, from its metadata
        ``info`` read at ``version``. Takes the cursor over first: ``info`` is written back
        at ``version``, so the previous owner's next persist fails its version check (its
        cursor ledger is fenced below, but a persist may switch to a new ledger). Raises
        ``BadVersion`` if the metadata changed since it was read (read it again)."""
        stat = await ml.store.put(cursor_path(ml.name, name), info.encode(), version)
        version = stat.version
        snapshot: CursorSnapshot | None = None
        stale: list[int] = []
        if info.cursor_ledger >= 0:
            stale.append(info.cursor_ledger)
            try:
                reader = await ml.storage.open_ledger(info.cursor_ledger, recovery=True)
                try:
                    lac = reader.last_add_confirmed
                    if lac >= 0:
                        snapshot = CursorSnapshot.decode((await reader.read(lac, lac))[0].data)
                finally:
                    with contextlib.suppress(Exception):
                        await reader.close()
            except (MagnetarError, ValueError) as exc:
                log.warning(
                    "%s/%s: cursor ledger unreadable (%s); using metadata", ml.name, name, exc
                )
        if snapshot is None or snapshot.mark_delete < info.mark_delete:
            snapshot = CursorSnapshot(info.mark_delete, properties=info.properties)
        state = CursorState.from_snapshot(name, ml.ledgers, snapshot)
        state.on_ledgers_trimmed()
        cursor = cls(ml, state, durable=True, info_version=version)
        cursor._stale_ledgers = stale
        cursor._persisted_version = state.version
        cursor.persisted_mark_delete = snapshot.mark_delete
        return cursor

    async def create_metadata(self) -> None:
        info = CursorInfo(-1, self.state.mark_delete, dict(self.state.properties))
        try:
            stat = await self._ml.store.put(self.path, info.encode(), MUST_NOT_EXIST)
        except NodeExists as exc:
            self._ml.on_cursor_fenced(exc)
            raise ManagedLedgerFenced(f"{self.path} created by another owner") from exc
        self._info_version = stat.version

    # --- reading ---------------------------------------------------------------------------

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position, skipping acknowledged
        ones; ``[]`` at the end of the log. Advances the read position."""
        async with lazy_lock(self, "_read_lock"):
            runs = await self._read(max_entries)
        return [
            Entry(p, d, m)
            for run in runs
            for p, d, m in zip(run.positions, run.data, run.messages, strict=True)
        ]

    async def read_runs(self, max_entries: int, max_bytes: int = 0) -> list[EntryRun]:
        """Like :meth:`read_entries`, as runs (the dispatch path: no object per entry).
        Each run holds entries of one ledger, in log order; ``[]`` at the end of the log.

        ``max_bytes`` (0: no bound) caps the bytes read as Pulsar's
        ``dispatcherMaxReadSizeBytes`` does: the entries asked of each ledger are as many as
        fit by its average entry size in the bytes left, and none once not even one fits;
        at least one entry is read (a read may pass the cap by entries larger than the
        average)."""
        async with lazy_lock(self, "_read_lock"):
            return await self._read(max_entries, max_bytes)

    async def read_entries_or_wait(self, max_entries: int) -> list[Entry]:
        """Like :meth:`read_entries`, but at the end of the log park until an entry
        arrives (no polling). Cancel to stop waiting."""
        ledgers = self._ml.ledgers
        while True:
            entries = await self.read_entries(max_entries)
            if entries:
                return entries
            if ledgers.exists(ledgers.normalize(self.state.read_position)):
                continue  # a seek or an append happened meanwhile
            await self._ml.register_waiter()

    def read_runs_cached(self, max_entries: int, max_bytes: int = 0) -> list[EntryRun] | None:
        """Like :meth:`read_runs` without waiting: the same runs when the entry cache holds
        every entry the read takes and no other read is under way; None otherwise (then
        nothing was read and the read position is unchanged: call :meth:`read_runs`). The
        dispatcher's path when it is woken by an append, whose entries are cached."""
        lock = self._read_lock
        if lock is not None and lock.locked():
            return None
        state = self.state
        seg = self._ml.ledgers.last_segment
        at = state.read_position
        if (  # the usual tailing read: in the last ledger, nothing acknowledged past it
            seg is not None
            and at[0] == seg.ledger_id
            and 0 <= at[1] < seg.entries
            and max_entries > 0
            and not state.acked
            and at > state.mark_delete
        ):
            first = at[1]
            last = min(seg.entries - 1, first + max_entries - 1)
            capped = (  # by bytes: then the plan may read on after that run
                max_bytes
                and seg.size_bytes
                and first + max_bytes * seg.entries // seg.size_bytes <= last
            )
            if not capped:
                found = self._ml.cache.run_whole(seg.ledger_id, first, last)
                if found is None:
                    return None
                state.advance_read_to(Position(seg.ledger_id, last + 1))
                return [EntryRun(*found)]
        plan = self._read_plan(max_entries, max_bytes)
        read_cached = self._ml.reads.read_run_cached
        try:
            wanted = next(plan)
            while True:
                run = read_cached(*wanted)
                if run is None:
                    plan.close()
                    return None
                wanted = plan.send(run)
        except StopIteration as done:
            runs: list[EntryRun] = done.value
            return runs

    async def _read(self, max_entries: int, max_bytes: int = 0) -> list[EntryRun]:
        plan = self._read_plan(max_entries, max_bytes)
        read_run = self._ml.read_run
        try:
            wanted = next(plan)
            while True:
                wanted = plan.send(await read_run(*wanted))
        except StopIteration as done:
            runs: list[EntryRun] = done.value
            return runs

    def _read_plan(
        self, max_entries: int, max_bytes: int
    ) -> Generator[tuple[int, int, int], EntryRun, list[EntryRun]]:
        """The read of :meth:`read_runs` without I/O: yields each ``(ledger_id, first,
        last)`` to read and is sent that :meth:`ManagedLedger.read_run`; returns the runs
        (the read position advanced past them). Closed early, it changes nothing."""
        ledgers = self._ml.ledgers
        state = self.state
        out: list[EntryRun] = []
        read = 0
        read_bytes = 0
        epoch = self._epoch
        # The read position is committed once, after the last read: a read cancelled
        # midway (a consumer's timeout) must not skip entries it never returned.
        cursor_at = state.read_position
        while read < max_entries:
            pos = ledgers.normalize(cursor_at)
            if not ledgers.exists(pos):
                break
            if pos <= state.mark_delete:
                cursor_at = ledgers.next_position(state.mark_delete)
                continue
            acked = state.acked.range_containing(pos)
            if acked is not None:  # skip acknowledged ranges without reading them
                cursor_at = ledgers.next_position(acked[1])
                continue
            seg = ledgers.get(pos[0])
            assert seg is not None
            last = min(seg.entries - 1, pos[1] + (max_entries - read) - 1)
            if max_bytes:
                room = max_bytes - read_bytes
                if room <= 0:
                    break
                if seg.entries and seg.size_bytes:
                    fit = room * seg.entries // seg.size_bytes
                    if fit < 1:
                        if read:
                            break  # not even an average entry fits any more
                        fit = 1
                    last = min(last, pos[1] + fit - 1)
            next_acked = state.acked.next_start_after(pos)
            if next_acked is not None:
                last = min(last, next_acked - 1)
            # No entry of pos..last was acknowledged when the run was chosen; an ack that
            # arrives during the read's await bumps the state's version.
            version = state.version
            run = yield (pos[0], pos[1], last)
            if epoch != self._epoch:
                return []  # a seek/rewind raced this read; the caller reads again
            if not run:
                break
            n = len(run)
            if state.version != version:
                keep = [not state.is_acked(p) for p in run.positions]
                if not all(keep):
                    run = EntryRun(
                        list(compress(run.positions, keep)),
                        list(compress(run.data, keep)),
                        list(compress(run.messages, keep)),
                    )
            if run:
                out.append(run)
                read += len(run)
                if max_bytes:
                    read_bytes += sum(map(len, run.data))
            cursor_at = ledgers.next_position(Position(pos[0], pos[1] + n - 1))
        state.advance_read_to(cursor_at)
        return out

    # --- acknowledging ---------------------------------------------------------------------

    def ack(self, position: Position) -> None:
        """Individually acknowledge one entry (persisted within the persist interval)."""
        self.state.ack(position)

    def ack_many(self, positions: Iterable[Position]) -> None:
        self.state.ack_many(positions)

    def ack_positions(self, positions: Iterable[Position]) -> int:
        """Acknowledge several entries in one pass; returns the messages of the entries
        named (see :meth:`CursorState.ack_positions`)."""
        return self.state.ack_positions(positions)[1]

    def ack_cumulative(self, position: Position) -> None:
        self.state.ack_cumulative(position)

    def ack_batch_indexes(
        self, position: Position, batch_size: int, indexes: Iterable[int]
    ) -> None:
        self.state.ack_batch_indexes(position, batch_size, indexes)

    def skip(self, count: int) -> int:
        self._ml.maintainer.wake()  # an admin operation: to be persisted
        return self.state.skip(count)

    def clear_backlog(self) -> None:
        self._ml.maintainer.wake()  # an admin operation: to be persisted
        self.state.clear_backlog()

    def rewind(self) -> None:
        """Redeliver from the first unacknowledged entry."""
        self._epoch += 1
        self.state.rewind()

    def seek(self, position: Position) -> None:
        """Move the read position (not the acknowledgements)."""
        self._epoch += 1
        self.state.seek(position)

    async def reset(self, position: Position) -> None:
        """Subscription seek: deliver from ``position``; earlier entries count as
        acknowledged, later ones as not. Persisted before returning."""
        self._epoch += 1
        self.state.reset(position)
        await self.persist()

    async def reset_to_publish_time(
        self, publish_time_ms: int, publish_time_of: Callable[[bytes], int]
    ) -> Position:
        """Reset to the first entry published at or after ``publish_time_ms``."""
        pos = await self._ml.find_position_by_publish_time(publish_time_ms, publish_time_of)
        await self.reset(pos)
        return pos

    @property
    def backlog_entries(self) -> int:
        return self.state.backlog_entries

    @property
    def backlog_messages(self) -> int:
        return self.state.backlog_messages

    @property
    def mark_delete_position(self) -> Position:
        return self.state.mark_delete

    @property
    def read_position(self) -> Position:
        return self._ml.ledgers.normalize(self.state.read_position)

    # --- persisting ------------------------------------------------------------------------

    async def flush(self) -> None:
        """Persist now if anything changed."""
        await self.persist()

    @property
    def persisted(self) -> bool:
        """Whether the state has not changed since it was last stored (or restored)."""
        return self.state.version == self._persisted_version

    async def persist(self) -> None:
        """Store the state if it changed since the last persist. Raises
        :class:`ManagedLedgerFenced` if another owner took the cursor over."""
        if not self.durable:
            return
        async with lazy_lock(self, "_persist_lock"):
            version = self.state.version
            if version == self._persisted_version:
                return
            cfg = self._ml.config
            snapshot = self.state.snapshot(cfg.cursor_ranges_persist_max)
            data = snapshot.encode()
            stored = False
            if self._ledger is not None and self._ledger_entries < cfg.cursor_ledger_entries_max:
                try:
                    await self._ledger.add_nowait(data)
                    self._ledger_entries += 1
                    stored = True
                except Exception as exc:  # ledger client failure: fence, or switch ledgers
                    if is_fenced(exc):
                        self._ml.on_cursor_fenced(exc)
                        raise ManagedLedgerFenced(f"{self.path}: cursor ledger fenced") from exc
                    log.warning("%s: cursor ledger add failed (%s); switching", self.path, exc)
            if not stored:
                # the metadata names the cursor's ledger: written only when it changes
                # (as Pulsar's cursor); a restore takes the ledger's last snapshot
                await self._switch_ledger(data)
                await self._write_info(snapshot.mark_delete)
            self._persisted_version = version
            self.persisted_mark_delete = snapshot.mark_delete
            self.persist_count += 1
            await self._delete_stale_ledgers()

    async def _switch_ledger(self, first_snapshot: bytes) -> None:
        ml = self._ml
        writer = await ml.storage.create_ledger({"managed-ledger": ml.name, "cursor": self.name})
        await writer.add_nowait(first_snapshot)
        old = self._ledger
        self._ledger = writer
        self._ledger_entries = 1
        if old is not None:
            self._retire(old.ledger_id)
            with contextlib.suppress(Exception):
                await old.close()

    async def _write_info(self, mark_delete: Position) -> None:
        cursor_ledger = -1 if self._ledger is None else self._ledger.ledger_id
        info = CursorInfo(cursor_ledger, mark_delete, dict(self.state.properties))
        try:
            stat = await self._ml.store.put(self.path, info.encode(), self._info_version)
        except (BadVersion, NotFound) as exc:
            self._ml.on_cursor_fenced(exc)
            raise ManagedLedgerFenced(f"{self.path}: changed by another owner") from exc
        self._info_version = stat.version

    def _retire(self, ledger_id: int) -> None:
        if self._stale_ledgers is _NO_STALE_LEDGERS:
            self._stale_ledgers = []
        self._stale_ledgers.append(ledger_id)

    async def _delete_stale_ledgers(self) -> None:
        """Old cursor ledgers go once the metadata points at a newer one."""
        while self._stale_ledgers:
            ledger_id = self._stale_ledgers[0]
            await self._ml.storage.delete_ledger(ledger_id)
            self._stale_ledgers.pop(0)

    async def delete_storage(self) -> None:
        await self.close_storage()
        if self.durable:
            with contextlib.suppress(NotFound):
                await self._ml.store.delete(self.path)
            if self._ledger is not None:
                self._retire(self._ledger.ledger_id)
                self._ledger = None
            await self._delete_stale_ledgers()

    async def close_storage(self) -> None:
        if self._ledger is not None:
            with contextlib.suppress(Exception):
                await self._ledger.close()
