"""Positional vectored writes shared by the journal and the entry logs (worker threads)."""

from __future__ import annotations

import os
from collections.abc import Sequence
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
