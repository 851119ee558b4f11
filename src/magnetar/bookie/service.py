"""The start/stop contract of a bookie's background services (checkpoint, garbage collection,
index spill, disk monitor): BookKeeper runs each as a thread (``SyncThread``,
``GarbageCollectorThread``, ``LedgerDirsMonitor``); here each is one task on the bookie's
event loop.

A service is built from parts that already exist (storage, journal, other services), so it
holds nothing optional. :meth:`BackgroundService.start` starts its loop on the running event
loop (once); :meth:`BackgroundService.stop` cancels it and waits until it has ended
(idempotent, never raises). A service's own work (``checkpoint()``, ``collect_garbage()``,
...) may also be called directly, before ``start`` or after ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod


class BackgroundService(ABC):
    name = "bookie-service"
    """The loop task's name."""

    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop (on the running event loop). Call once."""
        assert self._task is None, f"{self.name} started twice"
        self._task = asyncio.get_running_loop().create_task(self.run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it to end (whatever it raised)."""
        task = self._task
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    @abstractmethod
    async def run(self) -> None:
        """The loop: runs until cancelled; handles its own operating errors."""
