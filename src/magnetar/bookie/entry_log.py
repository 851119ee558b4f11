"""Entry logs: append-only files holding the entries of many ledgers interleaved.

File ``entrylogs/<log_id:010d>.log``; each record::

    +-------------+-----------+----------+--------+----------+---------+
    | len u32     | ledger u64| entry i64| lac i64| crc u32  | payload |
    +-------------+-----------+----------+--------+----------+---------+

An entry's *location* is one int, ``log_id << 40 | offset`` of its record. New records go to
an in-memory write buffer of the active log (this is the bookie's write cache); a checkpoint
:meth:`EntryLogger.freeze`\\ s the buffers, writes and fsyncs them in a worker thread
(:meth:`EntryLogger.write_frozen`), then :meth:`EntryLogger.release` drops them. Reads look in
the buffers first, then the files. A restarted bookie never appends to an old log (its tail
may hold records the index never learned about); those bytes are reclaimed by compaction.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice, repeat
from pathlib import Path
from typing import Final

from magnetar.bookie import file_io
from magnetar.bookie.direct_write import DirectLog, open_direct
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.speedups import CRECORDS

log = logging.getLogger(__name__)

ENTRY_HEADER: Final = struct.Struct("<IQqqI")
HEADER_SIZE: Final = ENTRY_HEADER.size
pack_header: Final = ENTRY_HEADER.pack_into
_header: Final = ENTRY_HEADER.pack
OFFSET_BITS: Final = 40


def py_encode_records(
    ledger_ids: int | Sequence[int],
    entry_ids: int | Sequence[int],
    lacs: int | Sequence[int],
    checksums: Sequence[int],
    payloads: Sequence[bytes],
) -> bytes:
    """The records of ``payloads[i]``, back to back, in C loops. ``ledger_ids`` and
    ``lacs``: an int for every record, or one each; ``entry_ids``: the first of consecutive
    ids, or one each. The compiled ``entry_log_records``
    (:data:`~magnetar.protocol.speedups.CRECORDS`) returns the same bytes."""
    n = len(payloads)
    headers = map(
        _header,
        map(len, payloads),
        repeat(ledger_ids, n) if isinstance(ledger_ids, int) else ledger_ids,
        range(entry_ids, entry_ids + n) if isinstance(entry_ids, int) else entry_ids,
        repeat(lacs, n) if isinstance(lacs, int) else lacs,
        checksums,
    )
    return b"".join(chain.from_iterable(zip(headers, payloads, strict=True)))


encode_records: Final = py_encode_records if CRECORDS is None else CRECORDS.entry_log_records
"""The entry log's record encoder in use (C where built)."""
OFFSET_MASK: Final = (1 << OFFSET_BITS) - 1
_SUFFIX: Final = ".log"
SYNC_CHUNK_BYTES: Final = 512 * 1024
"""A checkpoint writes the buffers and syncs every this many bytes: the journal, on the same
disk, then waits behind at most this much entry-log data, not a whole checkpoint's."""
SYNC_CHUNK_BYTES_BEHIND: Final = 2 * 1024 * 1024
"""...and every this many while the checkpoints are behind (:attr:`EntryLogger.behind`):
each sync of a growing file also commits its size and blocks, a cost of its own. At 512 KiB
the checkpoints of batched publishing spent twice as long syncing as writing and the adds
waited for write-cache room half the time; 2 MiB always made 1 KiB publishes at 37.5 k
msg/s wait longer behind them (p99 2.5 → 3.6 ms; docs/perf-log.md, fourteenth pass)."""
SYNC_CHUNK_RECORDS_MIN: Final = 32
"""...and every this many records at least: 100 KB entries synced five at a time made
batched publishing 10-20 % slower (each sync has a cost of its own), while small entries
still go 512 KiB at a time."""


def location_of(log_id: int, offset: int) -> int:
    return (log_id << OFFSET_BITS) | offset


def log_of(location: int) -> int:
    return location >> OFFSET_BITS


@frozen_struct(kw_only=False)
class StoredEntry:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    checksum: int
    payload: bytes


INLINE_MAX_BYTES: Final = 4096
"""Payloads up to this size are copied into a write buffer's bytes; bigger ones are kept by
reference (never copied)."""
_SEGMENT_BYTES: Final = 256 * 1024
"""A write buffer's bytes are segments of this size (plus room for one record): one growing
``bytearray`` was copied whole on the event loop each time ``realloc`` moved it (megabytes,
every 12 % of growth)."""
_SEGMENT_CAPACITY: Final = _SEGMENT_BYTES + HEADER_SIZE + INLINE_MAX_BYTES
"""A segment's allocation: records start below :data:`_SEGMENT_BYTES` and, copied ones, are
at most a header and :data:`INLINE_MAX_BYTES` long."""
SEGMENT_POOL_MAX: Final = 8
"""Segments of written buffers kept for reuse (2 MiB). Past the serving processes' mmap
threshold each new segment was mapped, faulted in page by page, grown by ``mremap`` and
unmapped: 10 % more broker CPU per unbatched 1 KiB message (6 passes each, 2026-11-25)."""
_SEGMENT_SHIFT: Final = 20
"""A position in a buffer's bytes is ``segment << _SEGMENT_SHIFT | offset in the segment``
(a segment stays under ``_SEGMENT_BYTES`` plus one record, far below 1 MiB)."""
_SEGMENT_MASK: Final = (1 << _SEGMENT_SHIFT) - 1


@dataclass(slots=True)
class _Buffer:
    """Records of one log waiting to be written, from ``base_offset`` on.

    ``segments`` hold the records as the log will, except that the payloads bigger than
    :data:`INLINE_MAX_BYTES` are kept by reference in ``big``. A small record then costs its
    bytes plus 16 in two arrays, and no Python object of its own: one ``bytes`` header and
    one index-dict item per record (~190 bytes in three small objects) left Python's
    small-object arenas fragmented long after 70 000 unbatched adds a second were written,
    and building the vectored write record by record held the GIL the event loop wanted. A
    checkpoint writes the segments in a few big pieces.

    A checkpoint writes a frozen buffer a sync chunk at a time and drops each big payload
    once it is synced (:meth:`release_through`): the first ``released`` records are then on
    disk, their big payloads read from the file, and a failed checkpoint's retry writes the
    rest. A buffer once frozen never takes adds again (``sealed``): the writing thread's views
    of its segments stay valid.

    Segments are allocated whole (:data:`_SEGMENT_CAPACITY`) and filled up to
    ``segment_ends``; those of a written buffer go back to the logger's pool."""

    log_id: int
    base_offset: int
    segments: list[bytearray] = field(default_factory=list)
    segment_ends: list[int] = field(default_factory=list)
    """How much of each segment holds records."""
    offsets: array[int] = field(default_factory=lambda: array("q"))
    """Offset (within the log) of each record, increasing."""
    heads: array[int] = field(default_factory=lambda: array("q"))
    """Position in ``segments`` of each record's header (see :data:`_SEGMENT_SHIFT`)."""
    big: dict[int, bytes | None] = field(default_factory=dict)
    """Record number -> its payload, for payloads bigger than :data:`INLINE_MAX_BYTES`
    (``None`` once released)."""
    big_records: array[int] = field(default_factory=lambda: array("q"))
    """The keys of ``big``, increasing."""
    size: int = 0
    """Bytes of all its records in the log."""
    frozen: bool = False
    sealed: bool = False
    """Frozen once: adds go to a new buffer (see the class docstring)."""
    released: int = 0
    """Records at the front written and synced to the log."""
    released_bytes: int = 0
    """Bytes of big payloads dropped after they were synced."""

    def find(self, offset: int) -> int | None:
        """The number of the record at ``offset`` in this buffer, if one starts there."""
        offsets = self.offsets
        i = bisect_left(offsets, offset)
        return i if i < len(offsets) and offsets[i] == offset else None

    def read(self, record: int) -> StoredEntry | None:
        """Record number ``record``; ``None`` if its payload was released (read the file)."""
        head = self.heads[record]
        segment = self.segments[head >> _SEGMENT_SHIFT]
        head &= _SEGMENT_MASK
        n, ledger, entry, lac, crc = ENTRY_HEADER.unpack_from(segment, head)
        payload: bytes | None
        if record in self.big:
            payload = self.big[record]
            if payload is None:
                return None
        else:
            start = head + HEADER_SIZE
            payload = bytes(segment[start : start + n])
        return StoredEntry(ledger, entry, lac, crc, payload)

    def sync_chunks(
        self, chunk_bytes: Callable[[], int], records_min: int = 1
    ) -> Iterator[tuple[int, int, list[memoryview | bytes]]]:
        """Worker thread, frozen buffer: the records not yet released in runs of about
        ``chunk_bytes()`` (asked before each run) and at least ``records_min`` records:
        ``(log offset, end record, pieces)``, the pieces to write back to back at that
        offset."""
        offsets = self.offsets
        heads = self.heads
        big = self.big
        big_records = self.big_records
        n = len(offsets)
        ends = self.segment_ends
        data_end = (len(ends) - 1) << _SEGMENT_SHIFT | ends[-1] if ends else 0
        first = self.released
        while first < n:
            start = offsets[first]
            end = min(max(bisect_left(offsets, start + chunk_bytes()), first + records_min), n)
            pieces: list[memoryview | bytes] = []
            pos = heads[first]
            lo = bisect_left(big_records, first)
            hi = bisect_left(big_records, end, lo)
            for record in big_records[lo:hi]:
                payload = big[record]
                assert payload is not None, "a released record is not written again"
                cut = heads[record] + HEADER_SIZE
                pieces += self._views(pos, cut)
                pieces.append(payload)
                pos = cut
            pieces += self._views(pos, heads[end] if end < n else data_end)
            yield start, end, pieces
            first = end

    def _views(self, start: int, stop: int) -> list[memoryview]:
        """Views of the bytes from position ``start`` to ``stop``, a piece per segment."""
        views = []
        segment_no, pos = start >> _SEGMENT_SHIFT, start & _SEGMENT_MASK
        last_no, last_pos = stop >> _SEGMENT_SHIFT, stop & _SEGMENT_MASK
        while segment_no <= last_no:
            segment = self.segments[segment_no]
            end = last_pos if segment_no == last_no else self.segment_ends[segment_no]
            if end > pos:
                views.append(memoryview(segment)[pos:end])
            segment_no += 1
            pos = 0
        return views

    def release_through(self, end: int) -> None:
        """Worker thread: records before ``end`` are synced to the log; drop their big
        payloads (the event loop then reads them from the file)."""
        big = self.big
        big_records = self.big_records
        freed = 0
        lo = bisect_left(big_records, self.released)
        for record in big_records[lo : bisect_left(big_records, end, lo)]:
            payload = big[record]
            if payload is not None:
                freed += HEADER_SIZE + len(payload)
                big[record] = None
        self.released_bytes += freed
        self.released = end


def log_ids(directory: Path) -> list[int]:
    ids = []
    for p in directory.glob(f"*{_SUFFIX}"):
        with contextlib.suppress(ValueError):
            ids.append(int(p.stem))
    return sorted(ids)


class EntryLogger:
    """Owns the entry log files of one data directory. Not thread-safe except where noted:
    :meth:`add`, :meth:`freeze`, :meth:`release` run on the event loop; :meth:`write_frozen`
    and :meth:`read_file` run in worker threads."""

    def __init__(
        self,
        directory: Path,
        *,
        log_size_max_bytes: int = 512 * 1024 * 1024,
        direct_writes: bool = True,
    ) -> None:
        self._dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._log_size_max_bytes = log_size_max_bytes
        existing = log_ids(directory)
        self.active_log_id = (existing[-1] + 1) if existing else 1
        self._active_size = 0
        self._buffers: list[_Buffer] = [_Buffer(self.active_log_id, 0)]
        self._readers = _ReadDescriptors(self.path)
        self._segment_pool: list[bytearray] = []
        self._direct = DirectLog() if direct_writes else None
        """Checkpoints write with ``O_DIRECT`` where the file system has it
        (:mod:`magnetar.bookie.direct_write`)."""
        self.on_released: Callable[[], None] | None = None
        """Called from the writing thread after each sync chunk of a checkpoint (the owner's
        hook to let adds waiting for room go on before the checkpoint ends)."""
        self.adds_waited = False
        """Set by the owner once adds waited for write-cache room, cleared with
        :attr:`behind` when a checkpoint catches up: the checkpoint writing writes its pieces
        with ``O_DIRECT`` meanwhile (read by the writing thread)."""
        self.behind = False
        """Set by the owner while its checkpoints are behind (see
        :mod:`magnetar.bookie.checkpoint`): the checkpoint writing syncs
        :data:`SYNC_CHUNK_BYTES_BEHIND` at a time from its next chunk on (read by the writing
        thread)."""

    def path(self, log_id: int) -> Path:
        return self._dir / f"{log_id:010d}{_SUFFIX}"

    def log_ids(self) -> list[int]:
        return log_ids(self._dir)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the records held in memory (released big payloads are only in the
        files)."""
        return sum(b.size - b.released_bytes for b in self._buffers)

    def add(self, ledger_id: int, entry_id: int, lac: int, checksum: int, payload: bytes) -> int:
        """Append an entry to the active log's buffer; returns its location."""
        return self.add_run(ledger_id, entry_id, lac, (checksum,), (payload,))[0]

    def add_run(
        self,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> list[int]:
        """Append entries ``first_entry_id``, ``+1``, ... (``checksums[i]`` belongs to
        ``payloads[i]``) to the active log's buffer, in order; returns their locations."""
        copied = self._add_copied_run(ledger_id, first_entry_id, lac, checksums, payloads)
        if copied is not None:
            return copied
        log_max = self._log_size_max_bytes
        locations: list[int] = []
        buf: _Buffer | None = None
        entry_id = first_entry_id
        for checksum, payload in zip(checksums, payloads, strict=True):
            n = len(payload)
            size = HEADER_SIZE + n
            active = self._active_size
            if active and active + size > log_max:
                self.roll()
                active = self._active_size
                buf = None
            if buf is None:
                buf = self._open_buffer()
            locations.append((self.active_log_id << OFFSET_BITS) | active)
            segments = buf.segments
            ends = buf.segment_ends
            self._make_room(buf)
            data = segments[-1]
            pos = ends[-1]
            buf.heads.append((len(segments) - 1) << _SEGMENT_SHIFT | pos)
            pack_header(data, pos, n, ledger_id, entry_id, lac, checksum)
            pos += HEADER_SIZE
            if n <= INLINE_MAX_BYTES:
                data[pos : pos + n] = payload
                pos += n
            else:
                record = len(buf.offsets)
                buf.big[record] = payload
                buf.big_records.append(record)
            ends[-1] = pos
            buf.offsets.append(active)
            buf.size += size
            self._active_size = active + size
            entry_id += 1
        return locations

    def _add_copied_run(
        self,
        ledger_id: int,
        first_entry_id: int,
        lac: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> list[int] | None:
        """:meth:`add_run` for the usual run, with C loops instead of a Python step per
        record (a run of unbatched adds is tens to hundreds of small entries): the same
        bytes, segments and bookkeeping as record by record, when every payload is copied
        (at most :data:`INLINE_MAX_BYTES`) and no record rolls the log. Otherwise ``None``,
        and nothing was added."""
        n = len(payloads)
        if n < 2 or len(checksums) != n:
            return None
        return self._add_copied(ledger_id, first_entry_id, lac, checksums, payloads)

    def add_records(
        self,
        ledger_ids: Sequence[int],
        entry_ids: Sequence[int],
        lacs: Sequence[int],
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> list[int] | None:
        """Append records of any ledgers (``ledger_ids[i]``, ``entry_ids[i]``, ``lacs[i]``
        and ``checksums[i]`` belong to ``payloads[i]``) to the active log's buffer, in
        order, in C loops (the runs of many ledgers at once); returns their locations. Only
        when every payload is copied (at most :data:`INLINE_MAX_BYTES`) and no record rolls
        the log; otherwise ``None``, and nothing was added (add them run by run with
        :meth:`add_run`)."""
        if len(payloads) != len(checksums):
            return None
        return self._add_copied(ledger_ids, entry_ids, lacs, checksums, payloads)

    def _add_copied(
        self,
        ledger_ids: int | Sequence[int],
        entry_ids: int | Sequence[int],
        lacs: int | Sequence[int],
        checksums: Sequence[int],
        payloads: Sequence[bytes],
    ) -> list[int] | None:
        """See :meth:`_add_copied_run` and :meth:`add_records` (``payloads`` not empty,
        ``checksums`` as long; columns as :func:`py_encode_records` takes them)."""
        n = len(payloads)
        sizes = list(map(len, payloads))
        if max(sizes) > INLINE_MAX_BYTES:
            return None
        record_sizes = list(map(int.__add__, sizes, repeat(HEADER_SIZE)))
        total = sum(record_sizes)
        active = self._active_size
        if active + total > self._log_size_max_bytes:
            return None
        records = encode_records(ledger_ids, entry_ids, lacs, checksums, payloads)
        buf = self._open_buffer()
        segments = buf.segments
        ends = buf.segment_ends
        self._make_room(buf)
        pos = ends[-1]
        if pos + total - record_sizes[-1] < _SEGMENT_BYTES:  # all start in this segment
            segments[-1][pos : pos + total] = records
            ends[-1] = pos + total
            head = (len(segments) - 1) << _SEGMENT_SHIFT | pos
            buf.heads.extend(islice(accumulate(record_sizes, initial=head), n))
        else:  # a segment at a time: records start in one below _SEGMENT_BYTES
            starts = list(accumulate(record_sizes, initial=0))  # starts[n]: total
            view = memoryview(records)
            first = 0
            while first < n:
                self._make_room(buf)
                pos = ends[-1]
                skew = pos - starts[first]  # a record's start in the run -> in the segment
                end = bisect_left(starts, _SEGMENT_BYTES - skew, first + 1, n)
                segments[-1][pos : starts[end] + skew] = view[starts[first] : starts[end]]
                ends[-1] = starts[end] + skew
                head = ((len(segments) - 1) << _SEGMENT_SHIFT) + skew
                buf.heads.extend(map(int.__add__, islice(starts, first, end), repeat(head)))
                first = end
        buf.offsets.extend(islice(accumulate(record_sizes, initial=active), n))
        buf.size += total
        self._active_size = active + total
        base = self.active_log_id << OFFSET_BITS | active
        return list(islice(accumulate(record_sizes, initial=base), n))

    def _make_room(self, buf: _Buffer) -> None:
        """Give ``buf`` a new last segment (from the pool if it holds one) unless its last
        segment can take another record (records start below :data:`_SEGMENT_BYTES`)."""
        ends = buf.segment_ends
        if not ends or ends[-1] >= _SEGMENT_BYTES:
            pool = self._segment_pool
            buf.segments.append(pool.pop() if pool else bytearray(_SEGMENT_CAPACITY))
            ends.append(0)

    def _open_buffer(self) -> _Buffer:
        """The buffer that takes the next add: the last one, if it is not frozen and belongs
        to the active log, else a new one at the active log's end.

        The log check matters: a checkpoint leaves an empty buffer of the active log at the
        end, and after a :meth:`roll` and the next checkpoint that stale buffer of the old
        log is the last one again. Adds put into it were located in the new log while their
        bytes went to the old log's file (recreated after compaction removed it): entries
        unreadable at their locations."""
        buf = self._buffers[-1] if self._buffers else None
        if buf is None or buf.sealed or buf.log_id != self.active_log_id:
            buf = _Buffer(self.active_log_id, self._active_size)
            self._buffers.append(buf)
        assert buf.base_offset + buf.size == self._active_size, "buffer not at the log's end"
        return buf

    def roll(self) -> None:
        """Start a new active log now (garbage collection wants to reclaim the current one)."""
        if self._active_size:
            self.active_log_id += 1
            self._active_size = 0
            # an empty buffer of the old log holds nothing to write: drop it
            self._buffers = [b for b in self._buffers if b.size or b.frozen]
            self._buffers.append(_Buffer(self.active_log_id, 0))

    def read_buffered(self, location: int) -> StoredEntry | None:
        """The entry if it is still in a write buffer, else ``None`` (read the file)."""
        log_id = location >> OFFSET_BITS
        offset = location & OFFSET_MASK
        for buf in self._buffers:
            if buf.log_id == log_id:
                i = buf.find(offset)
                if i is not None:
                    return buf.read(i)
        return None

    def freeze(self) -> list[_Buffer]:
        """Mark every buffer so far for writing; later adds go to a new buffer."""
        frozen = [b for b in self._buffers if not b.frozen and b.size]
        for b in frozen:
            b.frozen = b.sealed = True
        return frozen

    def write_frozen(self, frozen: list[_Buffer]) -> None:
        """Worker thread: append the frozen buffers to their files and fsync them."""
        by_log: dict[int, list[_Buffer]] = {}
        for b in frozen:
            by_log.setdefault(b.log_id, []).append(b)
        created = False
        for log_id, bufs in by_log.items():
            path = self.path(log_id)
            created = created or not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            direct_fd = open_direct(str(path)) if self._direct is not None else None
            try:
                for b in bufs:
                    # a sync per chunk: the journal, on the same disk, then waits behind at
                    # most a chunk of entry-log data, not a whole checkpoint's, and a big
                    # payload leaves memory as soon as it is on disk
                    chunks = b.sync_chunks(self._sync_chunk_bytes, SYNC_CHUNK_RECORDS_MIN)
                    for start, end, pieces in chunks:
                        # direct once adds waited for room (batched publishing: the page
                        # cache's copies bound it); through the page cache otherwise (at
                        # 37.5 k msg/s direct pieces raised the p99 of 100 B publishes 1.6 →
                        # 2.4 ms, and of 1 KiB ones, whose checkpoints are behind, 3.1 → 3.8)
                        direct = False
                        if direct_fd is not None and self.adds_waited:
                            direct = self._write_direct(log_id, direct_fd, fd, start, pieces)
                            if not direct:
                                os.close(direct_fd)
                                direct_fd = None
                        if not direct:
                            file_io.pwritev_all(fd, pieces, start)
                        os.fdatasync(fd)
                        b.release_through(end)
                        if self.on_released is not None:
                            self.on_released()
            finally:
                os.close(fd)
                if direct_fd is not None:
                    os.close(direct_fd)
        if created:  # a new file's directory entry; otherwise no directory sync (a commit)
            file_io.fsync_dir(self._dir)

    def _write_direct(
        self,
        log_id: int,
        direct_fd: int,
        fd: int,
        start: int,
        pieces: Sequence[memoryview | bytes],
    ) -> bool:
        """Write a piece with ``O_DIRECT``; False (and no more direct writes) if the file
        system refuses them (``EINVAL``): the caller writes it through the page cache."""
        assert self._direct is not None
        try:
            self._direct.write(log_id, direct_fd, fd, start, pieces)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            log.warning(
                "entry logs: direct writes refused (%s); writing through the page cache", exc
            )
            self._direct = None
            return False
        return True

    def _sync_chunk_bytes(self) -> int:
        return SYNC_CHUNK_BYTES_BEHIND if self.behind else SYNC_CHUNK_BYTES

    def unfreeze(self, frozen: list[_Buffer]) -> None:
        """A checkpoint failed to write ``frozen``: the next :meth:`freeze` takes them again
        (their records keep their offsets; writing them twice writes the same bytes)."""
        for b in frozen:
            b.frozen = False

    def release(self, frozen: list[_Buffer]) -> None:
        """Drop buffers now safely on disk (their segments go to the pool: the writing
        thread is done with them, and a released buffer is no longer read)."""
        ids = {id(b) for b in frozen}
        self._buffers = [b for b in self._buffers if id(b) not in ids]
        pool = self._segment_pool
        for b in frozen:
            room = SEGMENT_POOL_MAX - len(pool)
            if room > 0:
                pool.extend(b.segments[:room])
            b.segments = []
            b.segment_ends = []
        self._open_buffer()

    def read_file(self, location: int) -> StoredEntry:
        """Worker thread: read an entry from its file. Raises ``OSError``/``ValueError`` if
        the file or record is missing or damaged."""
        log_id = location >> OFFSET_BITS
        offset = location & OFFSET_MASK
        fd = self._readers.acquire(log_id)
        try:
            head = os.pread(fd, HEADER_SIZE, offset)
            if len(head) < HEADER_SIZE:
                raise ValueError(f"truncated entry header at {log_id}:{offset}")
            length = ENTRY_HEADER.unpack(head)[0]
            payload = os.pread(fd, length, offset + HEADER_SIZE)
        finally:
            self._readers.release(fd)
        if len(payload) < length:
            raise ValueError(f"truncated entry at {log_id}:{offset}")
        _, ledger, entry, lac, crc = ENTRY_HEADER.unpack(head)
        return StoredEntry(ledger, entry, lac, crc, payload)

    def remove(self, log_id: int) -> int:
        """Delete a whole log file (all its entries are dead); a worker thread's job (see
        :func:`~magnetar.bookie.file_io.remove_gradually`). Returns the bytes freed."""
        self._readers.forget(log_id)
        if self._direct is not None:
            self._direct.forget(log_id)
        return file_io.remove_gradually(self.path(log_id))

    def close(self) -> None:
        self._readers.close()


class _ReadDescriptors:
    """The entry logs' read-only descriptors, shared by the reading threads and counted: one
    is closed only once no read uses it. A read may hold a location taken before compaction
    moved the entry, and its log may be removed meanwhile; closed under the read, the
    descriptor's number could be reused by the next file opened, and the read would return
    that file's bytes at the same offset."""

    def __init__(self, path_of: Callable[[int], Path]) -> None:
        self._path_of = path_of
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        """log id → its descriptor."""
        self._users: dict[int, int] = {}
        """descriptor → reads using it."""
        self._forgotten: set[int] = set()
        """Descriptors of removed logs, closed when their last read ends."""

    def acquire(self, log_id: int) -> int:
        """The log's descriptor (opened if needed), held until :meth:`release`."""
        with self._lock:
            fd = self._fds.get(log_id)
            if fd is None:
                fd = self._fds[log_id] = os.open(self._path_of(log_id), os.O_RDONLY)
            self._users[fd] = self._users.get(fd, 0) + 1
            return fd

    def release(self, fd: int) -> None:
        with self._lock:
            users = self._users[fd] - 1
            if users:
                self._users[fd] = users
                return
            del self._users[fd]
            if fd in self._forgotten:
                self._forgotten.discard(fd)
                os.close(fd)

    def forget(self, log_id: int) -> None:
        """The log is removed: close its descriptor, or once its last read ends."""
        with self._lock:
            fd = self._fds.pop(log_id, None)
            if fd is not None:
                self._close_unused(fd)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                self._close_unused(fd)
            self._fds.clear()

    def _close_unused(self, fd: int) -> None:
        if fd in self._users:
            self._forgotten.add(fd)
        else:
            os.close(fd)
