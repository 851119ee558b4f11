"""Memory settings for a serving process (``magnetar standalone``, ``magnetar bookie``): the
cyclic collector kept off the per-entry paths, and freed heap returned to the system."""

from __future__ import annotations

import ctypes
import gc
import threading
import time
from typing import Final

GC_THRESHOLDS: Final = (50_000, 20, 100)
"""Collector thresholds while serving (CPython's defaults are 700, 10, 10)."""


def tune_gc_for_serving() -> None:
    """Keep the cyclic garbage collector off the publish path (call once, at start-up, in
    the process's entry point: it changes process-wide settings).

    With the defaults, every ~700 allocations a collection rescans the objects of the adds
    in flight, promotes them, and full collections walk everything imported at start-up
    (FastAPI, protobuf, ...): measured 30-40% of the broker's CPU at 10k msg/s unbatched and
    ~50 ms loop stalls (the p99 publish latency). Freezing the start-up heap takes it out of
    every collection; a larger first threshold lets short-lived per-entry objects die
    before a collection sees them. Cycles are still collected, just less often.
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


MMAP_THRESHOLD_BYTES: Final = 128 * 1024
"""Heap blocks at least this big are mapped on their own (glibc's initial default, kept)."""
_M_MMAP_THRESHOLD: Final = -3
"""``mallopt`` parameter number of ``M_MMAP_THRESHOLD`` (glibc's ``malloc.h``)."""


def fix_mmap_threshold(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Map every heap block of ``threshold_bytes`` or more on its own, for the life of the
    process (``mallopt(M_MMAP_THRESHOLD)``; call at start-up). Returns False where there
    is no glibc.

    glibc starts at 128 KiB but raises the threshold to the size of each mapped block freed
    (up to 32 MiB): after the first 256 KiB write-buffer segment or 100 KB entry went, every
    later one came from the main heap, where long-lived small blocks between them kept the
    freed space from being returned. Fixed, such blocks go back to the system when freed
    (measured in ``benchmarks/broker.py``, before the bookie's index spill: peak resident
    memory over three passes of the matrix 232-235 -> 195-197 MB, the first pass's 160-161
    -> 153-155 MB). The bookie's write-buffer segments are pooled so that they are not
    mapped and unmapped at this threshold (:mod:`magnetar.bookie.entry_log`)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold_bytes))


HEAP_TRIM_INTERVAL_S: Final = 2.0


def start_heap_trimmer(interval_s: float = HEAP_TRIM_INTERVAL_S) -> bool:
    """Return freed heap memory to the system every ``interval_s`` (glibc's
    ``malloc_trim``, from a daemon thread). Returns False where there is no glibc.

    Entries of tens of kilobytes come and go in FIFO order (the tailing cache, the bookie's
    write buffers) between long-lived small objects, so glibc keeps the freed pages: after a
    burst of batched 1 KiB messages the standalone stayed at ~1 GB resident with ~75 MB in
    use. Trimming often keeps each trim short (it only returns what was freed since the
    last one)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def run() -> None:
        while True:
            time.sleep(interval_s)
            trim(0)

    threading.Thread(target=run, name="heap-trimmer", daemon=True).start()
    return True
