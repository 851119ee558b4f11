"""Process memory settings of serving processes."""

from __future__ import annotations

import subprocess
import sys
import threading

from magnetar.bookie.gc_tuning import start_heap_trimmer


def test_heap_trimmer_runs_in_a_daemon_thread_on_glibc() -> None:
    assert start_heap_trimmer(interval_s=3600) is True  # this suite runs on glibc (Debian)
    trimmers = [t for t in threading.enumerate() if t.name == "heap-trimmer"]
    assert trimmers and all(t.daemon for t in trimmers)


def test_a_fixed_mmap_threshold_maps_big_blocks_after_one_was_freed() -> None:
    """glibc raises its threshold to the size of a mapped block freed, so a smaller big block
    after it comes from the heap; fixed, it is still mapped on its own. (glibc maps only when
    the heap has no free chunk big enough: the blocks are megabytes, which a fresh
    interpreter's heap does not hold free; with 256 KiB blocks this depended on the heap.)"""
    script = """
import ctypes, sys
from magnetar.bookie.gc_tuning import fix_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
first = bytearray(8 << 20)
del first
before = libc.mallinfo2().hblkhd
second = bytearray(4 << 20)
print(libc.mallinfo2().hblkhd - before)
"""
    grown = {}
    for mode in ("default", "fixed"):
        out = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, check=True
        )
        grown[mode] = int(out.stdout)
    assert grown["default"] == 0  # glibc's dynamic threshold: the heap served it
    assert grown["fixed"] >= 4 << 20
