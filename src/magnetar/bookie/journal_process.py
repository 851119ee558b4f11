"""The event loop's end of the journal's writer process
(:mod:`magnetar.bookie.journal_writer`): batches of records down its stdin, answers back on
its stdout, settled in order (used by :class:`magnetar.bookie.journal.Journal`).

A batch bigger than :data:`_JOIN_MAX_BYTES` (batched publishing) is copied into a ring of
shared memory the process maps (a ``memfd``, :data:`RING_BYTES`) and only its segments'
headers go down the pipe: one copy on the event loop, without a system call per pipe's
worth. Writing the same bytes into the pipe cost the loop 0.5-1 s of CPU per GB against
about 0.2 s copied into the ring (docs/perf-log.md). A batch the ring has no room for
goes down the pipe as before; the room a batch takes is free again once it is answered.

A :class:`RecordRun` (the journal's runs of small records, with the compiled encoder) is
encoded where its batch goes: straight into the ring, or into bytes for the pipe. Encoding
it at append time made a fresh buffer of up to a few MB per run, whose pages the kernel
zeroed and faulted in each time (blocks of 128 KiB and more are mapped on their own,
:mod:`~magnetar.bookie.gc_tuning`): 0.45 ms per MB of records, against 0.06 ms into
memory already mapped."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno as errno_module
import fcntl
import logging
import mmap
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from magnetar.bookie.file_io import IOV_MAX
from magnetar.bookie.journal_writer import ANSWER, INLINE, REQUEST, SEGMENT
from magnetar.protocol.speedups import CRECORDS

log = logging.getLogger(__name__)


class RecordRun:
    """Journal records kept as the compiled encoder's columns (``journal_records`` of
    :data:`~magnetar.protocol.speedups.CRECORDS`, which must be loaded) until their batch is
    written; ``len()`` is their encoded size. The payloads are held, not copied, until then,
    as every record's buffers are (immutable bytes)."""

    __slots__ = ("_columns", "_size")

    def __init__(
        self,
        file_id: int,
        type_: int,
        ledger_ids: int | Sequence[int],
        entry_ids: int | Sequence[int],
        lacs: int | Sequence[int],
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        size: int,
    ) -> None:
        self._columns = (file_id, type_, ledger_ids, entry_ids, lacs, checksums, payloads)
        self._size = size

    def __len__(self) -> int:
        return self._size

    def encode(self) -> bytes:
        """The records, as one buffer."""
        assert CRECORDS is not None
        records: bytes = CRECORDS.journal_records(*self._columns)
        return records

    def encode_into(self, buffer: memoryview, at: int) -> int:
        """Write the records into ``buffer`` at ``at``; returns the offset after them."""
        assert CRECORDS is not None
        end: int = CRECORDS.journal_records_into(buffer, at, *self._columns)
        return end


Segment = tuple[int, int, list[bytes | RecordRun]]
"""Records for one journal file: ``(file id, offset, buffers)``."""

RING_BYTES: Final = 8 * 1024 * 1024
"""The shared ring's size: a few of batched publishing's batches (1-3 MiB each) in flight.
Its pages, once a big batch touched them, stay resident in the bookie and in the writer
(counted in both processes' resident memory)."""


class WriterProcess:
    """The journal's writer as a child process (:mod:`magnetar.bookie.journal_writer`):
    batches go down its stdin as one ``writev`` (queued with ``add_writer`` when the pipe is
    full), answers come back on its stdout, read with ``add_reader`` and settled in order.
    Started on first use; if it dies, what it had not answered fails with ``EIO`` and the
    next batch starts a new one."""

    def __init__(self, directory: Path, file_size_max_bytes: int, prealloc_bytes: int) -> None:
        self._argv = [
            sys.executable,
            "-I",
            "-S",
            str(Path(__file__).with_name("journal_writer.py")),
            str(directory),
            str(file_size_max_bytes),
            str(prealloc_bytes),
        ]
        self._proc: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._out: collections.deque[memoryview] = collections.deque()
        self._writing = False
        self._answers = bytearray()
        self._in_fd = -1
        self._out_fd = -1
        self._ring_map: mmap.mmap | None = None
        self._ring: memoryview | None = None
        self._ring_fd = -1
        """The ring's ``memfd``, passed to each process started (the map holds its own
        duplicate, which it does not expose)."""
        self._in_ring: collections.deque[bool] = collections.deque()
        """Per batch not yet answered (as :attr:`_waiting`): whether it is in the ring."""
        self._ring_spans: collections.deque[tuple[int, int]] = collections.deque()
        """The ring's spans in use, oldest first."""

    @property
    def pid(self) -> int | None:
        """The writer process's id while it runs."""
        return None if self._proc is None else self._proc.pid

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        argv = self._argv
        if self._ring is None:
            self._map_ring()
        if self._ring is not None:
            argv = [*argv, str(self._ring_fd), str(RING_BYTES)]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            pass_fds=() if self._ring is None else (self._ring_fd,),
        )
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        self._loop = loop
        self._in_fd = proc.stdin.fileno()
        self._out_fd = proc.stdout.fileno()
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._in_fd, _F_SETPIPE_SZ, _PIPE_BYTES)
        os.set_blocking(self._in_fd, False)
        os.set_blocking(self._out_fd, False)
        loop.add_reader(self._out_fd, self._read_answers)

    def run(self, loop: asyncio.AbstractEventLoop, segments: list[Segment]) -> asyncio.Future[None]:
        """A future that completes (or fails with the writer's error) once the segments are
        written and synced. Raises, with nothing handed over, if a :class:`RecordRun` cannot
        be encoded."""
        if self._proc is None:
            self._start(loop)
        fut: asyncio.Future[None] = loop.create_future()
        sizes = [sum(map(len, bufs)) for _, _, bufs in segments]
        total = sum(sizes)
        start = self._ring_take(total) if total > _JOIN_MAX_BYTES else None
        parts: list[bytes] = [REQUEST.pack(len(segments))]
        out: list[memoryview]
        if start is not None:  # the records into the ring, the headers down the pipe
            ring = self._ring
            assert ring is not None
            at = start
            for (file_id, offset, bufs), size in zip(segments, sizes, strict=True):
                parts.append(SEGMENT.pack(file_id, offset, size, at))
                for buf in bufs:
                    if isinstance(buf, RecordRun):
                        at = buf.encode_into(ring, at)
                    else:
                        end = at + len(buf)
                        ring[at:end] = buf
                        at = end
            out = [memoryview(b"".join(parts))]
        else:
            for (file_id, offset, bufs), size in zip(segments, sizes, strict=True):
                parts.append(SEGMENT.pack(file_id, offset, size, INLINE))
                parts.extend(buf.encode() if isinstance(buf, RecordRun) else buf for buf in bufs)
            if total <= _JOIN_MAX_BYTES:  # one buffer: one iovec, no Python step per record
                out = [memoryview(b"".join(parts))]
            else:  # big payloads go as they are, not copied
                out = [memoryview(part) for part in parts]
        # Recorded only now: a run that cannot be encoded raises above and leaves the
        # writer's books (answers expected, ring spans) as they were.
        self._waiting.append(fut)
        self._in_ring.append(start is not None)
        if start is not None:
            self._ring_spans.append((start, start + total))
        self._out.extend(out)
        if not self._writing:
            self._write_out()
        return fut

    def _map_ring(self) -> None:
        """Make the shared ring; without one (no ``memfd_create``, or it failed) every batch
        goes down the pipe."""
        fd = -1
        try:
            fd = os.memfd_create("magnetar-journal-ring")
            os.ftruncate(fd, RING_BYTES)
            self._ring_map = mmap.mmap(fd, RING_BYTES)
        except (AttributeError, OSError) as exc:
            if fd >= 0:
                os.close(fd)
            log.info("journal writer: no shared ring (%s); batches go down the pipe", exc)
            return
        self._ring = memoryview(self._ring_map)
        self._ring_fd = fd

    def _ring_take(self, size: int) -> int | None:
        """Where ``size`` bytes fit in the ring after the newest span in use, or None."""
        if self._ring is None:
            return None
        spans = self._ring_spans
        if not spans:
            return 0 if size <= RING_BYTES else None
        oldest, head = spans[0][0], spans[-1][1]
        if head > oldest:  # in use: [oldest, head)
            if RING_BYTES - head >= size:
                return head
            return 0 if size < oldest else None
        # wrapped, in use: [oldest, end) and [0, head); the head never reaches the oldest
        return head if size < oldest - head else None

    def _write_out(self) -> None:
        out = self._out
        while out:
            chunk = [out[i] for i in range(min(len(out), IOV_MAX))]
            try:
                written = os.writev(self._in_fd, chunk)
            except BlockingIOError:
                break
            except OSError as exc:  # the process is gone: its answers' EOF settles it
                log.error("journal writer process: %s", exc)
                out.clear()
                break
            for buf in chunk:
                n = len(buf)
                if written >= n:
                    out.popleft()
                    written -= n
                else:
                    out[0] = buf[written:]
                    break
        assert self._loop is not None
        if out and not self._writing:
            self._writing = True
            self._loop.add_writer(self._in_fd, self._write_out)
        elif not out and self._writing:
            self._writing = False
            self._loop.remove_writer(self._in_fd)

    def _read_answers(self) -> None:
        try:
            data = os.read(self._out_fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self._died()
            return
        buf = self._answers
        buf += data
        pos = 0
        while len(buf) - pos >= ANSWER.size:
            errno, n = ANSWER.unpack_from(buf, pos)
            if len(buf) - pos - ANSWER.size < n:
                break
            message = bytes(buf[pos + ANSWER.size : pos + ANSWER.size + n]).decode()
            pos += ANSWER.size + n
            fut = self._waiting.popleft()
            if self._in_ring.popleft():
                self._ring_spans.popleft()
            if fut.done():
                continue
            if errno == 0:
                fut.set_result(None)
            else:
                fut.set_exception(OSError(errno, message) if errno > 0 else OSError(message))
        del buf[:pos]

    def _died(self) -> None:
        code = self._detach()
        self._out.clear()
        self._answers.clear()
        self._in_ring.clear()
        self._ring_spans.clear()
        error = OSError(errno_module.EIO, f"journal writer process exited with code {code}")
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(error)

    def stop(self) -> None:
        """Close its input (the process then ends) and reap it; nothing should be queued:
        the journal's close waited for every sync."""
        if self._proc is None:
            return
        if self._out:
            log.warning("journal writer stopped with %d buffers unwritten", len(self._out))
        self._detach(wait_s=10.0)
        self._in_ring.clear()
        self._ring_spans.clear()
        if self._ring is not None and self._ring_map is not None:
            self._ring.release()
            self._ring_map.close()
            os.close(self._ring_fd)
            self._ring, self._ring_map, self._ring_fd = None, None, -1

    def _detach(self, wait_s: float | None = None) -> int:
        """Stop watching the process's pipes, close them and reap it (killed if it has not
        ended within ``wait_s``); returns its exit code."""
        proc = self._proc
        assert proc is not None and self._loop is not None
        self._loop.remove_reader(self._out_fd)
        if self._writing:
            self._loop.remove_writer(self._in_fd)
            self._writing = False
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        self._proc = None
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


_JOIN_MAX_BYTES: Final = 256 * 1024
"""A batch up to this size goes down the pipe as one joined buffer (copying a few KiB costs
less than a Python step per record in the write loop); a bigger one as its records' own
buffers."""
_F_SETPIPE_SZ: Final = 1031
_PIPE_BYTES: Final = 1024 * 1024
