"""The disk check's timer: :class:`DiskMonitor` (BookKeeper's ``LedgerDirsMonitor``).

When free space is looked at, and why also by bytes written: :mod:`magnetar.bookie.disk_check`.
What read-only mode means: :mod:`magnetar.bookie.state`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from magnetar.bookie.service import BackgroundService
from magnetar.bookie.state import BookieState
from magnetar.common.clock import Clock

log = logging.getLogger("magnetar.bookie")


class DiskMonitor(BackgroundService):
    """The disk check of one bookie (BookKeeper's ``LedgerDirsMonitor``): every
    ``interval_ms`` it looks at free space (turning the bookie read-only or writable, see
    :class:`~magnetar.bookie.state.BookieState`), retries a checkpoint while a storage fault
    stands (clearing the fault once one works and the disk has room), retries a
    re-registration that failed, and republishes the disk figures of the registration once
    they moved enough (:meth:`~magnetar.bookie.state.BookieState.publish_disk_if_moved`)."""

    name = "bookie-disk"

    def __init__(
        self,
        state: BookieState,
        checkpoint: Callable[[], Awaitable[None]],
        clock: Clock,
        *,
        interval_ms: int,
    ) -> None:
        self._state = state
        self._checkpoint = checkpoint
        self._clock = clock
        self._interval_s = interval_ms / 1000

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            await self.check()

    async def check(self) -> None:
        """One look (what :meth:`run` does every ``interval_ms``)."""
        state = self._state
        if state.storage_fault is not None:
            await self._retry_storage()
        # Also retry a re-registration that failed (the metadata store may share the
        # full disk).
        if state.look_at_disk() or state.registration_stale:
            await state.reregister()
        else:
            await state.publish_disk_if_moved()

    async def _retry_storage(self) -> None:
        """Try a checkpoint (it writes everything the failed ones did not)."""
        try:
            await self._checkpoint()
        except OSError as exc:
            log.warning("bookie %s: storage still failing: %s", self._state.bookie_id, exc)
            return
        self._state.storage_works()
