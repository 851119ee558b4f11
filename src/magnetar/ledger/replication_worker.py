"""The replication worker of a bookie process (autorecovery): runs the controller's
re-replication tasks that name this bookie as their target.

On start it registers the ephemeral ``/autorecovery/workers/<bookie id>`` (the controller
makes only registered workers' bookies targets; a bookie run with ``--no-autorecovery`` is
never one). The tasks arrive through the metadata store (:mod:`magnetar.ledger.replication_task`): the
worker watches the controller's replica records at ``/controller_state/ledgers`` and
re-reads them on every change and at least every ``rescan_interval_ms`` (watch events may
coalesce). For each record whose task names this bookie it runs
:func:`~magnetar.ledger.rereplication.rereplicate_fragment`, at most
``tasks_in_flight_max`` at once, then writes a :class:`ReplicationOutcome` to
``/autorecovery/outcomes/L<id>``. A task whose record no longer asks for it (the controller
gave up on it, reassigned it or the ledger healed) is cancelled; a cancelled copy changes no
metadata unless its final compare-and-set already went through, which the controller then
sees as a metadata change.

Why a stale task cannot hurt: records are written only in the controller's epoch-fenced
transaction, so a deposed controller cannot issue a task at all; and whoever asked, the
copy names the target in the metadata only after every entry is on it, by compare-and-set,
and only if the fragment still names the missing bookie at that index.

Crashes: the record outlives both sides. A restarted worker finds its task again and copies
it anew (entries already on the target are overwritten, harmlessly); a new controller
resumes the record and, if it restamps the same work, accepts this worker's answer to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError
from magnetar.common.task_crash import report_crash
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.replication_task import (
    OUTCOMES_PATH,
    REPLICA_RECORDS_PATH,
    WORKERS_PATH,
    ReplicateFragment,
    ReplicationOutcome,
    ledger_id_of,
    record_name,
    task_of_record,
)
from magnetar.ledger.rereplication import rereplicate_fragment
from magnetar.metadata import path as paths
from magnetar.metadata.notifications import NotificationStream
from magnetar.metadata.store import MetadataStore, MetadataStoreError, NodeExists, NotFound

log = logging.getLogger(__name__)

DEFAULT_TASKS_IN_FLIGHT_MAX = 2
DEFAULT_RESCAN_INTERVAL_MS = 5_000
OUTCOME_WRITE_ATTEMPTS_MAX = 30
OUTCOME_RETRY_DELAY_MS = 1_000


class ReplicationWorker:
    """One bookie's worker. ``client`` is a ledger client of its own (TCP to the other
    bookies), owned by the caller, as is ``store``."""

    def __init__(
        self,
        store: MetadataStore,
        bookie_id: str,
        client: LedgerClient,
        *,
        clock: Clock,
        tasks_in_flight_max: int = DEFAULT_TASKS_IN_FLIGHT_MAX,
        rescan_interval_ms: int = DEFAULT_RESCAN_INTERVAL_MS,
    ) -> None:
        if tasks_in_flight_max < 1:
            raise ValueError("tasks_in_flight_max must be at least 1")
        self.store = store
        self.bookie_id = bookie_id
        self.client = client
        self._clock = clock
        self.tasks_in_flight_max = tasks_in_flight_max
        self.rescan_interval_ms = rescan_interval_ms
        self._running: dict[int, tuple[ReplicateFragment, asyncio.Task[None]]] = {}
        self._answered: dict[int, ReplicateFragment] = {}
        """Tasks answered whose record still shows them (the controller has not read the
        answer yet): not run again."""
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.completed = 0
        """Tasks answered with success (for metrics and tests)."""
        self.failed = 0

    @property
    def tasks_in_flight(self) -> int:
        return len(self._running)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="replication-worker")
        self._task.add_done_callback(report_crash(log))

    async def close(self) -> None:
        """Stop watching, cancel the copies in flight (bounded: cancellation only) and
        deregister."""
        tasks = [t for _, t in self._running.values()]
        if self._task is not None:
            tasks.append(self._task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._running.clear()
        with contextlib.suppress(MetadataStoreError):
            await self.store.delete(paths.join(WORKERS_PATH, self.bookie_id))

    async def _run(self) -> None:
        while True:
            try:
                for directory in (REPLICA_RECORDS_PATH, OUTCOMES_PATH):
                    with contextlib.suppress(NodeExists):
                        await self.store.create(directory, b"")
                await self._register()
                break
            except MetadataStoreError as exc:
                log.warning("replication worker: registering failed (retried): %s", exc)
                await self._clock.sleep(self.rescan_interval_ms / 1000)
        stream = self.store.notifications(REPLICA_RECORDS_PATH)
        pump = asyncio.create_task(self._pump(stream))
        try:
            await stream.wait_ready()
            while True:
                self._changed.clear()
                try:
                    await self._scan()
                except MetadataStoreError as exc:
                    log.warning("replication worker: reading tasks failed (retried): %s", exc)
                timer = self._clock.call_later(self.rescan_interval_ms / 1000, self._changed.set)
                try:
                    await self._changed.wait()
                finally:
                    timer.cancel()
        finally:
            stream.close()
            pump.cancel()

    async def _register(self) -> None:
        """Create the worker's ephemeral registration. A node still held by this bookie's
        previous session (a restart within its session timeout) is replaced, as the bookie
        replaces its own registration: one bookie id is one process."""
        path = paths.join(WORKERS_PATH, self.bookie_id)
        try:
            await self.store.create(path, b"", ephemeral=True)
        except NodeExists:
            with contextlib.suppress(NotFound):
                await self.store.delete(path)
            await self.store.create(path, b"", ephemeral=True)

    async def _pump(self, stream: NotificationStream) -> None:
        async for _ in stream:
            self._changed.set()

    async def _scan(self) -> None:
        """Start the tasks naming this bookie, within the bound; cancel the ones no record
        asks for any more."""
        wanted: dict[int, ReplicateFragment] = {}
        try:
            names = await self.store.children(REPLICA_RECORDS_PATH)
        except NotFound:
            names = []
        for name in names:
            ledger_id = ledger_id_of(name)
            if ledger_id is None:
                continue
            try:
                got = await self.store.get(paths.join(REPLICA_RECORDS_PATH, name))
                task = task_of_record(got.value)
            except NotFound:
                continue
            except (ValueError, KeyError, TypeError) as exc:
                log.error("replication worker: ignoring the record %s: %s", name, exc)
                continue
            if task is not None and task.target_bookie == self.bookie_id:
                wanted[ledger_id] = task
        for ledger_id, (task, running) in list(self._running.items()):
            if ledger_id not in wanted or not wanted[ledger_id].same_work(task):
                log.info("replication worker: %s no longer asked for, cancelled", task)
                running.cancel()
                del self._running[ledger_id]
        for ledger_id, task in list(self._answered.items()):
            if ledger_id not in wanted or not wanted[ledger_id].same_work(task):
                del self._answered[ledger_id]
        for ledger_id, task in sorted(wanted.items()):
            if len(self._running) >= self.tasks_in_flight_max:
                break  # the next scan (at the latest when one ends) starts the rest
            if ledger_id in self._running or ledger_id in self._answered:
                continue
            running = asyncio.create_task(self._execute(task), name=f"replicate-{ledger_id}")
            running.add_done_callback(report_crash(log))
            self._running[ledger_id] = (task, running)

    async def _execute(self, task: ReplicateFragment) -> None:
        log.info("replication worker: copying %s", task)
        try:
            await rereplicate_fragment(
                self.client,
                task.ledger_id,
                task.first_entry,
                task.bookie_index,
                task.missing_bookie,
                task.target_bookie,
            )
        except (MagnetarError, ValueError) as exc:
            outcome = ReplicationOutcome(task, ok=False, error=f"{type(exc).__name__}: {exc}")
            log.warning("replication worker: %s failed: %s", task, outcome.error)
        else:
            outcome = ReplicationOutcome(task, ok=True)
            log.info("replication worker: %s done", task)
        path = paths.join(OUTCOMES_PATH, record_name(task.ledger_id))
        for attempt in range(1, OUTCOME_WRITE_ATTEMPTS_MAX + 1):
            try:
                await self.store.put(path, outcome.to_bytes())
                break
            except MetadataStoreError as exc:
                # Unanswered, the task counts as failed at the controller's task timeout.
                log.warning(
                    "replication worker: writing the outcome of %s failed (try %d): %s",
                    task,
                    attempt,
                    exc,
                )
                await self._clock.sleep(OUTCOME_RETRY_DELAY_MS / 1000)
        if outcome.ok:
            self.completed += 1
        else:
            self.failed += 1
        self._answered[task.ledger_id] = task
        entry = self._running.get(task.ledger_id)
        if entry is not None and entry[0] is task:
            del self._running[task.ledger_id]
        self._changed.set()
