"""The journal: a write-ahead log that makes every add durable before it is acknowledged.

Files ``journal/<file_id:020d>.jnl`` hold records back to back::

    +---------+-----------+----------+--------+-------------+--------+----------+---------+
    | len u32 | hcrc u32  | type u8  | ledger | entry i64   | lac i64| crc u32  | payload |
    |         |           |          | u64    |             |        | (entry's)|         |
    +---------+-----------+----------+--------+-------------+--------+----------+---------+

``len`` is the payload length; ``hcrc`` is the CRC32C of the file's id (a ``u64``) followed
by the fields after it (type..crc); ``type`` is a :class:`RecordKind`; ``crc`` is the
client's CRC32C of the payload. With the file's id under ``hcrc``, a record is valid only in
the file it was written for: a reused file's old records read as the end of what was written
(see *Reuse* below). Replay also takes records whose ``hcrc`` leaves the file id out, the
format of journals written before it was added (such files are never reused).

Replay tells the end of the written part from corruption (as etcd's WAL does). Files are
zero-filled ahead of the records (``prealloc_bytes`` at a time, see
:mod:`~magnetar.bookie.journal_writer`), so the first record that is short or fails a check
is one of two things:

* the end: only zeros follow, or bytes holding no valid record (the torn tail of a crash or
  of a failed write; nothing after it was ever acknowledged, because acknowledgements wait
  for the sync that covers them). Replay goes on with the next file;
* corruption: a valid record follows it. Records after the bad one were synced, so the bad
  one was too, and it changed on disk since. Replay raises :class:`JournalCorrupt` (the
  bookie refuses to start) unless ``skip_invalid`` (BookKeeper's
  ``skipReplayJournalInvalidRecord``): then it logs an error, counts the damaged span in
  :attr:`ReplayStats.corrupt_spans` and goes on at the next valid record.

Group commit: :meth:`Journal.append` only copies the record into an in-memory batch. One
flusher task hands the batch to the journal's writer process
(:mod:`~magnetar.bookie.journal_writer`, a child process started by the first write), which
writes and fdatasyncs it, so the event loop keeps accepting adds meanwhile; everything
appended while one sync runs is covered by the next. A process, not a thread: a thread
whose fdatasync returned needed the GIL back from the busy event loop (0.6-0.8 ms each
time, up to three times a sync); the process answers on a pipe the loop's selector watches.
When ``group_wait_ms`` > 0 syncs are paced: one starts no sooner than ``group_wait_ms``
after the previous one started (unless ``group_bytes_max`` are pending), so an idle journal
syncs at once and a busy one gathers more records per sync; with 0 it syncs as soon as the
previous sync returns. Only a loaded journal is paced: one with fewer than 128 records
pending when a sync came back syncs again as soon as it has records, so a light load is not
held to one sync per ``group_wait_ms`` (its bursts would queue behind the pacing instead of
the disk).
``pending_bytes_max`` bounds memory: callers check :attr:`Journal.over_limit` and stop
reading from their sockets until durable callbacks fire.

Write failures (``ENOSPC``, ``EIO``) are operating errors, not the end of the journal: the
records of the failed batch and every record appended behind it are dropped (never
acknowledged: their ``on_failure`` callbacks run with the error), the journal moves on to a
new file (so the failed file's possibly torn end stays its end, never a gap before later
records), :attr:`Journal.failed` holds the error until a later write succeeds, and the
owner's ``on_write_failure`` listener is told. Later appends are tried again.

Files roll at ``file_size_max_bytes`` (decided at append time, so every record's position is
known at once); files wholly before a checkpoint's position are removed with
:meth:`Journal.remove_before`.

Reuse (BookKeeper's ``journalReuseFiles``): with ``reuse_files``, a checkpointed file this
journal wrote is renamed ``<file_id:020d>.jnl.spare`` instead of deleted (one is kept,
:data:`SPARE_FILES_MAX`); the writer process renames a spare to the next file's name when it
opens that file, and writes over the old records in place. An fdatasync of a file whose size
and blocks do not change writes data only; one that grows the file also commits its new size
(on ext4 with the entry logs' dirty data, which couples the journal to the checkpoint).
Only files written in this format are kept as spares: this journal's own, and spares (made
from such files only). An older file's records would still validate.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import Final

from magnetar.bookie import file_io
from magnetar.bookie.errors import JournalCorrupt
from magnetar.bookie.journal_process import RecordRun, Segment, WriterProcess
from magnetar.bookie.journal_writer import (
    JOURNAL_SUFFIX,
    SPARE_SUFFIX,
    journal_path,
)
from magnetar.common import crc32c
from magnetar.common.clock import Clock
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.speedups import CRECORDS

log = logging.getLogger(__name__)

RECORD_HEADER: Final = struct.Struct("<IIBQqqI")
_CRC_PART: Final = struct.Struct("<QBQqqI")
"""What ``hcrc`` covers: the file's id, then the header's fields after ``hcrc``."""
_FILE_ID: Final = struct.Struct("<Q")
_LENGTH: Final = struct.Struct("<I")
HEADER_SIZE: Final = RECORD_HEADER.size
SPARE_FILES_MAX: Final = 1
"""Spare files kept with ``reuse_files``: the file before the one being written is
checkpointed and made spare long before the journal rolls again (a checkpoint runs every
few seconds, or each time the write cache fills), so one spare is there at each roll."""


class RecordKind(enum.IntEnum):
    """What a journal record holds (the ``type`` byte)."""

    ADD_ENTRY = 1
    """An entry: ``payload`` is its data, ``crc`` its CRC32C."""
    FENCE = 2
    """The ledger was fenced (no payload)."""


ADD_ENTRY: Final = RecordKind.ADD_ENTRY
FENCE: Final = RecordKind.FENCE
_KINDS: Final = frozenset(int(k) for k in RecordKind)
COPY_MAX_BYTES: Final = 16 * 1024
"""Runs whose payloads are all this small are encoded by the compiled encoder where their
batch goes (a :class:`~magnetar.bookie.journal_process.RecordRun`, the payloads copied
once); bigger payloads go to the writer as they are. Copied in C,
an entry of a hundred small messages (~10 KB) costs less than its header made in Python
and its own step of the copy into the writer's ring; past a few tens of kilobytes the copy
costs more."""
_KIND_BYTES: Final = tuple(bytes([k]) for k in sorted(_KINDS))
"""Where a record could start: its ``type`` byte is a known kind. A scan for the next valid
record looks for these bytes with ``bytes.find`` (memchr: a 4 MiB zero-filled tail takes
well under a millisecond; a regular expression's character class took 70 ms)."""
_TYPE_OFFSET: Final = 8

_Callback = tuple[Callable[[], None], Callable[[BaseException], None] | None]
"""A durability callback and its failure callback."""


@dataclass(frozen=True, slots=True, order=True)
class JournalPosition:
    """A point in the journal: everything before it (in file order) precedes it."""

    file_id: int
    offset: int


@frozen_struct(kw_only=False)
class JournalRecord:
    type: RecordKind
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    checksum: int
    payload: bytes


def encode_record(
    file_id: int,
    type_: int,
    ledger_id: int,
    entry_id: int,
    lac: int,
    checksum: int,
    payload_len: int,
) -> bytes:
    """The header of a record in journal file ``file_id``; the payload follows it
    unchanged."""
    part = _CRC_PART.pack(file_id, type_, ledger_id, entry_id, lac, checksum)
    return RECORD_HEADER.pack(
        payload_len, crc32c.crc32c(part), type_, ledger_id, entry_id, lac, checksum
    )


def run_buffers(
    file_id: int,
    type_: int,
    ledger_ids: int | Sequence[int],
    entry_ids: int | Sequence[int],
    lacs: int | Sequence[int],
    checksums: Sequence[int],
    payloads: Sequence[bytes],
    payload_max: int,
    size: int,
) -> Iterable[bytes | RecordRun]:
    """The buffers holding the records of ``payloads`` (the largest ``payload_max`` bytes,
    ``size`` bytes of records in all), columns as :func:`record_parts` takes them: one
    :class:`RecordRun` for the compiled encoder when the payloads are small enough to copy,
    else each header and payload uncopied."""
    if CRECORDS is not None and payload_max <= COPY_MAX_BYTES:
        return (RecordRun(file_id, type_, ledger_ids, entry_ids, lacs, checksums, payloads, size),)
    return record_parts(file_id, type_, ledger_ids, entry_ids, lacs, checksums, payloads)


def record_parts(
    file_id: int,
    type_: int,
    ledger_ids: int | Sequence[int],
    entry_ids: int | Sequence[int],
    lacs: int | Sequence[int],
    checksums: Sequence[int],
    payloads: Sequence[bytes],
) -> Iterator[bytes]:
    """Each record's header, then its payload, in order, for journal file ``file_id``: the
    records of a run in C loops, without copying the payloads. ``ledger_ids`` and ``lacs``:
    an int for every record, or one each; ``entry_ids``: the first of consecutive ids, or
    one each. The compiled ``journal_records``
    (:data:`~magnetar.protocol.speedups.CRECORDS`) returns the same bytes joined."""
    n = len(payloads)
    if isinstance(ledger_ids, int):
        ledger_ids = [ledger_ids] * n
    if isinstance(entry_ids, int):
        entry_ids = range(entry_ids, entry_ids + n)
    if isinstance(lacs, int):
        lacs = [lacs] * n
    types = repeat(type_)
    sizes = map(len, payloads)
    parts = map(_CRC_PART.pack, repeat(file_id), types, ledger_ids, entry_ids, lacs, checksums)
    crcs = map(crc32c.crc32c, parts)
    headers = map(RECORD_HEADER.pack, sizes, crcs, types, ledger_ids, entry_ids, lacs, checksums)
    return chain.from_iterable(zip(headers, payloads, strict=True))


def journal_file_ids(directory: Path) -> list[int]:
    ids = []
    for p in directory.glob(f"*{JOURNAL_SUFFIX}"):
        with contextlib.suppress(ValueError):
            ids.append(int(p.stem))
    return sorted(ids)


def spare_paths(directory: Path) -> list[Path]:
    """The journal's spare files (checkpointed files kept for reuse)."""
    return list(directory.glob(f"*{JOURNAL_SUFFIX}{SPARE_SUFFIX}"))


def _path(directory: Path, file_id: int) -> Path:
    return Path(journal_path(str(directory), file_id))


@dataclass(slots=True)
class ReplayStats:
    """What a replay found besides its records."""

    records: int = 0
    corrupt_spans: int = 0
    """Damaged spans skipped (only with ``skip_invalid``)."""
    corrupt_bytes: int = 0


def _record_at(data: bytes, pos: int, file_id: bytes) -> tuple[JournalRecord, int] | None:
    """The intact record at ``pos`` and the offset after it, or ``None``. ``file_id``: the
    file's id packed as ``hcrc`` covers it."""
    end = len(data)
    if end - pos < HEADER_SIZE:
        return None
    length, hcrc, type_, ledger, entry, lac, crc = RECORD_HEADER.unpack_from(data, pos)
    p = pos + HEADER_SIZE
    if type_ not in _KINDS or end - p < length:
        return None
    fields = data[pos + 8 : p]
    if crc32c.crc32c(file_id + fields) != hcrc and crc32c.crc32c(fields) != hcrc:
        return None  # neither this file's record nor one of the format before file ids
    payload = data[p : p + length]
    if type_ == ADD_ENTRY and crc32c.crc32c(payload) != crc:
        return None
    return JournalRecord(RecordKind(type_), ledger, entry, lac, crc, payload), p + length


def _next_valid(data: bytes, after: int, file_id: bytes) -> int | None:
    """The offset of the first intact record starting after ``after``, or ``None``."""
    start = after + 1 + _TYPE_OFFSET
    room = len(data) - HEADER_SIZE
    length_at = _LENGTH.unpack_from
    find = data.find
    add_kind, fence_kind = _KIND_BYTES
    # The next occurrence of each kind byte; only the one just tried is searched again.
    add, fence = find(add_kind, start), find(fence_kind, start)
    while add >= 0 or fence >= 0:
        if fence < 0 or 0 <= add < fence:
            hit, add = add, find(add_kind, add + 1)
        else:
            hit, fence = fence, find(fence_kind, fence + 1)
        pos = hit - _TYPE_OFFSET
        # a length that fits first: much cheaper than the checksums, and the bytes of a
        # reused file's old records (mostly payloads) seldom hold one
        if length_at(data, pos)[0] <= room - pos and _record_at(data, pos, file_id) is not None:
            return pos
    return None


def replay(
    directory: Path,
    start: JournalPosition,
    *,
    skip_invalid: bool = False,
    stats: ReplayStats | None = None,
) -> Iterator[JournalRecord]:
    """Every intact record at or after ``start``, in order (see the module docstring for
    how the end of a file is told from corruption).

    Raises :class:`~magnetar.bookie.errors.JournalCorrupt` at a damaged record followed by
    valid ones, unless ``skip_invalid``. ``stats`` (if given) is filled in as it goes."""
    stats = stats if stats is not None else ReplayStats()
    for file_id in journal_file_ids(directory):
        if file_id < start.file_id:
            continue
        path = _path(directory, file_id)
        data = path.read_bytes()
        packed_id = _FILE_ID.pack(file_id)
        pos = start.offset if file_id == start.file_id else 0
        while pos < len(data):
            found = _record_at(data, pos, packed_id)
            if found is not None:
                record, pos = found
                stats.records += 1
                yield record
                continue
            resume = _next_valid(data, pos, packed_id)
            if resume is None:
                break  # zeros or a torn tail: the end of what was written
            where = f"journal file {path} has a damaged record at offset {pos}"
            if not skip_invalid:
                raise JournalCorrupt(
                    f"{where}, followed by valid records (the next at offset {resume}): "
                    "the file changed on disk after it was synced. Restore the data "
                    "directory, or start with --journal-skip-invalid-records to skip the "
                    f"damaged {resume - pos} bytes (their entries are lost on this bookie)"
                )
            log.error(
                "%s, followed by valid records: skipping %d damaged bytes to offset %d "
                "(--journal-skip-invalid-records); their entries are lost on this bookie",
                where,
                resume - pos,
                resume,
            )
            stats.corrupt_spans += 1
            stats.corrupt_bytes += resume - pos
            pos = resume


_LOADED_RECORDS: Final = 128
"""Records pending when a sync comes back that mark the journal as loaded (paced by
``group_wait_ms``)."""


class Journal:
    """Append records, learn when they are durable.

    Ownership: :meth:`append` copies nothing after returning — the caller must not mutate
    ``payload`` afterwards (``bytes`` are immutable, so the usual case is safe). Callbacks
    registered with :meth:`on_durable` run on the event loop, in registration order, once
    every record appended before the registration is fdatasync'ed.

    If a write or sync fails, the records not yet synced are dropped: their callbacks'
    ``on_failure`` run instead (with the error), :attr:`failed` is set until a later write
    succeeds, ``on_write_failure`` is called, and appends go to a new file. A bookie must
    stop acknowledging (it turns read-only) until its storage works again.
    """

    def __init__(
        self,
        directory: Path,
        *,
        clock: Clock,
        file_size_max_bytes: int = 256 * 1024 * 1024,
        group_bytes_max: int = 4 * 1024 * 1024,
        group_wait_ms: float = 0.0,
        pending_bytes_max: int = 64 * 1024 * 1024,
        prealloc_bytes: int = 4 * 1024 * 1024,
        start_file_id: int | None = None,
        reuse_files: bool = False,
        on_write_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._dir = directory
        self._dir.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._writer = WriterProcess(directory, file_size_max_bytes, prealloc_bytes)
        self._file_size_max_bytes = file_size_max_bytes
        self._group_bytes_max = group_bytes_max
        self._group_wait_s = group_wait_ms / 1000.0
        self._pending_bytes_max = pending_bytes_max
        existing = journal_file_ids(directory)
        # Never append to an existing file: its tail may be torn.
        self._file_id = (
            start_file_id if start_file_id is not None else (existing[-1] + 1 if existing else 1)
        )
        self._file_offset = 0
        self._reuse_files = reuse_files
        self._first_file_id = self._file_id
        """Files from this one on are this journal's own, the ones it may make spare."""
        # Segments waiting for the flusher: [file_id, [buffers], bytes].
        self._segments: list[Segment] = [(self._file_id, 0, [])]
        self._pending_bytes = 0
        self._pending_records = 0
        self._callbacks: list[_Callback] = []
        self._on_write_failure = on_write_failure
        self._wakeup = asyncio.Event()
        self._woken = False
        """Mirrors ``_wakeup.is_set()`` as a plain attribute (read on every append)."""
        self._task: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None
        self.syncs = 0
        self.groups_taken = 0
        """Incremented each time the flusher takes the pending records and callbacks: a
        callback registered while this value is unchanged covers every record appended
        meanwhile (they go to the same sync)."""
        self.sync_seconds_total = 0.0
        """Time spent writing and fdatasync'ing batches (for the sync latency metric)."""
        self._closing = False
        self._last_sync_s = float("-inf")
        self._loaded = False

    # -- appending (event loop) ----------------------------------------------------------

    @property
    def position(self) -> JournalPosition:
        """The end of everything appended so far."""
        return JournalPosition(self._file_id, self._file_offset)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def over_limit(self) -> bool:
        return self._pending_bytes >= self._pending_bytes_max

    @property
    def writer_pid(self) -> int | None:
        """The writer process's id while it runs (started by the first write)."""
        return self._writer.pid

    def append(
        self, type_: int, ledger_id: int, entry_id: int, lac: int, checksum: int, payload: bytes
    ) -> None:
        """Append one record (a run of one, see :meth:`append_many`)."""
        self.append_many(type_, ledger_id, entry_id, lac, (checksum,), (payload,))

    def append_many(
        self,
        type_: int,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> None:
        """Append one record per payload, for entries ``first_entry_id``, ``+1``, ... of
        ``ledger_id`` (``checksums[i]`` belongs to ``payloads[i]``), in that order. A record
        never straddles two files: the run moves to a new file where the next record would
        pass ``file_size_max_bytes``."""
        file_max = self._file_size_max_bytes
        offset = self._file_offset
        bufs = self._segments[-1][2]
        count = len(payloads)
        run = count > 1 and len(checksums) == count
        sizes = list(map(len, payloads)) if run else []
        added = sum(sizes) + HEADER_SIZE * count
        if run and min(sizes) > 0 and offset + added <= file_max:
            # the usual run (tens of unbatched adds) at once, when it stays in this file
            bufs.extend(
                run_buffers(
                    self._file_id,
                    type_,
                    ledger_id,
                    first_entry_id,
                    lac,
                    checksums,
                    payloads,
                    max(sizes),
                    added,
                )
            )
            offset += added
        else:
            added = 0
            entry_id = first_entry_id
            for checksum, payload in zip(checksums, payloads, strict=True):
                n = len(payload)
                size = HEADER_SIZE + n
                if offset and offset + size > file_max:
                    self._file_id += 1
                    offset = 0
                    bufs = []
                    self._segments.append((self._file_id, 0, bufs))
                # encode_record, inline (it runs per entry)
                part = _CRC_PART.pack(self._file_id, type_, ledger_id, entry_id, lac, checksum)
                bufs.append(
                    RECORD_HEADER.pack(
                        n, crc32c.crc32c(part), type_, ledger_id, entry_id, lac, checksum
                    )
                )
                if n:
                    bufs.append(payload)
                offset += size
                added += size
                entry_id += 1
        self._file_offset = offset
        self._pending_bytes += added
        self._pending_records += count
        if not self._woken:
            self._wake()

    def append_records(
        self,
        type_: int,
        ledger_ids: Sequence[int],
        entry_ids: Sequence[int],
        lacs: Sequence[int],
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> None:
        """Append one record per payload, of any ledgers (``ledger_ids[i]``,
        ``entry_ids[i]``, ``lacs[i]`` and ``checksums[i]`` belong to ``payloads[i]``), in
        that order: the runs of many ledgers in one pass of C loops, when they stay in this
        file and no payload is empty; else record by record (:meth:`append_many` each)."""
        sizes = list(map(len, payloads))
        count = len(sizes)
        added = sum(sizes) + HEADER_SIZE * count
        offset = self._file_offset
        if (
            not count
            or len(checksums) != count
            or min(sizes) == 0
            or (offset + added > self._file_size_max_bytes)
        ):
            for ledger_id, entry_id, lac, checksum, payload in zip(
                ledger_ids, entry_ids, lacs, checksums, payloads, strict=True
            ):
                self.append_many(type_, ledger_id, entry_id, lac, (checksum,), (payload,))
            return
        self._segments[-1][2].extend(
            run_buffers(
                self._file_id,
                type_,
                ledger_ids,
                entry_ids,
                lacs,
                checksums,
                payloads,
                max(sizes),
                added,
            )
        )
        self._file_offset = offset + added
        self._pending_bytes += added
        self._pending_records += count
        if not self._woken:
            self._wake()

    def on_durable(
        self,
        callback: Callable[[], None],
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Run ``callback`` once everything appended so far is synced, or ``on_failure``
        (if given) with the error if the write covering it fails (then nothing appended
        before the registration is acknowledged). A callback that raises is logged; the
        others and later syncs go on."""
        self._callbacks.append((callback, on_failure))
        if not self._woken:
            self._wake()

    def _wake(self) -> None:
        self._woken = True
        self._wakeup.set()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._flusher(), name="journal")
        self._task.add_done_callback(_report_flusher_end)

    async def close(self) -> None:
        """Flush and sync what is pending, then stop."""
        self._closing = True
        self._wake()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._writer.stop()

    def remove_before(self, position: JournalPosition) -> int:
        """Delete (or make spares of) journal files wholly before ``position``
        (checkpointed). Returns how many. On the event loop prefer :meth:`detach_before` and
        :func:`release_files` in a thread."""
        detached = self.detach_before(position)
        release_files(detached)
        return len(detached.spares) + len(detached.removals)

    def detach_before(self, position: JournalPosition) -> DetachedFiles:
        """What to do with the journal files wholly before ``position`` (checkpointed), for
        the caller to do with :func:`release_files` off the event loop (unlinking a big,
        zero-filled file takes tens of milliseconds; a rename waits for the file system's
        journal): while reusing files, this journal's own become spares, up to
        :data:`SPARE_FILES_MAX` spares in all (the newest); the other files, and older
        spares, are deleted.

        The writer process may still be writing the tail of the last of them (a batch that
        spans a rollover, while the checkpoint that began after it has ended): its own
        descriptor keeps the unlinked or renamed file, or it creates the file again (from a
        spare, maybe) if it had not opened it yet. All are harmless: what such a file holds
        is checkpointed, replay starts after it, the next removal takes it, and records
        written for it do not validate in the file a spare becomes."""
        removals = []
        # (spare path, the journal file that becomes it, or None for an existing spare)
        spares: list[tuple[Path, Path | None]] = [(p, None) for p in spare_paths(self._dir)]
        for file_id in journal_file_ids(self._dir):
            if file_id >= position.file_id:
                break
            path = _path(self._dir, file_id)
            if self._reuse_files and file_id >= self._first_file_id:
                spares.append((path.with_name(path.name + SPARE_SUFFIX), path))
            else:
                removals.append(path)
        spares.sort()
        cut = max(0, len(spares) - (SPARE_FILES_MAX if self._reuse_files else 0))
        removals += [spare if source is None else source for spare, source in spares[:cut]]
        made = [(source, spare) for spare, source in spares[cut:] if source is not None]
        return DetachedFiles(made, removals)

    # -- the flusher ----------------------------------------------------------------------

    async def _flusher(self) -> None:
        """One sync in flight at a time. When a sync comes back, the next one is handed to
        the writer process before the finished one's callbacks run (pacing permitting), so
        the disk works while the loop answers: records that arrived during a sync wait for
        that sync and their own, not also for the callbacks in between."""
        loop = asyncio.get_running_loop()
        inflight: _Sync | None = None
        while True:
            if inflight is None:
                if not self._has_work():
                    if self._closing:
                        return
                    await self._wakeup.wait()
                    self._wakeup.clear()
                    self._woken = False
                    continue
                wait_s = self._pacing_wait_s()
                if wait_s > 0:
                    await self._clock.sleep(wait_s)
                inflight = self._submit(loop)
                continue
            future, callbacks, started_s = inflight
            try:
                await future
            except Exception as exc:
                inflight = None
                self._write_failed(exc, callbacks)
                continue
            if started_s is not None and self.failed is not None:
                log.warning("journal writes work again (file %d)", self._file_id)
                self.failed = None
            if started_s is not None:
                self.syncs += 1
                self.sync_seconds_total += self._clock.monotonic_s() - started_s
            self._loaded = self._pending_records >= _LOADED_RECORDS
            inflight = None
            if self._has_work() and self._pacing_wait_s() <= 0:
                inflight = self._submit(loop)
            for cb, _ in callbacks:
                try:
                    cb()
                except Exception:  # a caller's defect must not stop the journal's syncs
                    log.exception("journal: a callback after a sync raised; going on")

    def _write_failed(self, exc: BaseException, callbacks: list[_Callback]) -> None:
        """A batch failed: drop it and everything appended since (none of it was synced),
        fail their callbacks, and go on in a new file."""
        log.error(
            "journal write to file %d failed: %s; %d pending bytes dropped (not acknowledged)",
            self._file_id,
            exc,
            self._pending_bytes,
        )
        self.failed = exc
        failed = callbacks + self._callbacks
        self._callbacks = []
        self._file_id += 1
        self._file_offset = 0
        self._segments = [(self._file_id, 0, [])]
        self._pending_bytes = 0
        self._pending_records = 0
        for _, on_failure in failed:
            if on_failure is not None:
                try:
                    on_failure(exc)
                except Exception:
                    log.exception("journal: a failure callback raised; going on")
        if self._on_write_failure is not None:
            self._on_write_failure(exc)

    def _has_work(self) -> bool:
        return bool(self._segments[-1][2] or len(self._segments) > 1 or self._callbacks)

    def _pacing_wait_s(self) -> float:
        """How long to wait before the next sync: at most one per ``group_wait_s`` while
        loaded (a busy journal gathers more records per sync instead of spending a hand-off
        to the writer, an fdatasync and a round of completions on every few entries), none
        otherwise (see the module docstring)."""
        if (
            not self._loaded
            or self._group_wait_s <= 0
            or self._pending_bytes >= self._group_bytes_max
        ):
            return 0.0
        return self._last_sync_s + self._group_wait_s - self._clock.monotonic_s()

    def _submit(self, loop: asyncio.AbstractEventLoop) -> _Sync:
        """Take the pending records and callbacks and start their write + sync."""
        segments, callbacks = self._take_batch()
        if not segments:  # callbacks only: due once the sync before them is done (it is)
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done, callbacks, None
        started_s = self._last_sync_s = self._clock.monotonic_s()
        try:
            sync = self._writer.run(loop, segments)
        except Exception as exc:  # a record that cannot be encoded: the batch fails as a
            sync = loop.create_future()  # failed write does (see _write_failed)
            sync.set_exception(exc)
        return sync, callbacks, started_s

    def _take_batch(self) -> tuple[list[Segment], list[_Callback]]:
        """Take every pending record and every callback (all registered before the take).
        Memory is bounded by callers honouring :attr:`over_limit`."""
        self.groups_taken += 1
        segments = [seg for seg in self._segments if seg[2]]
        self._segments = [(self._file_id, self._file_offset, [])]
        self._pending_bytes = 0
        self._pending_records = 0
        callbacks, self._callbacks = self._callbacks, []
        return segments, callbacks


_Sync = tuple[asyncio.Future[None], list[_Callback], float | None]
"""A sync handed to the writer: its future, the callbacks due after it, its start time."""


def _report_flusher_end(task: asyncio.Task[None]) -> None:
    """Log at once a flusher that ended on an error (nothing would be synced after it),
    instead of when the task is collected."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("journal: the flusher stopped: %r; nothing more is synced", exc, exc_info=exc)


@dataclass(frozen=True, slots=True)
class DetachedFiles:
    """Checkpointed journal files: to rename as spares, and to delete
    (:meth:`Journal.detach_before`)."""

    spares: list[tuple[Path, Path]]
    """``(journal file, spare path)``: renamed."""
    removals: list[Path]
    """Journal files and spares: deleted."""


def release_files(detached: DetachedFiles) -> None:
    """Worker thread: rename the spares, then delete the rest gradually (see
    :func:`~magnetar.bookie.file_io.remove_gradually`). A file already gone is skipped."""
    for path, spare in detached.spares:
        with contextlib.suppress(FileNotFoundError):
            file_io.replace(path, spare)
    for path in detached.removals:
        file_io.remove_gradually(path)
