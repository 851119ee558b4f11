"""Counting the function calls a piece of code makes (Python and C functions, as cProfile
counts them): the dispatch and ack paths are measured in calls per entry, a figure that
does not depend on the machine's load, so tests can pin "per run, not per entry"."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


def calls_made(fn: Callable[[], Any]) -> int:
    """How many Python and C function calls ``fn()`` makes, its own call included."""
    count = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    # a collection would run gc callbacks (hypothesis installs one) inside the count
    gc_was_enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if gc_was_enabled:
            gc.enable()
    return count - 1  # not the setprofile(None) call
