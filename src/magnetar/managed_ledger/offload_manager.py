"""Offloading one managed ledger's closed ledgers to tiered storage: the I/O shell around
the planner's decisions (:func:`~magnetar.managed_ledger.maintenance.ledgers_to_offload`,
:func:`~magnetar.managed_ledger.maintenance.bookie_copies_to_delete`).

Per ledger, in this order (each step durable before the next, so a crash at any point
leaves nothing marked offloaded that is not whole, and nothing deleted that is needed):

1. a leftover attempt recorded in the ledger's :class:`OffloadContext` (not complete) has
   its objects deleted;
2. a new context with a fresh uuid is written to the metadata store with the ledger list;
3. the offloader uploads the ledger (data object, then index object);
4. the context is marked ``complete`` (with the completion time) and written again;
5. at a maintenance round ``offload_deletion_lag_ms`` later, ``bookkeeper_deleted`` is
   written, then the bookie copy is deleted (a crash in between leaks a bookie ledger).

One offload runs at a time per managed ledger, in a task (appends and reads go on). A
failure (the object store unreachable or refusing) sets the status to ``ERROR`` with the
reason and is retried by the maintenance rounds after a backoff
(:func:`~magnetar.managed_ledger.maintenance.offload_retry_delay_ms`); nothing is deleted
from the bookies for a ledger whose offload did not complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import uuid as uuid_module
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError
from magnetar.common.latency import LatencyHistogram
from magnetar.managed_ledger.errors import ManagedLedgerError, OffloadNotConfigured
from magnetar.managed_ledger.maintenance import (
    bookie_copies_to_delete,
    ledgers_to_offload,
    offload_retry_delay_ms,
)
from magnetar.managed_ledger.offload import OffloadContext, Offloader
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger_list import LedgerSegment
    from magnetar.managed_ledger.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)


class OffloadStatus(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus`` of the offload of one topic."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class OffloadFailed(ManagedLedgerError):
    """An offload did not complete; the message holds the reason. Retriable."""

    retriable = True


class OffloadManager:
    """The offloads of one managed ledger (its ``offloads``)."""

    __slots__ = (
        "_failures",
        "_ml",
        "_new_uuid",
        "_retry_at_ms",
        "_task",
        "_wanted",
        "bookie_copies_deleted_total",
        "last_error",
        "offload_errors_total",
        "offload_seconds_total",
        "offloaded_bytes_total",
        "offloaded_ledgers_total",
        "read_bytes_total",
        "read_entries_total",
        "read_errors_total",
        "read_latency",
        "status",
    )

    def __init__(
        self, ml: ManagedLedger, new_uuid: Callable[[], str] = lambda: str(uuid_module.uuid4())
    ) -> None:
        self._ml = ml
        self._new_uuid = new_uuid
        self.status = OffloadStatus.NOT_RUN
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._wanted: Position | None = None
        """A manual request not yet done: offload the closed ledgers before it."""
        self._failures = 0
        self._retry_at_ms = 0
        self.offloaded_bytes_total = 0
        self.offloaded_ledgers_total = 0
        self.offload_errors_total = 0
        self.offload_seconds_total = 0.0
        self.bookie_copies_deleted_total = 0
        self.read_bytes_total = 0
        self.read_entries_total = 0
        self.read_errors_total = 0
        self.read_latency = LatencyHistogram()
        """Of each read served by the object store (ms)."""

    # --- requests ----------------------------------------------------------------------

    def request(self, up_to: Position) -> None:
        """Start offloading every closed ledger before ``up_to``'s ledger (Pulsar's
        ``offloadPrefix``), in the background; :attr:`status` tells how it goes, and a
        failed attempt is retried with backoff until done. Raises
        :class:`OffloadNotConfigured` when this managed ledger has no offloader."""
        self._ml.check_usable()
        if self._ml.offloader is None:
            raise OffloadNotConfigured(f"{self._ml.name}: offload is not configured")
        if self._wanted is None or up_to > self._wanted:
            self._wanted = up_to
        self._retry_at_ms = 0
        self._start()

    async def offload_prefix(self, up_to: Position) -> Position:
        """:meth:`request`, then wait for it; returns the first position not offloaded.
        Raises :class:`OffloadFailed` with the reason when an attempt fails."""
        self.request(up_to)
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
            if self.status is OffloadStatus.ERROR:
                raise OffloadFailed(f"{self._ml.name}: offload failed: {self.last_error}")
            if self._due():
                self._start()
        return self.first_unoffloaded()

    def first_unoffloaded(self) -> Position:
        """The first entry of the oldest ledger not offloaded (the end of the log when
        every ledger is)."""
        for seg in self._ml.ledgers:
            if not seg.offloaded:
                return Position(seg.ledger_id, 0)
        return self._ml.ledgers.end_position

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # --- the maintenance round's part --------------------------------------------------

    async def maintain(self) -> None:
        """Start the offloads that are due (unless one runs or a retry waits) and delete
        the bookie copies whose deletion lag has passed."""
        ml = self._ml
        due_now = ml.offloader is not None and ml.clock.now_ms() >= self._retry_at_ms
        if due_now and not self.running and self._due():
            self._start()
        await self._delete_bookie_copies()

    def _due(self) -> list[int]:
        ml = self._ml
        if ml.offloader is None:
            return []
        due = ledgers_to_offload(ml.ledgers, ml.clock.now_ms(), ml.config, self._wanted)
        if self._wanted is not None and not any(i < self._wanted[0] for i in due):
            self._wanted = None
        return due

    def _start(self) -> None:
        if self.running:
            return
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"offload-{self._ml.name}"
        )

    async def _run(self) -> None:
        self.status = OffloadStatus.RUNNING
        try:
            while True:
                due = self._due()
                if not due:
                    break
                for ledger_id in due:
                    await self._offload_one(ledger_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure must show in the status, bugs included
            if not isinstance(exc, MagnetarError):
                log.exception("%s: offload failed", self._ml.name)
            self._failed(exc)
            return
        self._failures = 0
        self.status = OffloadStatus.SUCCESS
        self.last_error = None

    def _failed(self, exc: BaseException) -> None:
        ml = self._ml
        self.status = OffloadStatus.ERROR
        self.last_error = str(exc) or type(exc).__name__
        self.offload_errors_total += 1
        self._failures += 1
        delay_ms = offload_retry_delay_ms(self._failures)
        self._retry_at_ms = ml.clock.now_ms() + delay_ms
        log.warning("%s: offload failed (retry in %d ms): %s", ml.name, delay_ms, self.last_error)

    async def _offload_one(self, ledger_id: int) -> None:
        ml = self._ml
        offloader = ml.offloader
        seg = ml.ledgers.get(ledger_id)
        if seg is None or seg.closed_ms is None or seg.offloaded:
            return
        if offloader is None:
            raise OffloadNotConfigured(f"{ml.name}: offload is not configured")
        if seg.offload is not None:  # an attempt that never completed (crash or failure)
            leftover = self.offloader_of(seg.offload)
            if leftover is not None:
                await leftover.delete(seg.offload.uuid, ledger_id)
        attempt = OffloadContext(
            self._new_uuid(),
            driver_name=offloader.driver_name,
            driver_metadata=dict(offloader.driver_metadata),
        )
        seg.offload = attempt
        await ml.write_info()  # the attempt is findable before any object exists

        async def read(first: int, last: int) -> Sequence[bytes]:
            return await ml.read_range(ledger_id, first, last, read_ahead=False)

        started_s = ml.clock.monotonic_s()
        metadata = json.dumps(seg.to_json(), separators=(",", ":")).encode()
        await offloader.offload(attempt.uuid, ledger_id, seg.entries - 1, read, metadata)
        if ml.ledgers.get(ledger_id) is not seg or seg.offload is not attempt:
            # trimmed meanwhile: nothing will read these objects
            await offloader.delete(attempt.uuid, ledger_id)
            return
        attempt.complete = True
        attempt.timestamp_ms = ml.clock.now_ms()
        try:
            await ml.write_info()
        except BaseException:
            attempt.complete = False  # not durable: the next attempt starts over
            raise
        self.offloaded_bytes_total += seg.size_bytes
        self.offloaded_ledgers_total += 1
        self.offload_seconds_total += ml.clock.monotonic_s() - started_s
        log.info("%s: ledger %d offloaded (%s)", ml.name, ledger_id, attempt.uuid)

    async def _delete_bookie_copies(self) -> None:
        ml = self._ml
        if ml.offloader is None:  # nothing could read the offloaded copies now
            return
        due = bookie_copies_to_delete(ml.ledgers, ml.clock.now_ms(), ml.config)
        if not due:
            return
        segments = [s for s in (ml.ledgers.get(i) for i in due) if s is not None]
        for seg in segments:
            assert seg.offload is not None
            seg.offload.bookkeeper_deleted = True
        try:
            await ml.write_info()
        except BaseException:
            for seg in segments:
                assert seg.offload is not None
                seg.offload.bookkeeper_deleted = False
            raise
        for seg in segments:
            await ml.reads.forget(seg.ledger_id)
            try:
                await ml.storage.delete_ledger(seg.ledger_id)
            except MagnetarError as exc:  # leaked on the bookies, never needed again
                log.warning("%s: deleting ledger %d: %s", ml.name, seg.ledger_id, exc)
            self.bookie_copies_deleted_total += 1

    # --- reads and deletion ------------------------------------------------------------

    async def read(self, seg: LedgerSegment, first: int, last: int) -> Sequence[bytes]:
        """Entries ``first..last`` of an offloaded ledger from the object store. Raises a
        :class:`~magnetar.common.errors.MagnetarError` naming the ledger."""
        ml = self._ml
        offloader = None if seg.offload is None else self.offloader_of(seg.offload)
        if offloader is None or seg.offload is None:
            raise ManagedLedgerError(
                f"{ml.name}: ledger {seg.ledger_id} is offloaded and no offloader is configured"
            )
        started_s = ml.clock.monotonic_s()
        try:
            data = await offloader.read(seg.offload.uuid, seg.ledger_id, first, last)
        except MagnetarError:
            self.read_errors_total += 1
            raise
        self.read_latency.observe((ml.clock.monotonic_s() - started_s) * 1000)
        self.read_entries_total += len(data)
        self.read_bytes_total += sum(len(d) for d in data)
        return data

    def offloader_of(self, context: OffloadContext) -> Offloader | None:
        """The offloader of the driver ``context`` records: this ledger's own when it is
        that driver (or the context names none), else the owner's
        :attr:`~magnetar.managed_ledger.managed_ledger.ManagedLedger.offloader_source`
        opens it (the offload policy changed since); without a source, the current one."""
        ml = self._ml
        current = ml.offloader
        if not context.driver_name or (
            current is not None
            and current.driver_name == context.driver_name
            and dict(current.driver_metadata) == context.driver_metadata
        ):
            return current
        source = ml.offloader_source
        return current if source is None else source.for_context(context)

    async def delete_objects(self, seg: LedgerSegment) -> None:
        """Remove a trimmed ledger's objects (a failure is logged: they leak)."""
        offloader = None if seg.offload is None else self.offloader_of(seg.offload)
        if seg.offload is None or offloader is None:
            return
        try:
            await offloader.delete(seg.offload.uuid, seg.ledger_id)
        except MagnetarError as exc:
            log.warning("%s: deleting offloaded ledger %d: %s", self._ml.name, seg.ledger_id, exc)

    async def close(self) -> None:
        """Stop a running offload (its attempt stays recorded: the next owner deletes it)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
