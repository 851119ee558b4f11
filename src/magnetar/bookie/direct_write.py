"""Entry-log writes that bypass the page cache (``O_DIRECT``), for a checkpoint's pieces.

A buffered ``pwritev`` of a checkpoint's piece copies it into newly allocated page-cache
pages, which the kernel then writes back; appending 1 GiB in 2 MiB pieces, each followed by
an fdatasync, ran at 0.3-0.7 GB/s and cost 1-3 s of CPU per GiB on the test machine, against
1.2-1.7 GB/s and 0.1-0.35 s with ``O_DIRECT`` from an aligned buffer (docs/perf-log.md).

``O_DIRECT`` wants each write's offset, length and memory aligned to the device's block.
:class:`DirectLog` copies a piece into a page-aligned buffer (``mmap``), starting at the
block boundary before it: the head of that block (bytes of earlier records) comes from its
own last write, or is read back from the file; the rest of the last block is zeros. So every
write rewrites its first block with the same bytes it held, and the file ends past the
data's end, with zeros (the log's data end is kept in memory; a log is never appended to
after a restart, and a torn rewrite of a block writes bytes it held before).

Reads go through the entry logger's buffered descriptors: a direct write drops the pages it
covers from the page cache, so they read what was written.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import Final

from magnetar.bookie import file_io

BLOCK_BYTES: Final = 4096
"""What writes are aligned to: a page (the device's logical block divides it)."""
_KEEP_BUFFER_BYTES: Final = 8 * 1024 * 1024
"""A buffer this big or smaller is kept for the next piece; a bigger one (a piece of huge
entries) is released after its write."""


def open_direct(path: str) -> int | None:
    """A descriptor of ``path`` opened for direct writes, or None where the file system has
    no ``O_DIRECT`` (tmpfs, some network file systems)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | flag, 0o644)
    except OSError:
        return None


class DirectLog:
    """Aligned writes of one log's pieces at increasing offsets (worker thread)."""

    def __init__(self) -> None:
        self._buffer: mmap.mmap | None = None
        self._tails: dict[int, tuple[int, bytes]] = {}
        """Per log: the start of the block its last write ended in, and that block's bytes
        of data (the head of the next write there)."""

    def write(
        self,
        log_id: int,
        direct_fd: int,
        read_fd: int,
        start: int,
        pieces: Sequence[bytes | bytearray | memoryview],
    ) -> None:
        """Write ``pieces`` back to back at ``start`` of log ``log_id`` through
        ``direct_fd``; ``read_fd`` reads the head of the first block when this writer did
        not write it. Raises ``OSError``; the log's state is then forgotten (the next write
        reads its head back)."""
        aligned = start & -BLOCK_BYTES
        head_len = start - aligned
        length = head_len + sum(map(len, pieces))
        padded = -(-length // BLOCK_BYTES) * BLOCK_BYTES
        try:
            head = self._head(log_id, read_fd, aligned, head_len)
            with memoryview(self._buffer_of(padded)) as view:
                view[:head_len] = head
                pos = head_len
                for piece in pieces:
                    view[pos : pos + len(piece)] = piece
                    pos += len(piece)
                view[length:padded] = bytes(padded - length)
                file_io.pwritev_all(direct_fd, [view[:padded]], aligned)
                last = length & -BLOCK_BYTES
                self._tails[log_id] = (aligned + last, bytes(view[last:length]))
        except BaseException:
            self._tails.pop(log_id, None)
            raise
        finally:
            if self._buffer is not None and len(self._buffer) > _KEEP_BUFFER_BYTES:
                self._buffer.close()
                self._buffer = None

    def forget(self, log_id: int) -> None:
        """The log is gone (removed, or written by someone else)."""
        self._tails.pop(log_id, None)

    def _head(self, log_id: int, read_fd: int, aligned: int, head_len: int) -> bytes:
        if not head_len:
            return b""
        tail = self._tails.get(log_id)
        if tail is not None and tail[0] == aligned and len(tail[1]) == head_len:
            return tail[1]
        head = os.pread(read_fd, head_len, aligned)
        if len(head) != head_len:
            raise OSError(f"entry log {log_id}: {len(head)} of {head_len} bytes before {aligned}")
        return head

    def _buffer_of(self, size: int) -> mmap.mmap:
        if self._buffer is None or len(self._buffer) < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = mmap.mmap(-1, max(size, 2 * 1024 * 1024 + BLOCK_BYTES))
        return self._buffer
