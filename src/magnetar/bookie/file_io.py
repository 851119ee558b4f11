"""File operations of the bookie's storage (worker threads): positional vectored writes,
synced whole-file and positional writes, directory syncs, renames and gradual removal.

This module is also the seam of the storage's crash and fault tests: ledger storage, the
entry logs and journal-file removal call these functions through the module
(``file_io.replace(...)``), so a test can wrap one to fail it (``ENOSPC``) or to copy the
data directory just before it runs (what a SIGKILL at that instant leaves on disk). Each
call is one step of a checkpoint; see "Crash points of a checkpoint" in docs/storage.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

IOV_MAX: Final = 1024
"""Buffers per ``pwritev`` system call (Linux's limit)."""


def pwritev_all(fd: int, bufs: Sequence[bytes | bytearray | memoryview], offset: int) -> None:
    """Write ``bufs`` back to back at ``offset``, IOV_MAX buffers per system call. No join:
    a big buffer is never copied while holding the GIL, which the event loop needs."""
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


def write_file_synced(path: Path, data: bytes | bytearray) -> None:
    """Create or truncate ``path``, write ``data`` and fsync it (not its directory)."""
    _write_synced(path, (data,))


def write_chunks_synced(path: Path, chunks: Iterable[bytes | bytearray]) -> None:
    """Create or truncate ``path``, write ``chunks`` back to back and fsync it (not its
    directory): a big file written without all of it in memory at once."""
    _write_synced(path, chunks)


def _write_synced(path: Path, chunks: Iterable[bytes | bytearray]) -> None:
    """The body of :func:`write_file_synced` and :func:`write_chunks_synced` (each a step of
    the crash tests on its own, so neither calls the other through the module)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            pos = 0
            while pos < len(view):
                pos += os.write(fd, view[pos:])
        os.fsync(fd)
    finally:
        os.close(fd)


def write_at_synced(path: Path, data: bytes | bytearray, offset: int) -> None:
    """Write ``data`` at ``offset`` of ``path`` (created if missing, never truncated) and
    fdatasync it (not its directory)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            pos += os.pwrite(fd, view[pos:], offset + pos)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (files created, renamed or removed in it) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(source: Path, target: Path) -> None:
    """Rename ``source`` over ``target`` atomically (``os.replace``); sync the directory
    with :func:`fsync_dir` to make it durable."""
    os.replace(source, target)


def unlink(path: Path) -> None:
    """Delete a file; a missing one is fine."""
    path.unlink(missing_ok=True)


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
