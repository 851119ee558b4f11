"""How long a serving process's event loop may keep the GIL from its helper threads.

A helper thread (the storage thread's entry reads and checkpoints, the metadata store's
thread, the heap trimmer) needs the GIL for a few microseconds at each step of its work,
and every time it hands a result back to the loop. CPython makes a thread that wants the
GIL wait until the holder releases it, or until the *switch interval* passes and the holder
is asked to let go: 5 ms by default. A busy event loop seldom releases it on its own, so
each step could wait up to 5 ms, and whatever waits on that work (a read from storage, a
metadata answer) waits that much longer. The interval was chosen when the journal's writer
was a thread (three such waits in every group commit; it is a process now, see
``magnetar.bookie.journal``): in same-run A/B passes of ``benchmarks/broker.py`` on a
loaded 2-core machine (docs/broker.md) the shorter interval came with lower publish latency
percentiles in every pass.

A shorter interval only costs when another thread actually waits: the holder then drops
the GIL at the next check (tens of microseconds of hand-over).
"""

from __future__ import annotations

import sys
from typing import Final

GIL_SWITCH_INTERVAL_S: Final = 0.0005
"""The switch interval of serving processes (CPython's default is 0.005 s)."""


def tune_gil_for_serving(interval_s: float = GIL_SWITCH_INTERVAL_S) -> None:
    """Set the process-wide switch interval (call once, in the entry point of a serving
    process: it changes a process-wide setting)."""
    sys.setswitchinterval(interval_s)
