"""The managed ledger's background work: the I/O shell around the pure planner
(:mod:`~magnetar.managed_ledger.maintenance`).

One task per managed ledger ticks every ``min(maintenance_interval_ms,
cursor_persist_interval_ms)`` on the injected clock while the ledger holds anything to look
after; once a round leaves it *quiet* (no entry in any ledger, at most its one empty open
ledger, no cached entry, every durable cursor persisted, no roll under way) no round could
find work until something happens, so the task waits without a timer until
:meth:`Maintainer.wake` (an append is stored, a rollover is requested, a cursor is opened or
deleted) and then ticks again; a managed ledger already quiet when opened (a new one)
starts that way, without a task. An idle, drained topic thus costs no CPU. Each round
persists the durable cursors that are due (every ``cursor_persist_interval_ms``); every
``maintenance_interval_ms`` it also rolls over by age or inactivity, applies message TTL
(reading publish times for the search inside a ledger), checks backlog quotas, trims
consumed ledgers (metadata first, then the ledgers and their offloaded objects: a crash
leaks ledgers, never loses needed ones), starts due offloads and deletes offloaded ledgers'
bookie copies (:mod:`~magnetar.managed_ledger.offload_manager`), and evicts the cache.
Cursors that cannot be stored (no bookie takes writes: every disk full) do not stop the rest
of the round, so consumed ledgers are still trimmed and a full disk gets room again. Fencing
ends the task; other errors are logged once (again when the error changes, and a line when a
round works again) and the next round tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.config import BacklogQuotaPolicy
from magnetar.managed_ledger.errors import ManagedLedgerFenced
from magnetar.managed_ledger.maintenance import (
    backlog_quota_on,
    eviction_step,
    ledgers_to_delete,
    over_backlog_quota,
    ttl_search_start,
    ttl_target,
)
from magnetar.managed_ledger.retention import ledgers_expired_by_ttl
from magnetar.managed_ledger.state import State

if TYPE_CHECKING:
    from magnetar.managed_ledger.managed_ledger import ManagedLedger, PublishTimeOf

log = logging.getLogger(__name__)


class Maintainer:
    """The background work of one managed ledger (its ``maintainer``)."""

    __slots__ = (
        "_failure",
        "_last_maintenance_s",
        "_last_persist_s",
        "_ml",
        "_parked",
        "_publish_time_of",
        "_stopped",
        "_task",
        "quota_exceeded",
    )

    def __init__(self, ml: ManagedLedger, publish_time_of: PublishTimeOf | None) -> None:
        self._ml = ml
        self._publish_time_of = publish_time_of
        self.quota_exceeded = False
        """Whether a durable cursor was over the backlog quota at the last check."""
        self._last_persist_s = 0.0
        self._last_maintenance_s = 0.0
        self._task: asyncio.Task[None] | None = None
        self._parked = False
        """Whether the task ended quiet, for :meth:`wake` to start it again."""
        self._stopped = False
        self._failure: str | None = None
        """The last round's error, logged once until it changes or a round works."""

    def start(self) -> None:
        """Start the background task (:meth:`run`)."""
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"ml-{self._ml.name}")

    def start_or_park(self) -> None:
        """At open: start the background task, or, when the managed ledger is already
        :meth:`quiet` (as a newly created one is), leave it parked as a round would: no
        round could find work before something wakes it (:meth:`wake`), so no task, timer
        or round is spent on it until then."""
        if self.quiet():
            self._parked = True
        else:
            self.start()

    async def stop(self) -> None:
        """Stop the background task for good (the managed ledger is closing)."""
        self._stopped = True
        self._parked = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """The periodic task: a round per tick until the managed ledger is closed or fenced,
        or until a round leaves it :meth:`quiet`: the task then ends (an idle managed ledger
        holds no task or timer) and :meth:`wake` starts the next one."""
        ml = self._ml
        cfg = ml.config
        tick_s = max(min(cfg.maintenance_interval_ms, cfg.cursor_persist_interval_ms), 1) / 1000
        while ml.state is not State.CLOSED and ml.fence_cause is None:
            await ml.clock.sleep(tick_s)
            try:
                await self.maintain()
            except ManagedLedgerFenced:
                return
            except MagnetarError as exc:
                if str(exc) != self._failure:  # once, not every tick while it lasts
                    log.warning("%s: maintenance failed: %s (retried every round)", ml.name, exc)
                    self._failure = str(exc)
                continue
            if self._failure is not None:
                log.info("%s: maintenance works again", ml.name)
                self._failure = None
            if self.quiet():
                self._parked = True
                self._task = None
                return

    def quiet(self) -> bool:
        """Whether no maintenance round can find work before something happens to the
        managed ledger: it is open with one empty ledger (or none), holds no entry and no
        cached entry, and every durable cursor's state is persisted. Nothing then depends
        on time (rollover by age or inactivity, TTL, quotas, retention and offload all need
        entries)."""
        ml = self._ml
        if ml.state is not State.OPEN or ml.writer is None or ml.rollover.task is not None:
            return False
        if len(ml.ledgers) > 1 or ml.ledgers.total_entries or len(ml.cache):
            return False
        return all(c.persisted or not c.durable for c in ml.cursors.values())

    def wake(self) -> None:
        """Something happened that a round may have to look after: if the task ended quiet,
        a new one ticks again (its first round one tick from now). Cheap when it did not."""
        if self._parked and not self._stopped:
            self._parked = False
            self.start()

    def wake_unless_quiet(self) -> None:
        """:meth:`wake`, for a change already applied (a cursor opened) that may have left
        the managed ledger :meth:`quiet`: then no round could find work, and none is
        started."""
        if not self.quiet():
            self.wake()

    async def maintain(self, *, force: bool = False) -> None:
        """See :meth:`ManagedLedger.maintain`."""
        ml = self._ml
        if ml.state is State.CLOSED or ml.fence_cause is not None:
            return
        now_s = ml.clock.monotonic_s()
        cfg = ml.config
        unpersisted: MagnetarError | None = None
        if force or now_s - self._last_persist_s >= cfg.cursor_persist_interval_ms / 1000:
            self._last_persist_s = now_s
            try:
                await self.persist_cursors()
            except ManagedLedgerFenced:
                raise
            except MagnetarError as exc:
                # No bookie to take a cursor ledger's entry (all full, say): the round goes
                # on. Trimming consumed ledgers is how a full disk gets room again; a crash
                # before the cursor is stored only redelivers acknowledged messages of the
                # ledgers still there, as Pulsar's cursor does.
                unpersisted = exc
        if force or now_s - self._last_maintenance_s >= cfg.maintenance_interval_ms / 1000:
            self._last_maintenance_s = now_s
            if ml.rollover.due() or ml.rollover.inactive():
                ml.rollover.request()
            await self.apply_ttl()
            self.apply_backlog_quota()
            await self.trim()
            await ml.offloads.maintain()
            self.evict_cache()
        if unpersisted is not None:
            raise unpersisted

    async def persist_cursors(self) -> None:
        """Store every durable cursor that changed; one that fails does not keep the others
        from being stored (the first error is raised after)."""
        first_error: MagnetarError | None = None
        for cursor in list(self._ml.cursors.values()):
            if cursor.durable:
                try:
                    await cursor.persist()
                except ManagedLedgerFenced:
                    raise
                except MagnetarError as exc:
                    first_error = first_error or exc
        if first_error is not None:
            raise first_error

    async def apply_ttl(self) -> None:
        """See :meth:`ManagedLedger.apply_ttl`."""
        ml = self._ml
        ttl_ms = ml.config.message_ttl_ms
        if ttl_ms < 0 or not ml.cursors:
            return
        now_ms = ml.clock.now_ms()
        target = ledgers_expired_by_ttl(ml.ledgers, now_ms, ttl_ms)
        publish_time_of = self._publish_time_of
        if publish_time_of is not None:
            cutoff_ms = now_ms - ttl_ms
            after = ttl_search_start(target, (c.state.mark_delete for c in ml.cursors.values()))

            def kept(data: bytes) -> bool:
                try:
                    return publish_time_of(data) >= cutoff_ms
                except MagnetarError:
                    return True

            first_kept = await ml.reads.first_entry_where(kept, after)
            target = ttl_target(ml.ledgers, target, after, first_kept)
        if target is None:
            return
        listener = ml.expiry_listener
        for name, cursor in ml.cursors.items():
            if cursor.state.mark_delete < target:
                before = cursor.backlog_messages
                cursor.state.ack_cumulative(target)
                expired = before - cursor.backlog_messages
                if listener is not None and expired > 0:
                    listener(name, expired)

    def apply_backlog_quota(self) -> None:
        """See :meth:`ManagedLedger.apply_backlog_quota`."""
        ml = self._ml
        cfg = ml.config
        if not backlog_quota_on(cfg):
            self.quota_exceeded = False
            return
        now_ms = ml.clock.now_ms()
        ledgers = ml.ledgers
        evict = cfg.backlog_quota_policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
        exceeded = False
        for cursor in ml.cursors.values():
            state = cursor.state
            if not cursor.durable or not over_backlog_quota(state, ledgers, now_ms, cfg):
                continue
            if not evict:
                exceeded = True
                continue
            while over_backlog_quota(state, ledgers, now_ms, cfg):
                step = eviction_step(state, ledgers)
                if step is None:
                    break
                state.ack_cumulative(step)
        self.quota_exceeded = exceeded

    async def trim(self) -> list[int]:
        """See :meth:`ManagedLedger.trim`."""
        ml = self._ml
        doomed = ledgers_to_delete(
            ml.ledgers,
            [c.state.mark_delete for c in ml.cursors.values() if c.durable],
            ml.clock.now_ms(),
            ml.config,
        )
        if not doomed:
            return []
        removed = ml.ledgers.remove_ledgers(set(doomed))
        try:
            await ml.write_info()
        except ManagedLedgerFenced:
            raise
        except MagnetarError:
            ml.ledgers.restore_front(removed)  # the next round tries again
            raise
        for cursor in ml.cursors.values():
            cursor.state.on_ledgers_trimmed()
        for seg in removed:
            # no cache eviction here: every entry of a trimmed ledger is behind every
            # durable cursor, so the gradual eviction below the readers drops them
            await ml.reads.forget(seg.ledger_id)
            if seg.on_bookies:
                await ml.storage.delete_ledger(seg.ledger_id)
            await ml.offloads.delete_objects(seg)
        return doomed

    def evict_cache(self) -> None:
        """See :meth:`ManagedLedger.evict_cache`."""
        ml = self._ml
        ml.cache.evict_older_than(
            int(ml.clock.monotonic_s() * 1000), ml.config.cache_eviction_age_ms
        )
        if not ml.cursors:
            ml.cache.evict_before_gradually(ml.ledgers.end_position)
            return
        ml.cache.evict_before_gradually(ml.slowest_read_position())
