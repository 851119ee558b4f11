"""Bounded waits on conditions: the way tests wait, instead of sleeping a guessed time."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL_S = 0.02


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float = 10.0,
    interval_s: float = POLL_INTERVAL_S,
    what: str = "condition",
) -> T:
    """Call ``predicate`` until it returns a truthy value, and return that value.

    Raises :class:`AssertionError` naming ``what`` once ``timeout_s`` has passed without
    success.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(interval_s)


async def wait_until_async(
    predicate: Callable[[], T | Awaitable[T]],
    timeout_s: float = 10.0,
    interval_s: float = POLL_INTERVAL_S,
    what: str = "condition",
) -> T:
    """The asyncio form of :func:`wait_until`; ``predicate`` may return an awaitable."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        await asyncio.sleep(interval_s)
