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
import os
import struct
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, repeat
from pathlib import Path
from typing import Final, overload

from magnetar.bookie import file_io

ENTRY_HEADER: Final = struct.Struct("<IQqqI")
HEADER_SIZE: Final = ENTRY_HEADER.size
OFFSET_BITS: Final = 40
OFFSET_MASK: Final = (1 << OFFSET_BITS) - 1
_SUFFIX: Final = ".log"
SYNC_CHUNK_BYTES: Final = 512 * 1024
"""A checkpoint writes the buffers and syncs every this many bytes: the journal, on the same
disk, then waits behind at most this much entry-log data, not a whole checkpoint's."""


def location_of(log_id: int, offset: int) -> int:
    return (log_id << OFFSET_BITS) | offset


def log_of(location: int) -> int:
    return location >> OFFSET_BITS


@dataclass(frozen=True, slots=True)
class StoredEntry:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    checksum: int
    payload: bytes


@dataclass(slots=True)
class _Buffer:
    """Records of one log waiting to be written, from ``base_offset`` on.

    Per record it holds a reference to the payload (shared with the callers, never copied),
    its header packed into one ``bytearray`` and its offset in one ``array``: 48 bytes and
    no Python object of its own. One ``bytes`` header and one index-dict item per record cost
    ~190 bytes in three small objects each; 70 000 unbatched adds a second left Python's
    small-object arenas fragmented long after the buffers were written.

    A checkpoint writing a frozen buffer drops its payloads as soon as they are synced to
    the log, a sync chunk at a time (:meth:`release_synced`): the first ``released``
    records are then read from the file, and a failed checkpoint's retry writes the rest."""

    log_id: int
    base_offset: int
    headers: bytearray = field(default_factory=bytearray)
    """``HEADER_SIZE`` bytes per record, in order."""
    payloads: list[bytes | None] = field(default_factory=list)
    """``None`` for the ``released`` first records."""
    offsets: array[int] = field(default_factory=lambda: array("q"))
    """Offset (within the log) of each record, increasing."""
    size: int = 0
    """Bytes of all its records in the log (released ones too)."""
    frozen: bool = False
    released: int = 0
    """Records at the front written and synced to the log, their payloads dropped."""
    released_bytes: int = 0

    def find(self, offset: int) -> int | None:
        """The number of the record at ``offset`` in this buffer, if one starts there."""
        offsets = self.offsets
        i = bisect_left(offsets, offset)
        return i if i < len(offsets) and offsets[i] == offset else None

    def unwritten(self) -> tuple[int, _RecordParts]:
        """Where the records not yet released start in the log, and them as header,
        payload, header, payload … for a vectored write."""
        start = self.released
        offset = self.offsets[start] if start < len(self.offsets) else self.base_offset + self.size
        return offset, _RecordParts(self.headers, self.payloads, start)

    def release_synced(self, end_offset: int) -> None:
        """Worker thread: the log is synced up to ``end_offset``; drop the payloads of the
        records that end there or before (the event loop then reads them from the file)."""
        offsets = self.offsets
        n = len(offsets)
        # record i ends where record i + 1 starts (the last where the buffer ends)
        done = bisect_right(offsets, end_offset, 1) - 1 if n else 0
        if done == n - 1 and self.base_offset + self.size <= end_offset:
            done = n
        start = self.released
        if done <= start:
            return
        end = self.base_offset + self.size if done == n else offsets[done]
        self.payloads[start:done] = repeat(None, done - start)
        self.released_bytes += end - offsets[start]
        self.released = done


class _RecordParts(Sequence["bytes | bytearray"]):
    """A frozen buffer's records from ``start`` on as the sequence header, payload, header, …
    that :func:`~magnetar.bookie.file_io.pwritev_all` writes, built a slice at a time (a copy
    of each header while its ``pwritev`` runs, none kept for the whole buffer; copies, not
    views, so no export pins the ``bytearray`` of a buffer that a failed write hands back for
    adds)."""

    __slots__ = ("_headers", "_payloads", "_start")

    def __init__(self, headers: bytearray, payloads: list[bytes | None], start: int) -> None:
        self._headers = headers
        self._payloads = payloads
        self._start = start

    def __len__(self) -> int:
        return 2 * (len(self._payloads) - self._start)

    @overload
    def __getitem__(self, index: int) -> bytes | bytearray: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes | bytearray]: ...

    def __getitem__(self, index: int | slice) -> bytes | bytearray | list[bytes | bytearray]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1 or start % 2 or stop % 2:
                return [self[i] for i in range(start, stop, step)]
            first = self._start + start // 2
            end = self._start + max(stop, start) // 2
            heads = map(
                self._headers.__getitem__,
                map(
                    slice,
                    range(first * HEADER_SIZE, end * HEADER_SIZE, HEADER_SIZE),
                    range((first + 1) * HEADER_SIZE, (end + 1) * HEADER_SIZE, HEADER_SIZE),
                ),
            )
            payloads = self._payloads[first:end]
            return list(chain.from_iterable(zip(heads, payloads, strict=True)))  # type: ignore[arg-type]  # unreleased: no None
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        record, is_payload = divmod(index, 2)
        record += self._start
        if is_payload:
            payload = self._payloads[record]
            assert payload is not None, "a released record is not written again"
            return payload
        return self._headers[record * HEADER_SIZE : (record + 1) * HEADER_SIZE]


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

    def __init__(self, directory: Path, *, log_size_max_bytes: int = 512 * 1024 * 1024) -> None:
        self._dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._log_size_max_bytes = log_size_max_bytes
        existing = log_ids(directory)
        self.active_log_id = (existing[-1] + 1) if existing else 1
        self._active_size = 0
        self._buffers: list[_Buffer] = [_Buffer(self.active_log_id, 0)]
        self._read_fds: dict[int, int] = {}
        self._fd_lock = threading.Lock()
        self.on_released: Callable[[], None] | None = None
        """Called from the writing thread after a checkpoint dropped synced payloads (the
        owner's hook to let adds waiting for room go on before the checkpoint ends)."""

    def path(self, log_id: int) -> Path:
        return self._dir / f"{log_id:010d}{_SUFFIX}"

    def log_ids(self) -> list[int]:
        return log_ids(self._dir)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the records held in memory (released ones are only in the files)."""
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
            buf.offsets.append(active)
            buf.headers += ENTRY_HEADER.pack(n, ledger_id, entry_id, lac, checksum)
            buf.payloads.append(payload)
            buf.size += size
            self._active_size = active + size
            entry_id += 1
        return locations

    def _open_buffer(self) -> _Buffer:
        """The buffer that takes the next add: the last one, if it is not frozen and belongs
        to the active log, else a new one at the active log's end.

        The log check matters: a checkpoint leaves an empty buffer of the active log at the
        end, and after a :meth:`roll` and the next checkpoint that stale buffer of the old
        log is the last one again. Adds put into it were located in the new log while their
        bytes went to the old log's file (recreated after compaction removed it): entries
        unreadable at their locations."""
        buf = self._buffers[-1] if self._buffers else None
        if buf is None or buf.frozen or buf.log_id != self.active_log_id:
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
                    payload = buf.payloads[i]
                    if payload is None:  # released: synced to the file
                        return None
                    _, ledger, entry, lac, crc = ENTRY_HEADER.unpack_from(
                        buf.headers, i * HEADER_SIZE
                    )
                    return StoredEntry(ledger, entry, lac, crc, payload)
        return None

    def freeze(self) -> list[_Buffer]:
        """Mark every buffer so far for writing; later adds go to a new buffer."""
        frozen = [b for b in self._buffers if not b.frozen and b.size]
        for b in frozen:
            b.frozen = True
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
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                for b in bufs:
                    offset, parts = b.unwritten()
                    file_io.pwritev_all(
                        fd,
                        parts,
                        offset,
                        sync_every_bytes=SYNC_CHUNK_BYTES,
                        on_synced=partial(self._release_synced, b),
                    )
                os.fdatasync(fd)
                for b in bufs:
                    self._release_synced(b, b.base_offset + b.size)
            finally:
                os.close(fd)
        if created:  # a new file's directory entry; otherwise no directory sync (a commit)
            file_io.fsync_dir(self._dir)

    def _release_synced(self, buf: _Buffer, end_offset: int) -> None:
        buf.release_synced(end_offset)
        if self.on_released is not None:
            self.on_released()

    def unfreeze(self, frozen: list[_Buffer]) -> None:
        """A checkpoint failed to write ``frozen``: the next :meth:`freeze` takes them again
        (their records keep their offsets; writing them twice writes the same bytes)."""
        for b in frozen:
            b.frozen = False

    def release(self, frozen: list[_Buffer]) -> None:
        """Drop buffers now safely on disk."""
        ids = {id(b) for b in frozen}
        self._buffers = [b for b in self._buffers if id(b) not in ids]
        self._open_buffer()

    def read_file(self, location: int) -> StoredEntry:
        """Worker thread: read an entry from its file. Raises ``OSError``/``ValueError`` if
        the file or record is missing or damaged."""
        log_id = location >> OFFSET_BITS
        offset = location & OFFSET_MASK
        with self._fd_lock:
            fd = self._read_fds.get(log_id)
            if fd is None:
                fd = os.open(self.path(log_id), os.O_RDONLY)
                self._read_fds[log_id] = fd
        head = os.pread(fd, HEADER_SIZE, offset)
        if len(head) < HEADER_SIZE:
            raise ValueError(f"truncated entry header at {log_id}:{offset}")
        length = ENTRY_HEADER.unpack(head)[0]
        payload = os.pread(fd, length, offset + HEADER_SIZE)
        if len(payload) < length:
            raise ValueError(f"truncated entry at {log_id}:{offset}")
        _, ledger, entry, lac, crc = ENTRY_HEADER.unpack(head)
        return StoredEntry(ledger, entry, lac, crc, payload)

    def remove(self, log_id: int) -> int:
        """Delete a whole log file (all its entries are dead); a worker thread's job (see
        :func:`~magnetar.bookie.file_io.remove_gradually`). Returns the bytes freed."""
        with self._fd_lock:
            fd = self._read_fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)
        return file_io.remove_gradually(self.path(log_id))

    def close(self) -> None:
        with self._fd_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
