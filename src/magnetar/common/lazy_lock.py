"""Locks made at first use, for objects a broker holds thousands of while idle (topics,
managed ledgers): an ``asyncio.Lock`` per object and purpose is a few hundred bytes each,
and most of them are never taken."""

from __future__ import annotations

import asyncio


def lazy_lock(owner: object, attribute: str) -> asyncio.Lock:
    """The lock in ``owner.<attribute>``, made there if it holds None. Call it on the event
    loop's thread only (making and storing it is then atomic)."""
    lock: asyncio.Lock | None = getattr(owner, attribute)
    if lock is None:
        lock = asyncio.Lock()
        setattr(owner, attribute, lock)
    return lock
