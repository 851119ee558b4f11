"""A mutual-exclusion lock: one ephemeral node holding the owner's description.

Holding the lock means: this session created ``path`` and the session is CONNECTED. While
SUSPENDED the holder must stop doing guarded work (the session may expire at any moment);
once LOST the lock is gone and another session may hold it. There is no fencing in a plain
lock — for writes that must not land after losing the lock, use
:class:`~magnetar.metadata.election.LeaderElection` and its fenced writes.
"""

from __future__ import annotations

import contextlib

from magnetar.metadata import path as paths
from magnetar.metadata.election import _wait_absent
from magnetar.metadata.store import (
    MetadataStore,
    NodeExists,
    NotFound,
    SessionExpired,
    SessionState,
)


class Lock:
    """Lock at ``path`` with ``owner`` bytes (who holds it, for operators and tools)."""

    def __init__(self, store: MetadataStore, path: str, owner: bytes) -> None:
        self.store = store
        self.path = paths.validate(path)
        self.owner_data = bytes(owner)
        self._acquired = False

    @property
    def held(self) -> bool:
        """True while acquired and the session is CONNECTED."""
        return self._acquired and self.store.session_state is SessionState.CONNECTED

    async def try_acquire(self) -> bool:
        """Take the lock if free; True on success. Raises :class:`SessionExpired`."""
        try:
            await self.store.create(self.path, self.owner_data, ephemeral=True)
        except NodeExists:
            # After a ConnectionLoss our own create may have succeeded: recognise it.
            try:
                current = await self.store.get(self.path)
            except NotFound:
                return await self.try_acquire()
            if current.stat.ephemeral_owner != self.store.session_id:
                return False
        self._acquired = True
        return True

    async def acquire(self) -> None:
        """Wait until the lock is ours (bound the wait with ``asyncio.timeout``).
        Raises :class:`SessionExpired` if the session ends while waiting."""
        while True:
            stream = self.store.notifications(self.path)
            try:
                await stream.wait_ready()
                if await self.try_acquire():
                    return
                await _wait_absent(self.store, stream, self.path)
            finally:
                stream.close()

    async def holder(self) -> bytes | None:
        """The owner data of whoever holds the lock now, ``None`` if free."""
        try:
            return (await self.store.get(self.path)).value
        except NotFound:
            return None

    async def release(self) -> None:
        """Release if held by this session; idempotent."""
        if not self._acquired:
            return
        self._acquired = False
        with contextlib.suppress(NotFound, SessionExpired):
            stat = await self.store.exists(self.path)
            if stat is not None and stat.ephemeral_owner == self.store.session_id:
                await self.store.delete(self.path, stat.version)
