"""Background loops that end by a bug must not end silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any


def report_crash(log: logging.Logger) -> Callable[[asyncio.Task[Any]], None]:
    """A done-callback for a long-running task: logs (with the traceback) an exception
    that ended it; cancellation and a normal end say nothing."""

    def callback(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s stopped: %r", task.get_name(), exc, exc_info=exc)

    return callback
