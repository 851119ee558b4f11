"""Runs ``magnetar`` (``python -m magnetar.cli.main``) with a marker on stderr where it writes
its ready line: ``python -X importtime benchmarks/ready_marker.py standalone ...`` then tells
the imports before the ready line from those after it (``startup.py --importtime``).

It imports nothing of Magnetar's itself, so it runs any tree's code (``PYTHONPATH``).
"""

from __future__ import annotations

import runpy
import sys
from typing import Any, TextIO

READY_MARKER = "---- ready line ----"


class _MarkReady:
    """stdout, writing :data:`READY_MARKER` to stderr before the first ready line."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._marked = False

    def write(self, text: str) -> int:
        if not self._marked and " ready: " in text:
            self._marked = True
            sys.stderr.write(READY_MARKER + "\n")
            sys.stderr.flush()
        return self._inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


if __name__ == "__main__":
    sys.stdout = _MarkReady(sys.stdout)  # type: ignore[assignment]
    sys.argv = ["magnetar", *sys.argv[1:]]
    runpy.run_module("magnetar.cli.main", run_name="__main__", alter_sys=True)
