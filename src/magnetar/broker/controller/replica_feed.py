"""What the controller's replica state machine is fed from the metadata store (autorecovery
in processes).

:class:`ReplicaFeed` is used by the controller loop (:mod:`.runner`) while this broker
leads. The loop hands it every notification under ``/ledgers`` (bookie registrations live
at ``/ledgers/available``, ledger metadata at ``/ledgers/L<id>``) and ``/autorecovery``
(workers and their outcomes), and calls :meth:`ReplicaFeed.sync` after each change and on
every tick. A sync feeds the :class:`~.election.ControllerElection`:

* the registered bookies, compared with the machine's: ``bookie_joined`` / ``bookie_left``;
  and the bookies running a replication worker (``/autorecovery/workers``):
  ``workers_changed``;
* the bookies' racks, at the first sync and after each change to the rack placement at
  ``/bookies`` (``admin bookies set-bookie-rack``; notified, so the loop watches it too):
  ``racks_changed``, so the next replacement chosen follows a rack set while every bookie
  is up (a joining bookie has the racks re-read as well);
* ledgers: the ones notified since the last sync are re-read (``ledger_changed``, or
  ``ledger_deleted`` if gone); a change to ``/ledgers``' children lists them and reads the
  new ones; every ``scan_interval_ms``, and at the first sync, every ledger is re-read (a
  full scan: ZooKeeper may coalesce watch events, and changes made while no controller
  watched are found). The machine ignores a version it already has;
* the workers' answers at ``/autorecovery/outcomes/L<id>``: each is fed
  (``replication_answered``, with the ledger's metadata read after it) and then deleted,
  at its version, so an answer written meanwhile is kept for the next sync. An undecodable
  answer is logged and deleted.

Per sync the work is bounded by the number of ledgers (scan), of ledgers notified and of
outcomes (at most one per ledger).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from magnetar.broker.controller.election import list_ledgers, read_ledger, registered_bookies
from magnetar.common.clock import Clock
from magnetar.ledger.metadata import AVAILABLE_PATH, LEDGERS_PATH
from magnetar.ledger.racks import RACKS_PATH
from magnetar.ledger.replication_task import (
    AUTORECOVERY_ROOT,
    OUTCOMES_PATH,
    WORKERS_PATH,
    ReplicationOutcome,
    ledger_id_of,
)
from magnetar.metadata import path as paths
from magnetar.metadata.store import BadVersion, MetadataStore, NotFound, Notification

if TYPE_CHECKING:
    from magnetar.broker.controller.election import ControllerElection

log = logging.getLogger(__name__)

DEFAULT_LEDGER_SCAN_INTERVAL_MS = 30_000
WATCHED_PREFIXES = (LEDGERS_PATH, AUTORECOVERY_ROOT, RACKS_PATH)
"""The prefixes whose notifications :meth:`ReplicaFeed.notified` wants."""


class ReplicaFeed:
    """Feeds one controller's replica state machine; make a new one per leadership."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        clock: Clock,
        scan_interval_ms: int = DEFAULT_LEDGER_SCAN_INTERVAL_MS,
    ) -> None:
        self.store = store
        self._clock = clock
        self.scan_interval_ms = scan_interval_ms
        self._next_scan_s: float | None = None
        """``None``: scan at the next sync."""
        self._dirty: set[int] = set()
        self._children_changed = True
        self._known: set[int] = set()
        """The ledger ids fed to the machine (created and not deleted)."""
        self._racks_changed = True
        """The rack placement may have changed since the racks were last read: at first
        too, since the election read them before the watch was set."""

    def notified(self, notification: Notification) -> bool:
        """Note a change (cheap; the reading happens in :meth:`sync`). ``False`` for a
        change under ``/ledgers`` that concerns no one (ledger id generation, cookies):
        no sync needed for it."""
        path = notification.path
        if paths.is_under(path, RACKS_PATH):
            self._racks_changed = True
        elif path == LEDGERS_PATH:
            self._children_changed = True
        elif paths.parent(path) == LEDGERS_PATH and ledger_id_of(paths.name(path)) is not None:
            self._dirty.add(int(paths.name(path)[1:]))
        elif paths.is_under(path, LEDGERS_PATH) and not paths.is_under(path, AVAILABLE_PATH):
            return False
        return True

    async def sync(self, election: ControllerElection) -> None:
        """Feed what changed; raises what the election's event methods raise
        (:class:`ControllerDeposed` once deposed)."""
        if self._racks_changed:
            # cleared before reading: a change made during the read is read next time
            self._racks_changed = False
            await election.racks_changed()
        live = await registered_bookies(self.store)
        known = election.replicas.live_bookies
        for bookie in sorted(live - known):
            await election.bookie_joined(bookie)
        for bookie in sorted(known - live):
            await election.bookie_left(bookie)
        try:
            workers = frozenset(await self.store.children(WORKERS_PATH))
        except NotFound:
            workers = frozenset()
        if workers != election.replicas.workers:
            await election.workers_changed(workers)

        now_s = self._clock.monotonic_s()
        if self._next_scan_s is None or now_s >= self._next_scan_s:
            self._next_scan_s = now_s + self.scan_interval_ms / 1000
            self._children_changed = False
            self._dirty.clear()
            ids = await list_ledgers(self.store)
            to_read = ids | self._known
        else:
            to_read = set(self._dirty)
            self._dirty.clear()
            if self._children_changed:
                self._children_changed = False
                ids = await list_ledgers(self.store)
                to_read |= (ids - self._known) | (self._known - ids)
        for ledger_id in sorted(to_read):
            await self._feed_ledger(election, ledger_id)

        try:
            names = await self.store.children(OUTCOMES_PATH)
        except NotFound:
            names = []
        for name in names:
            await self._feed_outcome(election, name)

    async def _feed_ledger(self, election: ControllerElection, ledger_id: int) -> None:
        try:
            found = await read_ledger(self.store, ledger_id)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ledger %d: undecodable metadata, not watched: %s", ledger_id, exc)
            return
        if found is None:
            if ledger_id in self._known:
                self._known.discard(ledger_id)
                await election.ledger_deleted(ledger_id)
            return
        self._known.add(ledger_id)
        await election.ledger_changed(*found)

    async def _feed_outcome(self, election: ControllerElection, name: str) -> None:
        path = paths.join(OUTCOMES_PATH, name)
        try:
            got = await self.store.get(path)
        except NotFound:
            return
        try:
            outcome = ReplicationOutcome.from_bytes(got.value)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ignoring the undecodable replication outcome %s: %s", path, exc)
        else:
            ledger_id = outcome.task.ledger_id
            try:
                current = await read_ledger(self.store, ledger_id)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("ledger %d: undecodable metadata: %s", ledger_id, exc)
                current = None
            if current is None:
                self._known.discard(ledger_id)
            else:
                self._known.add(ledger_id)
            await election.replication_answered(outcome, current)
        with contextlib.suppress(NotFound, BadVersion):
            await self.store.delete(path, got.stat.version)
