"""How long a serving process's event loop may keep the GIL from its helper threads.

The journal's writer thread (``magnetar.bookie.journal``) needs the GIL for a few
microseconds at three points of every group commit: after taking the batch, after the
write and after the ``fdatasync`` (to hand the completion back to the loop). CPython makes
a thread that wants the GIL wait until the holder releases it, or until the *switch
interval* passes and the holder is asked to let go: 5 ms by default. A busy event loop
seldom releases it on its own, so each of the three points could wait up to 5 ms, and every
publish's receipt waits for its commit. In same-run A/B passes of ``benchmarks/broker.py``
on a loaded 2-core machine (docs/broker.md) the shorter interval came with lower publish
latency percentiles in every pass; how much of that is this change alone was not
separable from the machine's noise.

A shorter interval only costs when another thread actually waits: the holder then drops
the GIL at the next check (tens of microseconds of hand-over). The storage thread
(checkpoints), the metadata store's thread and the heap trimmer get the GIL sooner too.
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
