"""Checkpoints and the write cache: :class:`Checkpointer` (BookKeeper's ``SyncThread``).

A checkpoint persists ledger storage (the entry logs' write buffers and the index) up to the
journal's position when it began, then drops the journal files before that position. One at
a time. The loop checkpoints every ``checkpoint_interval_ms`` and as soon as the write
buffers outgrow ``write_cache_max_bytes`` (:meth:`Checkpointer.check_write_cache`).

A failed checkpoint (``OSError``: ``ENOSPC``, ``EIO``) counts for nothing: the journal keeps
every record it covered, and the next one writes them again. The loop reports it to the
bookie's state (read-only until a retried checkpoint works, see
:class:`~magnetar.bookie.state.BookieState`) and attempts no more while the fault stands
(the disk monitor retries, one attempt per interval).

**Write-cache backpressure.** Adds go on while a checkpoint writes. Past a quarter more than
``write_cache_max_bytes`` still in memory (:attr:`Checkpointer.write_cache_full`), the
in-process transport's acknowledgements wait (:meth:`Checkpointer.on_write_cache_room`) until
the checkpoint writing has synced enough, or its attempt ends (BookKeeper throttles adds
when its write cache is full): the callers' windows then hold further adds back.

**A checkpoint that is behind** syncs in bigger pieces (:attr:`EntryLogger.behind`, faster):
from when adds wait for room, or the cache fills again while a checkpoint still writes the
last fill, until a checkpoint ends with less than the cache buffered. Under loads that never
fill the cache during a checkpoint (publishing at 37.5 k msg/s, unbatched at full speed) the
pieces stay small, so the journal's syncs on the same disk wait behind less.

**Entry logs a checkpoint stopped referencing** (a garbage collection's dead and compacted
logs) are removed once it is committed and its buffers released, in a thread of their own
(``removal_executor``): removing a 512 MiB log a piece at a time takes a second or more, and
inside the checkpoint it held the write cache full and every add waiting for as long. A
removal that fails is logged and handed to the next checkpoint again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial

from magnetar.bookie.journal import Journal, release_files
from magnetar.bookie.ledger_storage import CheckpointJob, LedgerStorage
from magnetar.bookie.service import BackgroundService
from magnetar.bookie.state import BookieState
from magnetar.common.clock import Clock

log = logging.getLogger("magnetar.bookie")


class Checkpointer(BackgroundService):
    """Checkpoints of one bookie's storage (see the module docstring). Build on the bookie's
    event loop, once storage is loaded and the journal started."""

    name = "bookie-checkpoint"

    def __init__(
        self,
        storage: LedgerStorage,
        journal: Journal,
        executor: Executor,
        removal_executor: Executor,
        state: BookieState,
        clock: Clock,
        *,
        interval_ms: int,
        write_cache_max_bytes: int,
    ) -> None:
        self._storage = storage
        self._journal = journal
        self._executor = executor
        self._removal_executor = removal_executor
        self._removals: set[asyncio.Future[int]] = set()
        """Entry-log removals under way (see the module docstring)."""
        self._state = state
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self.write_cache_max_bytes = write_cache_max_bytes
        self.write_cache_full_bytes = write_cache_max_bytes * 5 // 4
        """Past this many bytes in the write buffers, :attr:`write_cache_full`."""
        self.lock = asyncio.Lock()
        """Held by the checkpoint in progress."""
        self._wanted = asyncio.Event()
        self._io: asyncio.Future[None] | None = None
        self._waiters: list[Callable[[], None]] = []
        """Called when a checkpoint attempt ends (see :meth:`on_write_cache_room`)."""
        storage.entry_logger.on_released = partial(self._synced_piece, asyncio.get_running_loop())

    async def checkpoint(self) -> None:
        """Persist ledger storage up to the journal's current end, then drop older journal
        files. One at a time. Raises ``OSError`` (nothing of this checkpoint counts)."""
        storage = self._storage
        journal = self._journal
        async with self.lock:
            if self._io is not None:  # a cancelled checkpoint's I/O still runs
                await asyncio.wait([self._io])
                self._io = None
            job: CheckpointJob = storage.begin_checkpoint(journal.position)
            loop = asyncio.get_running_loop()
            io = loop.run_in_executor(self._executor, storage.run_checkpoint_io, job)
            try:
                await asyncio.shield(io)
            except asyncio.CancelledError:
                # The I/O runs on in its thread: settle the job when it ends (the next
                # checkpoint waits for that before it starts).
                self._io = io
                io.add_done_callback(partial(self._settle, job))
                raise
            except BaseException:
                # Nothing of this checkpoint counts: the journal keeps every record it
                # covered, and the next checkpoint writes them again.
                storage.abort_checkpoint(job)
                raise
            self._remove(storage.finish_checkpoint(job))
            # caught up, unless the adds during this checkpoint filled the cache again
            logger = storage.entry_logger
            logger.behind = logger.buffered_bytes > self.write_cache_max_bytes
            logger.adds_waited = logger.adds_waited and logger.behind
            detached = journal.detach_before(job.journal_position)
            if detached.spares or detached.removals:
                await loop.run_in_executor(self._executor, release_files, detached)

    async def removals_done(self) -> None:
        """Wait for the entry-log removals started so far to end (whatever their outcome)."""
        if self._removals:
            await asyncio.wait(set(self._removals))

    def _remove(self, log_ids: list[int]) -> None:
        if not log_ids:
            return
        loop = asyncio.get_running_loop()
        removal = loop.run_in_executor(self._removal_executor, self._storage.remove_logs, log_ids)
        self._removals.add(removal)
        removal.add_done_callback(partial(self._removed, log_ids))

    def _removed(self, log_ids: list[int], removal: asyncio.Future[int]) -> None:
        self._removals.discard(removal)
        bookie_id = self._state.bookie_id
        if removal.cancelled() or removal.exception() is not None:
            reason = "cancelled" if removal.cancelled() else removal.exception()
            log.error("bookie %s: cannot remove entry logs %s: %s", bookie_id, log_ids, reason)
            self._storage.retry_removal(log_ids)
        elif freed := removal.result():
            log.info("bookie %s: removed entry logs, %d bytes freed", bookie_id, freed)

    def _settle(self, job: CheckpointJob, io: asyncio.Future[None]) -> None:
        """The end of a checkpoint whose waiter was cancelled: keep it or give it back."""
        if io.cancelled() or io.exception() is not None:
            self._storage.abort_checkpoint(job)
        else:
            self._remove(self._storage.finish_checkpoint(job))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Whichever comes first: the interval (on the injected clock) or a full cache.
            sleeper = loop.create_task(self._clock.sleep(self._interval_s))
            wanted = loop.create_task(self._wanted.wait())
            try:
                await asyncio.wait({sleeper, wanted}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                wanted.cancel()
            self._wanted.clear()
            if self._state.storage_fault is not None:
                self.release_waiters()
                continue  # the disk monitor retries (one attempt, one log line, per interval)
            try:
                await self.checkpoint()
            except OSError as exc:  # an operating error (ENOSPC, EIO): one line, read-only
                log.error("bookie %s: checkpoint failed: %s", self._state.bookie_id, exc)
                self._state.storage_failed(f"checkpoint failed: {exc}")
            except Exception:
                log.exception("checkpoint failed")
            finally:
                self.release_waiters()

    async def stop(self) -> None:
        await super().stop()
        self.release_waiters()

    # -- the write cache ------------------------------------------------------------------

    def check_write_cache(self) -> None:
        """Start a checkpoint now if the write buffers outgrew the cache (and mark the one
        writing, if any, behind)."""
        if self._storage.entry_logger.buffered_bytes > self.write_cache_max_bytes:
            if self.lock.locked():  # filled again before the last fill is written
                self._storage.entry_logger.behind = True
            self._wanted.set()

    @property
    def write_cache_full(self) -> bool:
        """The write buffers hold a quarter more than ``write_cache_max_bytes`` not yet synced
        to the entry logs: a checkpoint is writing and the adds since have filled another
        quarter of the cache."""
        return self._storage.entry_logger.buffered_bytes > self.write_cache_full_bytes

    def on_write_cache_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) when the write cache is no longer full (the checkpoint
        writing has synced enough), when the next checkpoint attempt ends, whatever its
        outcome, at the latest after ``checkpoint_interval_ms`` (a bookie that cannot
        checkpoint, say read-only after a fault, holds nobody up longer), or when the
        checkpointer stops."""
        self._waiters.append(callback)
        self._storage.entry_logger.behind = True
        self._storage.entry_logger.adds_waited = True
        self._wanted.set()

    def _synced_piece(self, loop: asyncio.AbstractEventLoop) -> None:
        """Writing thread, after each sync piece of a checkpoint: wake the loop only if adds
        wait for room (a waiter added just after this look is let go when the checkpoint
        ends, as before)."""
        if self._waiters:
            with contextlib.suppress(RuntimeError):  # the loop closed: the bookie stopped
                loop.call_soon_threadsafe(self._released)

    def _released(self) -> None:
        """A checkpoint dropped synced payloads from the write buffers."""
        if self._waiters and not self.write_cache_full:
            self.release_waiters()

    def release_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for callback in waiters:
            callback()
