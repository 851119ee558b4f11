"""Garbage collection of deleted ledgers: :class:`GarbageCollector` (BookKeeper's
``GarbageCollectorThread``).

Every ``gc_interval_ms``: ledgers whose metadata node ``/ledgers/L<id>`` is gone are
forgotten by the index, entry logs with no live entry left are removed, and those with
little left (live fraction below ``compaction_live_fraction_max``) are compacted: their live
entries are written again through the write buffers (a cache at a time) and the old log is
removed once a checkpoint covers the copies. Only a bookie in a cluster collects (without a
metadata store nothing says which ledgers were deleted).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from magnetar.bookie.checkpoint import Checkpointer
from magnetar.bookie.ledger_storage import LedgerStorage
from magnetar.bookie.service import BackgroundService
from magnetar.bookie.state import BookieState
from magnetar.bookie_protocol.layout import LEDGERS_PATH, ledger_id_of
from magnetar.common.clock import Clock
from magnetar.metadata.store import MetadataStore, NotFound

log = logging.getLogger("magnetar.bookie")


class GarbageCollector(BackgroundService):
    """See the module docstring."""

    name = "bookie-gc"

    def __init__(
        self,
        storage: LedgerStorage,
        checkpointer: Checkpointer,
        metadata: MetadataStore,
        executor: Executor,
        state: BookieState,
        clock: Clock,
        *,
        interval_ms: int,
        compaction_live_fraction_max: float,
    ) -> None:
        self._storage = storage
        self._checkpointer = checkpointer
        self._metadata = metadata
        self._executor = executor
        self._state = state
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self._live_fraction_max = compaction_live_fraction_max
        self.runs = 0
        """Collections completed."""

    async def collect_garbage(self) -> int:
        """Forget ledgers deleted from the metadata store, then remove or compact entry logs
        with little live data. Returns the number of entry-log bytes freed. Raises
        ``OSError`` when a checkpoint fails, ``MetadataError``."""
        storage = self._storage
        checkpoint = self._checkpointer.checkpoint
        bookie_id = self._state.bookie_id
        # Snapshot local ledgers BEFORE listing the store: a ledger created after the
        # listing cannot be in the snapshot, so it is never mistaken for a deleted one.
        local = list(storage.ledgers)
        try:
            names = await self._metadata.children(LEDGERS_PATH)
        except NotFound:
            names = []
        alive = {i for i in map(ledger_id_of, names) if i is not None}
        deleted = [lg for lg in local if lg not in alive]
        if deleted:
            storage.delete_ledgers(deleted)
            log.info("bookie %s: garbage-collected %d deleted ledgers", bookie_id, len(deleted))
        loop = asyncio.get_running_loop()
        active = storage.entry_logger.active_log_id
        total = storage.log_total_bytes.get(active, 0)
        if total and storage.log_live_bytes.get(active, 0) / total < self._live_fraction_max:
            # Mostly garbage already: close it so it can be compacted or removed below.
            storage.entry_logger.roll()
        # Compaction reads settled logs from their files: flush the write buffers first.
        await checkpoint()
        logger = storage.entry_logger
        cache_bytes = self._checkpointer.write_cache_max_bytes
        for log_id in storage.sparse_logs(self._live_fraction_max):
            moved = 0
            for ledger_id, entry_ids, locations in storage.live_locations(log_id):
                for entry_id, loc in zip(entry_ids, locations, strict=True):
                    stored = await loop.run_in_executor(self._executor, storage.read_file, loc)
                    storage.relocate(ledger_id, entry_id, loc, stored)
                    moved += 1
                    if logger.buffered_bytes > cache_bytes:
                        # The moved entries wait in the write buffers like adds do: written
                        # out a cache at a time, not a sparse log's whole live data (up to
                        # half a log) held in memory until the end of the collection.
                        await checkpoint()
            log.info(
                "bookie %s: compacted entry log %d (%d live entries moved)",
                bookie_id,
                log_id,
                moved,
            )
            storage.schedule_removal([log_id])
        dead = storage.dead_logs()
        storage.schedule_removal(dead)
        before = sum(storage.log_total_bytes.values())
        await checkpoint()
        # Adds go on meanwhile: the removals run in their own thread, not the checkpoint.
        await self._checkpointer.removals_done()
        self.runs += 1
        return max(0, before - sum(storage.log_total_bytes.values()))

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            try:
                await self.collect_garbage()
            except OSError as exc:  # its checkpoint failed (ENOSPC, EIO): one line, read-only
                log.error("bookie %s: garbage collection failed: %s", self._state.bookie_id, exc)
                self._state.storage_failed(f"checkpoint failed: {exc}")
            except Exception:
                log.exception("garbage collection failed")
