"""How the server processes (standalone, broker, Functions Worker) wait for SIGTERM/SIGINT
and stop their parts within a bound.

    stop = stop_requested()                  # set by SIGTERM or SIGINT
    await stop.wait()
    deadline_s = loop.time() + STOP_TIMEOUT_S
    await stop_step("broker", broker.close(), deadline_s)   # logged, never raised
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 20.0
"""How long stopping a process may take in all; each part gets what is left of it (at
least ``STOP_STEP_MIN_S``), then shutdown moves on."""
STOP_STEP_MIN_S = 1.0


def stop_requested() -> asyncio.Event:
    """An event the running loop sets on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def stop_step(what: str, step: Awaitable[None], deadline_s: float) -> None:
    """Await one part's stop until ``deadline_s`` (loop time; at least ``STOP_STEP_MIN_S``):
    a part that fails or takes longer is logged in one line and shutdown goes on."""
    timeout_s = max(deadline_s - asyncio.get_running_loop().time(), STOP_STEP_MIN_S)
    try:
        await asyncio.wait_for(step, timeout_s)
    except TimeoutError:
        log.error("stopping the %s took over %.1f s; going on", what, timeout_s)
    except Exception as exc:
        log.error("stopping the %s failed: %s", what, exc)
