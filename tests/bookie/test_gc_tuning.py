"""Process memory settings of serving processes."""

from __future__ import annotations

import threading

from magnetar.bookie.gc_tuning import start_heap_trimmer


def test_heap_trimmer_runs_in_a_daemon_thread_on_glibc() -> None:
    assert start_heap_trimmer(interval_s=3600) is True  # this suite runs on glibc (Debian)
    trimmers = [t for t in threading.enumerate() if t.name == "heap-trimmer"]
    assert trimmers and all(t.daemon for t in trimmers)
