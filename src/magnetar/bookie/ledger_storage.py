"""Ledger storage: entry logs plus the index ``(ledger, entry) → location``, and checkpoints.

The index lives in memory (one :class:`LedgerRecord` per ledger) and is persisted at each
checkpoint to an index file ``index/<generation:010d>.idx`` of fixed-size records::

    type u8 | ledger u64 | a i64 | b u64 | c u32            (29 bytes)
    ENTRY   :  entry_id   location  record size
    LEDGER  :  lac        fenced    0
    DELETE  :  0          0         0

A checkpoint (:meth:`LedgerStorage.begin_checkpoint` on the loop, :meth:`run_checkpoint_io`
in a worker thread, :meth:`finish_checkpoint` on the loop) makes durable, in this order: the
entry-log buffers (fsync), the index delta (fsync), and the ``checkpoint`` file naming the
journal position up to which everything is now in ledger storage plus the index file's
generation, valid length and the CRC32C of that length (written to a temp file, fsync'ed and
renamed). After a crash, :meth:`load` reads the index up to that length, checks it against
the CRC (a missing, short or changed index refuses to start: the journal before that position
is gone) and the caller replays the journal from that position. When ledgers were deleted, the next checkpoint writes a whole new generation
instead of a delta, which drops them.

Idle ledgers' index arrays leave memory for spill files under ``index-spill/`` (a cache,
emptied at start-up; see :mod:`magnetar.bookie.entry_index`): the bookie calls
:meth:`LedgerStorage.spill_candidates` on the loop, :meth:`LedgerStorage.write_spills` in a
thread and :meth:`LedgerStorage.finish_spills` on the loop. A file no index needs any more
is removed by the next checkpoint's thread, never while a checkpoint runs (an index
rewrite's snapshot reads the files of the ledgers spilled when it was taken).

Garbage: every entry log's total and live bytes are tracked; :meth:`dead_logs` are logs with
no live entry (removed whole), :meth:`sparse_logs` logs worth compacting (live entries are
copied to the active log, then the old log is removed after the next checkpoint).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from array import array
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from pathlib import Path
from typing import Final

from magnetar.bookie import file_io
from magnetar.bookie.entry_index import EntryIndex, SpillFile
from magnetar.bookie.entry_log import (
    HEADER_SIZE,
    OFFSET_BITS,
    EntryLogger,
    StoredEntry,
    _Buffer,
    log_of,
)
from magnetar.bookie.errors import IndexCorrupt
from magnetar.bookie.journal import JournalPosition
from magnetar.common import crc32c

log = logging.getLogger(__name__)

INDEX_RECORD: Final = struct.Struct("<BQqQI")
_PACK_RUN_MIN: Final = 8
"""Runs of adds at least this long pack their index records with one ``map`` (cheaper per
entry from about 5 on; a run of one costs ~400 ns more that way)."""
SPILL_ENTRIES_MIN: Final = 4096
"""Ledgers with fewer entries keep their index in memory (48 KiB at most: not worth a file)."""
_pack_index: Final = INDEX_RECORD.pack
_ENTRY: Final = 1
_LEDGER: Final = 2
_DELETE: Final = 3

StoredRun = tuple[int, int, int, Sequence[int], Sequence[bytes]]
"""A run of adds to store: ledger id, first entry id, last add confirmed, checksums,
payloads (``checksums[i]`` belongs to ``payloads[i]``)."""

Records = tuple[list[int], list[int], list[int], list[int], list[bytes]]
"""Records of runs flattened: ledger ids, entry ids, lacs, checksums, payloads (one item of
each per entry)."""


def flatten(runs: Iterable[StoredRun]) -> Records:
    """The records of ``runs``, in order, as :data:`Records`."""
    ledger_ids: list[int] = []
    entry_ids: list[int] = []
    lacs: list[int] = []
    checksums: list[int] = []
    payloads: list[bytes] = []
    for ledger_id, first, lac, run_checksums, run_payloads in runs:
        n = len(run_payloads)
        ledger_ids += repeat(ledger_id, n)
        entry_ids += range(first, first + n)
        lacs += repeat(lac, n)
        checksums += run_checksums
        payloads += run_payloads
    return ledger_ids, entry_ids, lacs, checksums, payloads


@dataclass(slots=True)
class LedgerRecord:
    """What this bookie holds of one ledger."""

    entries: EntryIndex = field(default_factory=EntryIndex)
    """entry id → location and record size in the entry log (header + payload)."""
    lac: int = -1
    fenced: bool = False
    log_bytes: dict[int, int] = field(default_factory=dict)
    """entry-log id → record bytes of this ledger's entries held there: deleting the ledger
    takes them off the logs' live bytes in one step per log, not one per entry (a ledger of
    300 000 entries held the event loop ~100 ms)."""

    @property
    def last_entry_id(self) -> int:
        return self.entries.last_entry_id

    @property
    def size_bytes(self) -> int:
        return self.entries.size_total - HEADER_SIZE * len(self.entries)


@dataclass(slots=True)
class CheckpointJob:
    journal_position: JournalPosition
    frozen: list[_Buffer]
    index_bytes: bytes | bytearray
    generation: int
    rewrite: bool
    logs_to_remove: list[int]
    dirty_index: bytes | bytearray | memoryview = b""
    """The index records of entries added since the previous checkpoint (the start of
    ``index_bytes`` unless ``rewrite``, then a view of it): given back by
    :meth:`LedgerStorage.abort_checkpoint`."""
    dirty_ledgers: frozenset[int] = frozenset()
    snapshot: list[tuple[int, EntryIndex, int, bool]] | None = None
    """For a rewrite: ``(ledger, entries, lac, fenced)`` of every ledger, copied on the loop;
    :meth:`LedgerStorage.run_checkpoint_io` packs and writes them a chunk at a time in its
    thread (packing a record per entry on the loop stalled it for tens of milliseconds)."""
    spill_files_to_remove: list[Path] = field(default_factory=list)
    """Spill files no index and no snapshot reads any more (removed first by the I/O)."""


@dataclass(slots=True)
class _CheckpointState:
    journal_position: JournalPosition = field(default_factory=lambda: JournalPosition(0, 0))
    generation: int = 1
    index_length: int = 0
    index_crc32c: int | None = 0
    """CRC32C of the index file's first ``index_length`` bytes (None: a checkpoint file
    written before it was recorded; :meth:`LedgerStorage.load` computes it then)."""


class LedgerStorage:
    """The in-memory index and its persistence; owns an :class:`EntryLogger`. Event-loop
    methods are not thread-safe; ``run_checkpoint_io`` and ``read_file`` run in threads."""

    def __init__(self, data_dir: Path, *, log_size_max_bytes: int = 512 * 1024 * 1024) -> None:
        self._data_dir = data_dir
        self._index_dir = data_dir / "index"
        self._index_dir.mkdir(parents=True, exist_ok=True)
        self._checkpoint_path = data_dir / "checkpoint"
        self.ledgers: dict[int, LedgerRecord] = {}
        self._state = self._read_checkpoint()
        self.entry_logger = EntryLogger(
            data_dir / "entrylogs", log_size_max_bytes=log_size_max_bytes
        )
        # Index records of entries added since the last checkpoint, packed as they come: a
        # checkpoint then takes them in O(1) instead of packing 100k records in one loop turn.
        self._dirty_index = bytearray()
        self._dirty_ledgers: set[int] = set()
        self._rewrite = False
        self.log_total_bytes: dict[int, int] = {}
        self.log_live_bytes: dict[int, int] = {}
        self._logs_pending_removal: list[int] = []
        self._spill_dir = data_dir / "index-spill"
        shutil.rmtree(self._spill_dir, ignore_errors=True)  # a cache: what is left is stale
        self._spill_dir.mkdir()
        self._spill_serial = 0
        self._spill_files_to_remove: list[Path] = []

    # -- startup ----------------------------------------------------------------------------

    def _read_checkpoint(self) -> _CheckpointState:
        try:
            raw = json.loads(self._checkpoint_path.read_bytes())
        except FileNotFoundError:
            return _CheckpointState()
        crc = raw.get("index_crc32c")
        return _CheckpointState(
            JournalPosition(int(raw["journal_file"]), int(raw["journal_offset"])),
            int(raw["index_generation"]),
            int(raw["index_length"]),
            None if crc is None else int(crc),
        )

    def _index_path(self, generation: int) -> Path:
        return self._index_dir / f"{generation:010d}.idx"

    def load(self) -> JournalPosition:
        """Load the index as of the last checkpoint; returns where journal replay starts.

        Raises :class:`~magnetar.bookie.errors.IndexCorrupt` (and changes nothing on disk)
        if the index file the checkpoint names is missing, shorter than the checkpoint says,
        or does not match the checkpoint's CRC32C of it: the journal before the checkpoint
        position is gone, so starting would serve without the ledgers and entries the file
        held (``NO_SUCH_LEDGER`` for acknowledged data)."""
        path = self._index_path(self._state.generation)
        length = self._state.index_length
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = -1
        if max(size, 0) < length or length % INDEX_RECORD.size:
            found = "is missing" if size < 0 else f"holds {size} bytes"
            raise IndexCorrupt(
                f"index file {path} {found}, but {self._checkpoint_path} says it holds "
                f"{length} bytes of index records: files the bookie had synced are gone "
                "(journal replay starts at the checkpoint, earlier journal files are deleted, "
                "so it cannot rebuild them). Restore the data directory from a copy"
            )
        data = b""
        if size >= 0:
            with path.open("rb") as f:
                data = f.read(length)
        crc = crc32c.crc32c(data)
        if self._state.index_crc32c not in (None, crc):
            raise IndexCorrupt(
                f"index file {path} does not match {self._checkpoint_path} (CRC32C of its "
                f"first {length} bytes is {crc:#010x}, the checkpoint recorded "
                f"{self._state.index_crc32c:#010x}): it changed on disk after it was synced "
                "(journal replay starts at the checkpoint, earlier journal files are deleted, "
                "so it cannot rebuild it). Restore the data directory from a copy"
            )
        self._state.index_crc32c = crc
        if size >= 0:
            # Anything past the checkpointed length was never part of a checkpoint.
            os.truncate(path, length)
        for p in self._index_dir.glob("*.idx"):
            if p != path:
                p.unlink()
        for type_, ledger, a, b, c in INDEX_RECORD.iter_unpack(data):
            if type_ == _ENTRY:
                rec = self.ledgers.get(ledger)
                if rec is None:
                    rec = self.ledgers[ledger] = LedgerRecord()
                rec.entries.put(a, b, c)
            elif type_ == _LEDGER:
                rec = self.ledgers.get(ledger)
                if rec is None:
                    rec = self.ledgers[ledger] = LedgerRecord()
                rec.lac = max(rec.lac, a)
                rec.fenced = rec.fenced or bool(b)
            elif type_ == _DELETE:
                self.ledgers.pop(ledger, None)
        for log_id in self.entry_logger.log_ids():
            self.log_total_bytes[log_id] = self.entry_logger.path(log_id).stat().st_size
            self.log_live_bytes.setdefault(log_id, 0)
        for rec in self.ledgers.values():
            log_bytes = rec.log_bytes
            for _entry, loc, size in rec.entries.items():
                lid = log_of(loc)
                log_bytes[lid] = log_bytes.get(lid, 0) + size
            for lid, size in log_bytes.items():
                self.log_live_bytes[lid] = self.log_live_bytes.get(lid, 0) + size
        return self._state.journal_position

    # -- writes (event loop) ----------------------------------------------------------------

    def add_entry(
        self, ledger_id: int, entry_id: int, lac: int, checksum: int, payload: bytes
    ) -> None:
        self.add_entries(ledger_id, entry_id, lac, (checksum,), (payload,))

    def add_entries(
        self,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> None:
        """Store entries ``first_entry_id``, ``+1``, ... of ``ledger_id`` (``checksums[i]``
        belongs to ``payloads[i]``) in the write cache and the index. An entry stored again
        replaces the earlier copy."""
        locations = self.entry_logger.add_run(ledger_id, first_entry_id, lac, checksums, payloads)
        self._index_run(ledger_id, first_entry_id, lac, payloads, locations)

    def add_runs(self, runs: Sequence[StoredRun], records: Records) -> None:
        """:meth:`add_entries` for each run of ``runs``, in order, given their records
        flattened (:func:`flatten`): the records of all of them go to the entry log in one
        pass (:meth:`EntryLogger.add_records`) when they can."""
        locations = self.entry_logger.add_records(*records) if len(runs) > 1 else None
        if locations is None:
            for run in runs:
                self.add_entries(*run)
            return
        start = 0
        for ledger_id, first, lac, _, payloads in runs:
            end = start + len(payloads)
            self._index_run(ledger_id, first, lac, payloads, locations[start:end])
            start = end

    def _index_run(
        self,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        payloads: Sequence[bytes],
        locations: list[int],
    ) -> None:
        """Index entries ``first_entry_id``, ``+1``, ... of ``ledger_id``, just added to the
        entry log at ``locations``, and count their bytes."""
        rec = self.ledgers.get(ledger_id)
        if rec is None:
            rec = self.ledgers[ledger_id] = LedgerRecord()
        sizes = [HEADER_SIZE + len(payload) for payload in payloads]
        for old_location, old_size in rec.entries.put_run(first_entry_id, locations, sizes):
            self._unlive(rec, old_location, old_size)
        n = len(locations)
        if n >= _PACK_RUN_MIN:  # (a bytearray: += extends it in place)
            self._dirty_index += b"".join(
                map(
                    _pack_index,
                    repeat(_ENTRY),
                    repeat(ledger_id),
                    range(first_entry_id, first_entry_id + n),
                    locations,
                    sizes,
                )
            )
        else:
            dirty = self._dirty_index
            for i in range(n):
                dirty += _pack_index(_ENTRY, ledger_id, first_entry_id + i, locations[i], sizes[i])
        if n:
            self._count_bytes(rec, locations, sizes)
        if lac > rec.lac:
            rec.lac = lac
        self._dirty_ledgers.add(ledger_id)

    def _count_bytes(self, rec: LedgerRecord, locations: Sequence[int], sizes: list[int]) -> None:
        """Count a run's record bytes as total and live in their logs and in ``rec``."""
        total = self.log_total_bytes
        live = self.log_live_bytes
        log_bytes = rec.log_bytes
        lid = locations[0] >> OFFSET_BITS
        runs: Iterable[tuple[int, int]]
        if locations[-1] >> OFFSET_BITS == lid:  # a run lands in one log (a roll splits it)
            runs = ((lid, sizes[0] if len(sizes) == 1 else sum(sizes)),)
        else:
            runs = (
                (location >> OFFSET_BITS, size)
                for location, size in zip(locations, sizes, strict=True)
            )
        for lid, size in runs:
            total[lid] = total.get(lid, 0) + size
            live[lid] = live.get(lid, 0) + size
            log_bytes[lid] = log_bytes.get(lid, 0) + size

    def _unlive(self, rec: LedgerRecord, location: int, size: int) -> None:
        """An entry of ``rec`` at ``location`` is no longer held there (stored again)."""
        lid = log_of(location)
        self.log_live_bytes[lid] = self.log_live_bytes.get(lid, 0) - size
        rec.log_bytes[lid] -= size

    def fence(self, ledger_id: int) -> LedgerRecord:
        """Fence the ledger (creating an empty record if this bookie has none)."""
        rec = self.ledgers.get(ledger_id)
        if rec is None:
            rec = self.ledgers[ledger_id] = LedgerRecord()
        if not rec.fenced:
            rec.fenced = True
            self._dirty_ledgers.add(ledger_id)
        return rec

    def delete_ledgers(self, ledger_ids: list[int]) -> int:
        """Forget ledgers (deleted from metadata). Returns how many were known."""
        live = self.log_live_bytes
        n = 0
        for ledger_id in ledger_ids:
            rec = self.ledgers.pop(ledger_id, None)
            if rec is None:
                continue
            n += 1
            for lid, size in rec.log_bytes.items():
                live[lid] = live.get(lid, 0) - size
            self._forget_spill_files(rec.entries)
            self._dirty_ledgers.discard(ledger_id)
            self._rewrite = True
        return n

    def _forget_spill_files(self, entries: EntryIndex) -> None:
        """Queue for removal the spill files of an index that is gone."""
        stale = entries.stale_spill()
        current = entries.spill_file
        for path in (stale, None if current is None else current.path):
            if path is not None:
                self._spill_files_to_remove.append(path)

    # -- spilling idle indexes (loop, thread, loop) -----------------------------------------

    def spill_candidates(self, idle_scans: int) -> list[tuple[int, EntryIndex, Path]]:
        """Loop, once per idle scan: the indexes of ledgers neither read nor written for
        ``idle_scans`` scans in a row and worth a file, each with a new spill file's path
        for :meth:`write_spills`. Indexes read back and unchanged since drop their arrays
        here at once (their file still holds them)."""
        out = []
        removals = self._spill_files_to_remove
        for ledger, rec in self.ledgers.items():
            entries = rec.entries
            stale = entries.stale_spill()
            if stale is not None:
                removals.append(stale)
            if entries.spilled:
                continue
            if entries.touched:
                entries.touched = False
                entries.idle_scans = 0
                continue
            entries.idle_scans += 1
            if entries.idle_scans < idle_scans or len(entries) < SPILL_ENTRIES_MIN:
                continue
            kept = entries.spill_file
            if kept is not None:
                entries.drop_arrays(kept)
                continue
            self._spill_serial += 1
            out.append((ledger, entries, self._spill_dir / f"{ledger}-{self._spill_serial}.ent"))
        return out

    def write_spills(
        self, candidates: list[tuple[int, EntryIndex, Path]]
    ) -> list[tuple[int, EntryIndex, SpillFile]]:
        """Worker thread: write the candidates' spill files (one that fails is left out,
        its index stays in memory)."""
        out = []
        for ledger, entries, path in candidates:
            try:
                out.append((ledger, entries, entries.write_spill(path)))
            except OSError as exc:
                log.warning("index of ledger %d stays in memory: %s", ledger, exc)
                _remove_spill_files([path])
        return out

    def finish_spills(self, written: list[tuple[int, EntryIndex, SpillFile]]) -> int:
        """Loop: free the arrays of the indexes written and unchanged since; returns how
        many. The files of the others are removed by the next checkpoint."""
        dropped = 0
        for ledger, entries, spill in written:
            rec = self.ledgers.get(ledger)
            if rec is not None and rec.entries is entries and entries.drop_arrays(spill):
                dropped += 1
            else:
                self._spill_files_to_remove.append(spill.path)
        return dropped

    # -- reads ------------------------------------------------------------------------------

    def location(self, ledger_id: int, entry_id: int) -> int | None:
        rec = self.ledgers.get(ledger_id)
        if rec is None:
            return None
        return rec.entries.get(entry_id)

    def read_buffered(self, location: int) -> StoredEntry | None:
        return self.entry_logger.read_buffered(location)

    def read_file(self, location: int) -> StoredEntry:
        """Worker thread."""
        return self.entry_logger.read_file(location)

    # -- checkpoints ------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return bool(self._dirty_index or self._dirty_ledgers or self._rewrite)

    def begin_checkpoint(self, journal_position: JournalPosition) -> CheckpointJob:
        """Snapshot what must be persisted; ``journal_position`` must be the journal's end at
        this instant (every record before it has been applied here)."""
        frozen = self.entry_logger.freeze()
        rewrite = self._rewrite
        snapshot = None
        index_bytes: bytes | bytearray = b""  # a rewrite's: written by run_checkpoint_io
        # The dirty records are taken, not copied: a second's worth at 27 000 entries/s is
        # ~0.8 MB, and copying it twice and joining it (fresh pages each time) took 2.2 ms of
        # the loop every checkpoint.
        taken = self._dirty_index
        self._dirty_index = bytearray()
        dirty_index: bytes | bytearray | memoryview = taken
        if rewrite:
            snapshot = [
                (ledger, rec.entries.copy(), rec.lac, rec.fenced)
                for ledger, rec in self.ledgers.items()
            ]
            generation = self._state.generation + 1
        else:
            # Entries of ledgers deleted since are harmless here: deleting sets _rewrite.
            ledgers = self.ledgers
            entries_length = len(taken)
            for lg in self._dirty_ledgers:
                dirty = ledgers.get(lg)
                if dirty is not None:
                    taken += _pack_index(_LEDGER, lg, dirty.lac, int(dirty.fenced), 0)
            index_bytes = taken
            dirty_index = memoryview(taken)[:entries_length]  # no resizing from here on
            generation = self._state.generation
        dirty_ledgers = frozenset(self._dirty_ledgers)
        self._dirty_ledgers = set()
        self._rewrite = False
        removals, self._logs_pending_removal = self._logs_pending_removal, []
        spill_removals, self._spill_files_to_remove = self._spill_files_to_remove, []
        return CheckpointJob(
            journal_position,
            frozen,
            index_bytes,
            generation,
            rewrite,
            removals,
            dirty_index,
            dirty_ledgers,
            snapshot,
            spill_files_to_remove=spill_removals,
        )

    def abort_checkpoint(self, job: CheckpointJob) -> None:
        """Loop: a checkpoint's I/O failed (``ENOSPC``, ``EIO``): give everything
        :meth:`begin_checkpoint` took back, so the next checkpoint writes it again.

        Without this, the next successful checkpoint would record a journal position past
        entries whose buffers or index records were never written, and the journal files
        holding them would be deleted: acknowledged entries lost. The journal stays the
        source of truth until a checkpoint covering its records succeeds.

        Rewriting is safe: buffers go to the same offsets of the same logs, and index
        records are idempotent (the same entry at the same location)."""
        self.entry_logger.unfreeze(job.frozen)
        self._dirty_index[0:0] = job.dirty_index
        self._dirty_ledgers |= job.dirty_ledgers
        self._rewrite = self._rewrite or job.rewrite
        self._logs_pending_removal[0:0] = job.logs_to_remove

    def run_checkpoint_io(self, job: CheckpointJob) -> None:
        """Worker thread: entry logs, then index, then the checkpoint file."""
        _remove_spill_files(job.spill_files_to_remove)  # read by no snapshot (module doc)
        if job.frozen:
            self.entry_logger.write_frozen(job.frozen)
        path = self._index_path(job.generation)
        created = not path.exists()
        crc: int | None
        if job.rewrite:
            assert job.snapshot is not None
            length = 0
            written_crc = 0

            def counted(chunks: Iterator[bytearray]) -> Iterator[bytearray]:
                nonlocal length, written_crc
                for chunk in chunks:
                    length += len(chunk)
                    written_crc = crc32c.crc32c(chunk, written_crc)
                    yield chunk

            file_io.write_chunks_synced(path, counted(_packed_snapshot(job.snapshot)))
            crc = written_crc
            job.snapshot = None
        else:
            file_io.write_at_synced(path, job.index_bytes, self._state.index_length)
            length = self._state.index_length + len(job.index_bytes)
            previous = self._state.index_crc32c
            crc = None if previous is None else crc32c.crc32c(job.index_bytes, previous)
        if created:  # its directory entry; appending to an existing file needs no dir sync
            file_io.fsync_dir(self._index_dir)
        state = _CheckpointState(job.journal_position, job.generation, length, crc)
        tmp = self._checkpoint_path.with_suffix(".tmp")
        file_io.write_file_synced(
            tmp,
            json.dumps(
                {
                    "journal_file": state.journal_position.file_id,
                    "journal_offset": state.journal_position.offset,
                    "index_generation": state.generation,
                    "index_length": state.index_length,
                    "index_crc32c": state.index_crc32c,
                }
            ).encode(),
        )
        file_io.replace(tmp, self._checkpoint_path)
        # The file may name the new state from here on (even if the directory sync below
        # fails): later checkpoints must build on it, never rewrite what it references.
        old_generation = self._state.generation
        self._state = state
        file_io.fsync_dir(self._data_dir)
        if job.rewrite and old_generation != job.generation:
            file_io.unlink(self._index_path(old_generation))

    def finish_checkpoint(self, job: CheckpointJob) -> list[int]:
        """Loop: drop flushed buffers and the accounting of ``job.logs_to_remove``. Returns
        those logs: the persisted index no longer references them, so they are the caller's
        to remove (:meth:`remove_logs`), after the checkpoint, in a thread of their own."""
        self.entry_logger.release(job.frozen)
        for log_id in job.logs_to_remove:
            self.log_total_bytes.pop(log_id, None)
            self.log_live_bytes.pop(log_id, None)
        return job.logs_to_remove

    def remove_logs(self, log_ids: list[int]) -> int:
        """Worker thread: delete entry logs no committed checkpoint references (from
        :meth:`finish_checkpoint`), gradually (a 512 MiB log takes a second or more). Returns
        the bytes freed. Raises ``OSError``; the caller then hands all of ``log_ids`` to
        :meth:`retry_removal` (a log already removed is skipped next time)."""
        return sum(self.entry_logger.remove(log_id) for log_id in log_ids)

    def retry_removal(self, log_ids: list[int]) -> None:
        """Loop: logs :meth:`remove_logs` could not remove; the next checkpoint hands them
        back (the index already left them: no rewrite)."""
        self._logs_pending_removal.extend(log_ids)

    # -- garbage ----------------------------------------------------------------------------

    def _settled_logs(self) -> list[int]:
        """Logs fully on disk and no longer appended to."""
        active = self.entry_logger.active_log_id
        return [lid for lid in self.log_total_bytes if lid < active]

    def dead_logs(self) -> list[int]:
        return [lid for lid in self._settled_logs() if self.log_live_bytes.get(lid, 0) <= 0]

    def sparse_logs(self, live_fraction_max: float) -> list[int]:
        out = []
        for lid in self._settled_logs():
            total = self.log_total_bytes[lid]
            live = self.log_live_bytes.get(lid, 0)
            if live > 0 and total and live / total < live_fraction_max:
                out.append(lid)
        return out

    def live_locations(self, log_id: int) -> list[tuple[int, array[int], array[int]]]:
        """``(ledger, entry ids, locations)`` of the live entries stored in ``log_id``, per
        ledger holding some (arrays: 16 bytes an entry; a tuple of ints each took ~150, ~30
        MB for a log of 200 000 live entries)."""
        out = []
        for ledger, rec in self.ledgers.items():
            if rec.log_bytes.get(log_id, 0) <= 0:  # none there (a spilled index stays out)
                continue
            entry_ids: array[int] = array("q")
            locations: array[int] = array("q")
            for entry, loc, _size in rec.entries.items():
                if loc >> OFFSET_BITS == log_id:
                    entry_ids.append(entry)
                    locations.append(loc)
            out.append((ledger, entry_ids, locations))
        return out

    def relocate(
        self, ledger_id: int, entry_id: int, old_location: int, stored: StoredEntry
    ) -> None:
        """Compaction: copy an entry read from an old log to the active log, if it is still
        live at ``old_location``."""
        rec = self.ledgers.get(ledger_id)
        if rec is None or rec.entries.get(entry_id) != old_location:
            return
        lac = rec.lac
        self.add_entry(
            ledger_id, entry_id, stored.last_add_confirmed, stored.checksum, stored.payload
        )
        rec.lac = lac

    def schedule_removal(self, log_ids: list[int]) -> None:
        """Remove these logs after the next checkpoint (once the index no longer needs them)."""
        self._logs_pending_removal.extend(log_ids)
        self._rewrite = self._rewrite or bool(log_ids)

    def close(self) -> None:
        self.entry_logger.close()


def _remove_spill_files(paths: Iterable[Path]) -> None:
    """Worker thread: remove spill files; one that cannot be is left (a cache: start-up
    removes it), never a reason to fail the checkpoint."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove index spill file %s: %s", path, exc)


_REWRITE_CHUNK_RECORDS: Final = 64 * 1024
"""Index records packed and written at a time by an index rewrite (~1.9 MB)."""


def _packed_snapshot(snapshot: list[tuple[int, EntryIndex, int, bool]]) -> Iterator[bytearray]:
    """A whole index generation (each ledger's entry records, then its ledger record),
    packed in place a chunk of :data:`_REWRITE_CHUNK_RECORDS` records at a time, with no
    Python call or ``bytes`` per record. One ``bytes`` per record and a join peaked at 179
    bytes an entry; the whole generation in one buffer at 29 (a ~100 MB spike of the
    standalone's memory after three passes of ``benchmarks/broker.py``): now a chunk.

    Consumes ``snapshot`` (from its end), so each ledger's copy is freed once packed: a
    spilled ledger's arrays, read back here, are in memory one ledger at a time (kept in
    the list, every spilled index came back at once: +39 MB for 3 million entries)."""
    size = INDEX_RECORD.size
    pack_into = INDEX_RECORD.pack_into
    capacity = _REWRITE_CHUNK_RECORDS * size
    out = bytearray(capacity)
    pos = 0
    while snapshot:
        ledger, entries, lac, fenced = snapshot.pop()
        ids, locations, sizes = (iter(column) for column in entries.columns())
        remaining = len(entries)
        del entries  # (the iterators keep what they need)
        while True:
            if pos == capacity:
                yield out
                out = bytearray(capacity)
                pos = 0
            if not remaining:
                break
            k = min(remaining, (capacity - pos) // size)
            end = pos + k * size
            deque(
                map(
                    pack_into,
                    repeat(out),
                    range(pos, end, size),
                    repeat(_ENTRY),
                    repeat(ledger),
                    islice(ids, k),
                    islice(locations, k),
                    islice(sizes, k),
                ),
                maxlen=0,
            )
            pos = end
            remaining -= k
        pack_into(out, pos, _LEDGER, ledger, lac, int(fenced), 0)
        pos += size
    if pos:
        del out[pos:]
        yield out
