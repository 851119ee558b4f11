"""Positional vectored writes shared by the journal and the entry logs (worker threads)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

IOV_MAX: Final = 1024
"""Buffers per ``pwritev`` system call (Linux's limit)."""


def pwritev_all(fd: int, bufs: Sequence[bytes], offset: int, *, sync_every_bytes: int = 0) -> None:
    """Write ``bufs`` back to back at ``offset``, IOV_MAX buffers per system call. No join:
    a big buffer is never copied while holding the GIL, which the event loop needs.

    ``sync_every_bytes`` > 0: ``fdatasync`` each time at least that much was written since
    the last one (the caller syncs the end). A long write then reaches the disk as a series
    of small flushes that another file's syncs can slip between, instead of one burst that
    every sync queued behind it waits for."""
    unsynced = 0
    for i in range(0, len(bufs), IOV_MAX):
        chunk = bufs[i : i + IOV_MAX]
        total = sum(map(len, chunk))
        written = os.pwritev(fd, chunk, offset)
        if written < total:
            # Short write (rare): finish this chunk byte-exactly.
            rest = memoryview(b"".join(chunk))[written:]
            pos = offset + written
            while rest:
                k = os.pwrite(fd, rest, pos)
                rest = rest[k:]
                pos += k
        offset += total
        unsynced += total
        if sync_every_bytes and unsynced >= sync_every_bytes:
            os.fdatasync(fd)
            unsynced = 0


_SHRINK_STEP_BYTES: Final = 8 * 1024 * 1024
_SHRINK_PAUSE_S: Final = 0.002


def remove_gradually(path: Path) -> int:
    """Delete a file (worker thread; a missing file is fine); returns its size. A big file
    is first truncated 8 MiB at a time with short pauses between, so the file system frees
    its blocks in small commits that other files' syncs can pass, not in one they all wait
    for (unlinking a 256 MiB journal file at once held them up for ~40 ms)."""
    try:
        size = total = path.stat().st_size
        while size > _SHRINK_STEP_BYTES:
            size -= _SHRINK_STEP_BYTES
            os.truncate(path, size)
            time.sleep(_SHRINK_PAUSE_S)
    except FileNotFoundError:
        return 0
    path.unlink(missing_ok=True)
    return total
