"""Idle ledgers' indexes leave memory: :class:`IndexSpiller`.

Every ``index_spill_interval_ms`` the bookie looks for ledgers neither read nor written for
``index_spill_idle_scans`` looks in a row; a storage thread writes their index to spill files
and the loop frees them if nothing changed meanwhile (see :mod:`magnetar.bookie.entry_index`;
the next use reads them back).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from magnetar.bookie.ledger_storage import LedgerStorage
from magnetar.bookie.service import BackgroundService
from magnetar.common.clock import Clock

log = logging.getLogger("magnetar.bookie")


class IndexSpiller(BackgroundService):
    """See the module docstring."""

    name = "bookie-index-spill"

    def __init__(
        self,
        storage: LedgerStorage,
        executor: Executor,
        clock: Clock,
        *,
        interval_ms: int,
        idle_scans: int,
    ) -> None:
        self._storage = storage
        self._executor = executor
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self._idle_scans = idle_scans

    async def spill_idle_indexes(self) -> int:
        """One look for idle ledgers: the indexes of those idle long enough leave memory
        (written to spill files in a storage thread). Returns how many left."""
        storage = self._storage
        candidates = storage.spill_candidates(self._idle_scans)
        if not candidates:
            return 0
        loop = asyncio.get_running_loop()
        written = await loop.run_in_executor(self._executor, storage.write_spills, candidates)
        return storage.finish_spills(written)

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            try:
                await self.spill_idle_indexes()
            except Exception:
                log.exception("spilling idle ledger indexes failed")
