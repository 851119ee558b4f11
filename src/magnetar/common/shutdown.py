"""How the server processes (standalone, broker, bookie, Functions Worker) wait for
SIGTERM/SIGINT and stop their parts within a bound.

    stop = stop_requested()                  # set by SIGTERM or SIGINT
    try:
        await unless_stopped(node.start(), stop)   # a start-up that waits on an
    except StopRequested:                          # unreachable store gives way at once
        ...
    await stop.wait()
    deadline_s = loop.time() + STOP_TIMEOUT_S
    await stop_step("broker", broker.close(), deadline_s)   # logged, never raised

A stop request is also news for the parts that wait on the outside world: a part registers
with :func:`on_stop_requested` and is told when the process starts stopping (the metadata
store then stops waiting for an unreachable ZooKeeper: :mod:`magnetar.metadata.zookeeper`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_TIMEOUT_S = 20.0
"""How long stopping a process may take in all; each part gets what is left of it (at
least ``STOP_STEP_MIN_S``), then shutdown moves on."""
STOP_STEP_MIN_S = 1.0

_stopping = False
_listeners: list[Callable[[], None]] = []


class StopRequested(Exception):
    """Raised by :func:`unless_stopped` when the stop came first."""


def stop_requested() -> asyncio.Event:
    """An event the running loop sets on SIGTERM or SIGINT; the process is stopping from
    then on (:func:`stopping`, :func:`on_stop_requested`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def requested() -> None:
        stop.set()
        request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, requested)
    return stop


def request_stop() -> None:
    """Mark this process as stopping and tell every listener (once)."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    for listener in list(_listeners):
        try:
            listener()
        except Exception:  # one listener's bug must not keep the others from hearing
            log.exception("a stop listener failed")


def stopping() -> bool:
    """Whether this process has been asked to stop."""
    return _stopping


def on_stop_requested(listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener`` (on the thread that handles the signal: the loop's) when the
    process is asked to stop, at once if it already is. Returns a function that
    unregisters it. A listener must not block."""
    _listeners.append(listener)
    if _stopping:
        listener()

    def unregister() -> None:
        if listener in _listeners:
            _listeners.remove(listener)

    return unregister


async def unless_stopped(step: Awaitable[T], stop: asyncio.Event) -> T:
    """Await ``step`` (a start-up) unless ``stop`` is set first: then ``step`` is
    cancelled and awaited, and :class:`StopRequested` raised (unless ``step`` finished
    after all: then its result is returned, for the caller to own and stop)."""
    task = asyncio.ensure_future(step)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        pass
    except Exception as exc:  # what the cancelled start-up was failing with
        log.debug("the start-up ended with %r while stopping", exc)
    raise StopRequested("stop requested during start-up")


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
