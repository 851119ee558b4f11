"""The roll step: close the current ledger and start the next one.

One rollover runs at a time (:attr:`Rollover.task`); appends queue meanwhile. The next
ledger is created while the current one drains (its in-flight adds finish or fail) and
closes: its metadata writes were the longest step of a rollover (2-13 ms of the 3-30
measured at 40 000 appends a second, a rollover every 1.25 s), and appends wait for the
whole of it. Its id is still above the current one's (ids only grow). Then the ledger list
is written (compare-and-set) and the new ledger takes the queued appends.

Failures: a ledger that cannot be closed is kept (``unclosed``) and closed before any new
one starts (the log must not move past a ledger whose metadata still says OPEN: readers
would see none of its entries); while closing, and until it is closed, its entries are
read through that handle (opened apart, its end would be the last confirmation the bookies
heard, one entry short of its writer's); a ledger created for a rollover that did not happen is
deleted. Any failure fails the queued appends (never left hanging) and, unless the managed
ledger was fenced, counts as a storage failure (state ``WRITE_FAILED``, see
:mod:`~magnetar.managed_ledger.add_pipeline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.errors import ManagedLedgerError, ManagedLedgerFenced
from magnetar.managed_ledger.ledger_list import LedgerSegment
from magnetar.managed_ledger.maintenance import inactive_too_long, rollover_due
from magnetar.managed_ledger.state import ROLL_STARTS, State
from magnetar.managed_ledger.storage import LedgerWriter, is_fenced

if TYPE_CHECKING:
    from magnetar.managed_ledger.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)


class Rollover:
    """The rollovers of one managed ledger (its ``rollover``)."""

    __slots__ = (
        "_background",
        "_ml",
        "task",
        "unclosed",
    )

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self.task: asyncio.Task[None] | None = None
        """The rollover under way (None: none)."""
        self.unclosed: LedgerWriter | None = None
        """The previous ledger while it is being closed, and after closing it failed
        (closed before any new one starts); its entries are read through it meanwhile."""
        self._background: set[asyncio.Future[None]] | None = None
        """Deletions of unused ledgers in progress (made at the first: an empty set is
        216 B, and most managed ledgers never have one)."""

    def due(self) -> bool:
        """Whether the current ledger should roll over by age, entries or size."""
        ml = self._ml
        if ml.writer is None:
            return False
        return rollover_due(ml.ledgers.last_segment, ml.clock.now_ms(), ml.config)

    def inactive(self) -> bool:
        """Whether the current ledger holds entries and took none for
        ``ledger_inactive_rollover_ms`` (checked by maintenance only, not per append)."""
        ml = self._ml
        if ml.writer is None:
            return False
        return inactive_too_long(ml.ledgers.last_segment, ml.clock.now_ms(), ml.config)

    def request(self, *, start_new: bool = True) -> None:
        """Start a rollover unless one runs (``start_new=False``: only close the current
        ledger). Nothing happens once the managed ledger is fenced or closed."""
        ml = self._ml
        if self.task is None and ml.fence_cause is None and ml.state is not State.CLOSED:
            if ml.state in ROLL_STARTS:
                ml.state = State.ROLLING
            self.task = asyncio.create_task(self._run(start_new))

    async def _run(self, start_new: bool) -> None:
        ml = self._ml
        try:
            await self.roll(start_new=start_new)
            if ml.state is State.ROLLING:
                ml.state = State.OPEN if start_new else State.WRITE_FAILED
            if start_new:
                ml.adds.write_error = None
        except Exception as exc:  # whatever failed, queued appends must not hang
            if isinstance(exc, MagnetarError):
                log.warning("%s: rollover failed: %s", ml.name, exc)
            else:
                log.exception("%s: rollover failed", ml.name)
            if isinstance(exc, ManagedLedgerFenced):
                err: ManagedLedgerError = exc
            else:
                err = ml.adds.storage_failed(exc)
                if ml.state is State.ROLLING:
                    ml.state = State.WRITE_FAILED
            ml.adds.fail_queued(err)
        finally:
            self.task = None
            ml.adds.pump()
            ml.maintainer.wake()

    async def roll(self, *, start_new: bool = True) -> None:
        """Close the current ledger (after its in-flight adds finish) and start a new one
        (``start_new=False``: only close it). Raises :class:`ManagedLedgerFenced` when
        another owner took over, :class:`ManagedLedgerError` when the current ledger could
        not be closed, or the storage's error when the new one could not be created."""
        ml = self._ml
        created: asyncio.Future[LedgerWriter] | None = None
        if start_new:
            created = asyncio.ensure_future(self.new_ledger())
        try:
            await self._close_current()
            if created is None:
                return
            writer = await created
        except BaseException:
            if created is not None:  # (the callback runs at once if it is done)
                created.add_done_callback(self._discard_created)
            raise
        ml.ledgers.add_ledger(LedgerSegment(writer.ledger_id, created_ms=ml.clock.now_ms()))
        try:
            await ml.write_info()
        except ManagedLedgerFenced:
            await self.delete_unused(writer)
            raise
        ml.writer = writer

    async def new_ledger(self) -> LedgerWriter:
        """A new ledger of the managed ledger's storage, with its properties. Raises the
        storage's errors."""
        ml = self._ml
        props = dict(ml.config.ledger_properties)
        props.setdefault("managed-ledger", ml.name)
        return await ml.storage.create_ledger(props)

    def _discard_created(self, created: asyncio.Future[LedgerWriter]) -> None:
        """Done-callback of a ledger created for a rollover that did not happen."""
        if created.cancelled() or created.exception() is not None:
            return
        task = asyncio.ensure_future(self.delete_unused(created.result()))
        if self._background is None:
            self._background = set()
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def delete_unused(self, writer: LedgerWriter) -> None:
        """Close and delete a ledger that never made it into the ledger list."""
        with contextlib.suppress(Exception):
            await writer.close()
            await self._ml.storage.delete_ledger(writer.ledger_id)

    async def _close_current(self) -> None:
        """Close the current ledger once its in-flight adds are done (they finish or fail
        first); the log must not move past a ledger whose metadata still says OPEN."""
        ml = self._ml
        adds = ml.adds
        while adds.inflight and not adds.inflight_done():
            await adds.wait_add_progress()
        old = ml.writer or self.unclosed
        ml.writer = None
        if old is not None:
            self.unclosed = old  # read through until closed (``LogReader``)
            try:
                await old.close()
            except Exception as exc:
                if is_fenced(exc):
                    ml.fence(exc)
                    raise ManagedLedgerFenced(f"{ml.name}: fenced on close") from exc
                # Its metadata still says OPEN: readers would see none of its entries
                # (acknowledged ones included), so the log must not move past it. The next
                # rollover tries again.
                raise ManagedLedgerError(
                    f"{ml.name}: closing ledger {old.ledger_id} failed: {exc}"
                ) from exc
            self.unclosed = None
        last = ml.ledgers.last_segment
        if last is not None and last.closed_ms is None:
            last.closed_ms = ml.clock.now_ms()
