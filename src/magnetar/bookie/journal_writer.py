"""The journal's writer process: writes batches of journal records and fdatasyncs them.

A :class:`~magnetar.bookie.journal.Journal` starts one as a child process
(``python -I -S journal_writer.py <journal dir> <file size max> <prealloc bytes>``: the
standard library only, no imports of ours, so it starts in a few milliseconds). It runs
outside the bookie's interpreter, so a finished sync never waits for the event loop's GIL:
the answer is a few bytes on a pipe the loop's selector sees.

Protocol (little-endian), over the child's stdin and stdout:

* request: ``u32`` segment count, then per segment ``u64`` file id, ``u64`` offset,
  ``u64`` length and that many bytes of records, to be written at that offset of
  ``<file id:020d>.jnl``;
* answer, once every segment of the request is written and its file fdatasync'ed:
  ``i32`` errno (0: done; -1: an error without one), ``u32`` message length, the message
  (UTF-8). Requests are answered in order, one at a time.

End of input (the bookie closed the pipe, or died) ends the process; a request cut short by
it is written no further (what was written of it is a torn tail, never acknowledged). After
a failed segment the rest of its request is read and not written. SIGINT and SIGTERM are ignored: the process ends with its bookie.

Files are zero-filled ahead of the records (``prealloc bytes`` at a time), so the file's
size and block map do not change at each sync: an fdatasync then flushes data only,
instead of also writing the inode (and, on a journaling file system, waiting for a
metadata commit). Opening a file closes those of earlier files (synced first: a failed
file's sync error must not fail the next file's writes) and syncs the directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import sys
from typing import BinaryIO, Final

REQUEST: Final = struct.Struct("<I")
SEGMENT: Final = struct.Struct("<QQQ")
ANSWER: Final = struct.Struct("<iI")
PIECE_BYTES: Final = 256 * 1024
"""A segment is read from the pipe and written in pieces of this size at most, so this
process holds little more than one piece whatever the batch (its memory counts as the
bookie's)."""
_ZEROS: Final = bytes(PIECE_BYTES)


def journal_path(directory: str, file_id: int) -> str:
    return os.path.join(directory, f"{file_id:020d}.jnl")


def zero_fill(fd: int, start: int, end: int) -> int:
    """Write zeros over ``[start, end)``; returns ``end``. Replay reads zeros as a torn tail
    (their header checksum fails), which is what the unwritten part of a file is."""
    pos = start
    while pos < end:
        pos += os.pwrite(fd, memoryview(_ZEROS)[: min(len(_ZEROS), end - pos)], pos)
    return end


def write_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data = data[written:]
        offset += written


class Writer:
    """The files of one journal directory, as this process writes them."""

    def __init__(self, directory: str, file_size_max: int, prealloc: int) -> None:
        self.directory = directory
        self.file_size_max = file_size_max
        self.prealloc = prealloc
        self.fds: dict[int, int] = {}
        self.allocated: dict[int, int] = {}

    def fd(self, file_id: int) -> int:
        fd = self.fds.get(file_id)
        if fd is None:
            for old in [f for f in self.fds if f < file_id]:
                with contextlib.suppress(OSError):
                    os.fdatasync(self.fds[old])
                os.close(self.fds.pop(old))
                self.allocated.pop(old, None)
            fd = os.open(journal_path(self.directory, file_id), os.O_WRONLY | os.O_CREAT, 0o644)
            self.fds[file_id] = fd
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return fd

    def write(self, inp: BinaryIO, file_id: int, offset: int, length: int) -> OSError | None:
        """Copy ``length`` bytes from ``inp`` to ``offset`` of the file and fdatasync it;
        the error if that failed (the segment's bytes are read from ``inp`` either way).
        Raises :class:`EOFError` if the input ended first (nothing more will come)."""
        end = offset + length
        try:
            fd = self.fd(file_id)
            allocated = self.allocated.get(file_id, 0)
            if end > allocated:
                target = min(allocated + self.prealloc, self.file_size_max)
                self.allocated[file_id] = zero_fill(fd, allocated, max(end, target))
            while offset < end:
                piece = read_piece(inp, end - offset)
                offset += len(piece)
                write_all(fd, memoryview(piece), offset - len(piece))
            os.fdatasync(fd)
        except OSError as exc:
            while offset < end:
                offset += len(read_piece(inp, end - offset))
            return exc
        return None


def read_piece(inp: BinaryIO, left: int) -> bytes:
    piece = inp.read(min(PIECE_BYTES, left))
    if not piece:
        raise EOFError
    return piece


def answer(out: BinaryIO, errno: int, message: str) -> None:
    text = message.encode("utf-8", "replace")
    out.write(ANSWER.pack(errno, len(text)) + text)
    out.flush()


def serve(inp: BinaryIO, out: BinaryIO, writer: Writer) -> None:
    """Answer requests until the input ends (:class:`EOFError`)."""
    while True:
        (count,) = REQUEST.unpack(read_exactly(inp, REQUEST.size))
        error: OSError | None = None
        for _ in range(count):
            file_id, offset, length = SEGMENT.unpack(read_exactly(inp, SEGMENT.size))
            if error is None:
                error = writer.write(inp, file_id, offset, length)
            else:  # as a thread would: nothing after the failed segment is written
                while length:
                    length -= len(read_piece(inp, length))
        if error is None:
            answer(out, 0, "")
        else:
            answer(out, error.errno or -1, error.strerror or str(error))


def read_exactly(inp: BinaryIO, size: int) -> bytes:
    data = inp.read(size)
    if len(data) < size:
        raise EOFError
    return data


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    directory, file_size_max, prealloc = argv[1], int(argv[2]), int(argv[3])
    with contextlib.suppress(EOFError, BrokenPipeError):  # the bookie is gone
        serve(sys.stdin.buffer, sys.stdout.buffer, Writer(directory, file_size_max, prealloc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
