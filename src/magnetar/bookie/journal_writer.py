"""The journal's writer process: writes batches of journal records and fdatasyncs them.

A :class:`~magnetar.bookie.journal.Journal` starts one as a child process
(``python -I -S journal_writer.py <journal dir> <file size max> <prealloc bytes>``: the
standard library only, no imports of ours, so it starts in a few milliseconds). It runs
outside the bookie's interpreter, so a finished sync never waits for the event loop's GIL:
the answer is a few bytes on a pipe the loop's selector sees.

Protocol (little-endian), over the child's stdin and stdout:

* request: ``u32`` segment count, then per segment ``u64`` file id, ``u64`` offset,
  ``u64`` length and ``i64`` ring offset, to be written at that offset of
  ``<file id:020d>.jnl``: ``length`` bytes of records that follow in the pipe (ring offset
  -1, :data:`INLINE`), or that are at that offset of the shared ring;
* answer, once every segment of the request is written and its file fdatasync'ed:
  ``i32`` errno (0: done; -1: an error without one), ``u32`` message length, the message
  (UTF-8). Requests are answered in order, one at a time.

The shared ring is a file descriptor (a ``memfd``) the bookie passes and names, with its
size, after the three arguments (``journal_process.py`` says which batches go there); the
bookie reuses a segment's part of it once the segment's request is answered. Records go
from the pipe to the file with ``splice`` (no copy through this process), from the ring
with ``pwrite``. End of
input (the bookie closed the pipe, or died) ends the process; a request cut short by it is
written no further (what was written of it is a torn tail, never acknowledged). After a
failed segment the rest of its request is read and not written. SIGINT and SIGTERM are
ignored: the process ends with its bookie.

Files are zero-filled ahead of the records, so the file's size and block map do not change
at each sync: an fdatasync then flushes data only, instead of also writing the inode (and,
on a journaling file system, waiting for a metadata commit). While requests are smaller
than a piece (256 KiB), the fill is done between them: once less than half of ``prealloc
bytes`` is filled past the last record, pieces are written, each synced on its own, until
``prealloc bytes`` are, stopping whenever a request waits in the pipe. A request whose records
outrun the fill fills inside itself only if it is smaller than a piece, and then one piece
past its records at most (never under them: they are written there in the same sync).
Zeros filled inside a request go to disk in that request's sync: with ``prealloc bytes``
at a time, one sync in about a thousand took 8-13 ms instead of 0.4 ms on the test
machine, and every publish waiting behind it waited as long; a small request after big
ones paid 4 MiB of zeros. A request of a piece or more (batched publishing) grows the file
with its records and fills nothing: zeros ahead of it doubled the bytes each of its syncs
wrote, and the next big request follows at once.
Opening a file closes those of earlier files (synced first: a failed file's sync error must
not fail the next file's writes) and syncs the directory. A file that does not exist yet is
made from the newest spare (``*.jnl.spare``: a checkpointed file the journal kept for reuse)
if there is one: renamed to the file's name, its old records are written over in place
(they do not validate in a file of another id). Its blocks are allocated and its size is
final, so every sync writes data only, big requests' too. Its old records count as unfilled
all the same: small requests get zeros ahead of them as at a new file's end, so they write
into pages just written, in the page cache. Written straight over the old records, a small
request's last, partial page had to be read from the disk first once the spare's pages had
left the cache (p99.9 of a small synced write 0.3 → 0.9 ms).
"""

from __future__ import annotations

# Only modules that load no others: each one this process imports is resident memory it
# holds for the life of the bookie (``signal``, ``contextlib`` and ``typing`` cost it ~1.5 MB:
# ``_signal`` is the C module ``signal`` re-exports, without its enum classes).
import os
import select
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from typing import Final
else:
    import _signal

REQUEST: Final = struct.Struct("<I")
SEGMENT: Final = struct.Struct("<QQQq")
INLINE: Final = -1
"""A segment's ring offset when its records follow in the pipe."""
ANSWER: Final = struct.Struct("<iI")
PIECE_BYTES: Final = 256 * 1024
"""Reads past a failed segment's bytes, and zero-fills, go in pieces of this size at most:
this process holds little more than one piece (its memory counts as the bookie's)."""
_ZEROS: list[bytes] = []
"""A piece of zeros, made by the first fill (the bookie imports this module for its names;
only the writer process fills)."""


JOURNAL_SUFFIX: Final = ".jnl"
SPARE_SUFFIX: Final = ".spare"


def journal_path(directory: str, file_id: int) -> str:
    """Where journal file ``file_id`` is (the one naming of journal files, the journal's
    too)."""
    return os.path.join(directory, f"{file_id:020d}{JOURNAL_SUFFIX}")


def zero_fill(fd: int, start: int, end: int) -> int:
    """Write zeros over ``[start, end)``; returns ``end``. Replay reads zeros as a torn tail
    (their header checksum fails), which is what the unwritten part of a file is."""
    if not _ZEROS:
        _ZEROS.append(bytes(PIECE_BYTES))
    zeros = memoryview(_ZEROS[0])
    pos = start
    while pos < end:
        pos += os.pwrite(fd, zeros[: min(PIECE_BYTES, end - pos)], pos)
    return end


class Writer:
    """The files of one journal directory, as this process writes them."""

    def __init__(self, directory: str, file_size_max: int, prealloc: int) -> None:
        self.directory = directory
        self.file_size_max = file_size_max
        self.prealloc = prealloc
        self.fds: dict[int, int] = {}
        self.allocated: dict[int, int] = {}
        """Per open file: the end of its zero-filled (or written) part."""
        self.written: dict[int, int] = {}
        """Per open file: the end of its last record."""

    def fd(self, file_id: int) -> int:
        fd = self.fds.get(file_id)
        if fd is None:
            for old in [f for f in self.fds if f < file_id]:
                try:  # noqa: SIM105 (no contextlib here: see the imports)
                    os.fdatasync(self.fds[old])
                except OSError:
                    pass
                os.close(self.fds.pop(old))
                self.allocated.pop(old, None)
                self.written.pop(old, None)
            path = journal_path(self.directory, file_id)
            if not os.path.exists(path):
                self.take_spare(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            self.fds[file_id] = fd
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return fd

    def take_spare(self, path: str) -> None:
        """Rename the newest spare file, if there is one, to ``path``."""
        suffix = JOURNAL_SUFFIX + SPARE_SUFFIX
        spares = sorted(n for n in os.listdir(self.directory) if n.endswith(suffix))
        if spares:
            try:  # noqa: SIM105 (no contextlib here: see the imports)
                os.rename(os.path.join(self.directory, spares[-1]), path)
            except FileNotFoundError:  # deleted meanwhile: the file starts empty
                pass

    def write(
        self, inp: int, file_id: int, offset: int, length: int, shared: memoryview | None = None
    ) -> OSError | None:
        """Move ``length`` bytes from the pipe ``inp`` (``splice``: no copy through this
        process), or from ``shared`` (the ring's bytes of the segment), to ``offset`` of the
        file and fdatasync it; the error if that failed (bytes from ``inp`` are taken from
        it either way). Raises :class:`EOFError` if the input ended first (nothing more will
        come)."""
        end = offset + length
        try:
            fd = self.fd(file_id)
            allocated = self.allocated.get(file_id, 0)
            if end > allocated:  # the records outrun the fill: zeros never under them
                # (written over at once, in the same sync), and past them at most a piece,
                # for a small request only (see the module docstring)
                if offset > allocated:
                    zero_fill(fd, allocated, offset)
                target = end
                if length < PIECE_BYTES:
                    target = min(end + min(PIECE_BYTES, self.prealloc), self.file_size_max)
                self.allocated[file_id] = zero_fill(fd, end, target) if target > end else end
            if shared is not None:
                done = 0
                while done < length:
                    done += os.pwrite(fd, shared[done:], offset + done)
            else:
                while offset < end:
                    moved = os.splice(inp, fd, end - offset, offset_dst=offset)
                    if not moved:
                        raise EOFError
                    offset += moved
            os.fdatasync(fd)
        except OSError as exc:
            if shared is None:
                skip(inp, end - offset)
            return exc
        self.written[file_id] = max(self.written.get(file_id, 0), end)
        return None

    def fill_ahead(self, inp: int, last_request_bytes: int) -> None:
        """Between requests: if the last one held fewer bytes than a piece and less than half
        of ``prealloc`` bytes past the newest file's last record are filled, zero-fill it
        until ``prealloc`` are, a piece at a time, each piece synced on its own (a few pieces
        now and then, not a sliver and an extra sync after every request). Stops as soon as
        a request waits in ``inp`` (which then waits for one piece at most). A failed piece
        ends the filling until the next request (whose own write reports the fault, if it
        lasts)."""
        if not self.fds or last_request_bytes >= PIECE_BYTES:
            # requests this big come back to back: the next would wait for a piece, and each
            # piece's own sync is one more; they grow the file themselves (see write)
            return
        file_id = max(self.fds)
        fd = self.fds[file_id]
        allocated = self.allocated.get(file_id, 0)
        written = self.written.get(file_id, 0)
        if allocated - written >= self.prealloc // 2:
            return
        target = min(written + self.prealloc, self.file_size_max)
        piece = min(PIECE_BYTES, self.prealloc)
        while allocated < target and not select.select([inp], [], [], 0)[0]:
            try:
                allocated = zero_fill(fd, allocated, min(allocated + piece, self.file_size_max))
                os.fdatasync(fd)
            except OSError:
                return
            self.allocated[file_id] = allocated


def skip(inp: int, length: int) -> None:
    """Read past ``length`` bytes of ``inp``."""
    while length:
        piece = os.read(inp, min(PIECE_BYTES, length))
        if not piece:
            raise EOFError
        length -= len(piece)


def answer(out: int, errno: int, message: str) -> None:
    text = message.encode("utf-8", "replace")
    data = memoryview(ANSWER.pack(errno, len(text)) + text)
    while data:
        data = data[os.write(out, data) :]


def serve(inp: int, out: int, writer: Writer, ring: memoryview | None = None) -> None:
    """Answer requests until the input ends (:class:`EOFError`); ``ring``: the shared
    ring, if the bookie passed one."""
    request_bytes = 0
    while True:
        writer.fill_ahead(inp, request_bytes)
        (count,) = REQUEST.unpack(read_exactly(inp, REQUEST.size))
        error: OSError | None = None
        request_bytes = 0
        for _ in range(count):
            file_id, offset, length, at = SEGMENT.unpack(read_exactly(inp, SEGMENT.size))
            request_bytes += length
            shared = None
            if at != INLINE:
                if ring is None or at < 0 or at + length > len(ring):
                    raise EOFError  # not this bookie's writer: nothing can be trusted
                shared = ring[at : at + length]
            if error is None:
                error = writer.write(inp, file_id, offset, length, shared)
            elif shared is None:  # as a thread would: nothing after the failed segment
                skip(inp, length)
        if error is None:
            answer(out, 0, "")
        else:
            answer(out, error.errno or -1, error.strerror or str(error))


def read_exactly(inp: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = os.read(inp, size - len(data))
        if not piece:
            raise EOFError
        data += piece
    return data


def main(argv: list[str]) -> int:
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
    directory, file_size_max, prealloc = argv[1], int(argv[2]), int(argv[3])
    ring = None
    if len(argv) > 5:  # the shared ring's descriptor and size
        import mmap  # loads no other module; imported only when there is a ring

        ring = memoryview(mmap.mmap(int(argv[4]), int(argv[5]), prot=mmap.PROT_READ))
    try:  # noqa: SIM105 (no contextlib here: see the imports)
        serve(0, 1, Writer(directory, file_size_max, prealloc), ring)
    except (EOFError, BrokenPipeError):  # the bookie is gone
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
