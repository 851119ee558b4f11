"""A metadata store whose connection a simulation can lose: ZooKeeper's faults, seen from one
client.

:class:`UnreliableStore` wraps a real :class:`~magnetar.metadata.store.MetadataStore` (one
client's view of the shared database). While :attr:`UnreliableStore.unreachable` is set
every call fails with :class:`~magnetar.metadata.store.ConnectionLoss` after a delay (the
client's connection timeout), and a write may have been applied before the loss, as with
ZooKeeper, where a ConnectionLoss leaves the outcome unknown. After :meth:`expire` every
call fails with :class:`~magnetar.metadata.store.SessionExpired`, for good: the session is
lost and the client must open a new store. Notifications and session-state streams are the
inner store's (no simulated fault reaches them).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from magnetar.metadata.notifications import NotificationStream, SessionStateStream
from magnetar.metadata.store import (
    ANY_VERSION,
    ConnectionLoss,
    GetResult,
    MetadataStore,
    Op,
    OpResult,
    SessionExpired,
    SessionState,
    Stat,
)

T = TypeVar("T")

LOSS_DELAY_S = 0.05
"""How long a call waits before failing with ConnectionLoss (the client noticing)."""
APPLIED_PROBABILITY = 0.5
"""The chance that a write failing with ConnectionLoss was applied nonetheless."""


class UnreliableStore:
    """See the module docstring. ``rng`` draws whether a lost write was applied."""

    def __init__(self, inner: MetadataStore, rng: random.Random) -> None:
        self._inner = inner
        self._rng = rng
        self.unreachable = False
        self.expired = False
        self.losses = 0
        """Calls failed with ConnectionLoss or SessionExpired so far."""

    def expire(self) -> None:
        """Lose the session: every later call fails with SessionExpired."""
        self.expired = True

    @property
    def session_id(self) -> int:
        return self._inner.session_id

    @property
    def session_state(self) -> SessionState:
        if self.expired:
            return SessionState.LOST
        if self.unreachable:
            return SessionState.SUSPENDED
        return self._inner.session_state

    async def _call(self, call: Callable[[], Awaitable[T]], *, write: bool) -> T:
        if self.expired:
            self.losses += 1
            raise SessionExpired("the session expired (simulated)")
        if not self.unreachable:
            return await call()
        self.losses += 1
        if write and self._rng.random() < APPLIED_PROBABILITY:
            # the request reached the server; its reply was lost with the connection (its
            # own failure, if any, is as unknown to the caller as its success)
            with contextlib.suppress(Exception):
                await call()
        await asyncio.sleep(LOSS_DELAY_S)
        raise ConnectionLoss("the metadata store is unreachable (simulated)")

    async def get(self, path: str) -> GetResult:
        return await self._call(lambda: self._inner.get(path), write=False)

    async def exists(self, path: str) -> Stat | None:
        return await self._call(lambda: self._inner.exists(path), write=False)

    async def put(self, path: str, value: bytes, expected_version: int = ANY_VERSION) -> Stat:
        return await self._call(lambda: self._inner.put(path, value, expected_version), write=True)

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        return await self._call(
            lambda: self._inner.create(path, value, ephemeral=ephemeral, sequential=sequential),
            write=True,
        )

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await self._call(lambda: self._inner.delete(path, expected_version), write=True)

    async def delete_recursive(self, path: str) -> None:
        await self._call(lambda: self._inner.delete_recursive(path), write=True)

    async def children(self, path: str) -> list[str]:
        return await self._call(lambda: self._inner.children(path), write=False)

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        return await self._call(lambda: self._inner.multi(ops), write=True)

    def notifications(self, prefix: str = "/") -> NotificationStream:
        return self._inner.notifications(prefix)

    def session_states(self) -> SessionStateStream:
        return self._inner.session_states()

    async def close(self) -> None:
        """The inner store is the caller's to close."""


__all__ = ["UnreliableStore"]
