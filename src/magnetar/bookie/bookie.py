"""A bookie: the storage node that ledgers are replicated to.

:class:`Bookie` owns one data directory (journal, entry logs, index, cookie) and serves the
bookie protocol (:mod:`magnetar.bookie_protocol`) on one TCP port. Life cycle:
``await Bookie.start()`` binds the port, checks the cookie (:mod:`magnetar.bookie.cookie`),
loads the index, replays the journal (logging ``replayed N entries from journal``), writes a
checkpoint, registers ``/ledgers/available/<bookie-id>`` (ephemeral) and starts serving;
``await stop()`` reverses it. The bookie id is ``host:port``.

What ``start`` builds, each with its own module and contract (:class:`_Parts`):

* :class:`~magnetar.bookie.request_processor.RequestProcessor` — answers requests (BookKeeper's
  ``BookieRequestProcessor``): adds, reads, fences; the guarantees are in its module;
* :class:`~magnetar.bookie.state.BookieState` — writable or read-only, and why; registration;
* :class:`~magnetar.bookie.checkpoint.Checkpointer` — checkpoints and write-cache
  backpressure (``SyncThread``);
* :class:`~magnetar.bookie.garbage_collector.GarbageCollector` — deleted ledgers' entries
  removed or compacted (``GarbageCollectorThread``; only with a metadata store);
* :class:`~magnetar.bookie.index_spill.IndexSpiller` — idle ledgers' indexes leave memory;
* :class:`~magnetar.bookie.disk_monitor.DiskMonitor` — free space looked at on a timer,
  storage faults retried (``LedgerDirsMonitor``).

A bookie on the same event loop as a ledger client (the standalone's) is also that client's
:class:`~magnetar.ledger.transport.LocalBookie`: whoever composes the process passes it in
(``LedgerClient(local_bookies=[bookie])``).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.bookie.checkpoint import Checkpointer
from magnetar.bookie.cookie import check_cookie
from magnetar.bookie.disk_check import DiskThresholds, default_check_every_bytes, disk_space
from magnetar.bookie.disk_monitor import DiskMonitor
from magnetar.bookie.garbage_collector import GarbageCollector
from magnetar.bookie.index_spill import IndexSpiller
from magnetar.bookie.journal import ADD_ENTRY, FENCE, Journal, JournalPosition, ReplayStats, replay
from magnetar.bookie.ledger_storage import LedgerStorage
from magnetar.bookie.request_processor import AddEntries, AddRuns, RequestProcessor
from magnetar.bookie.server import BookieConnection
from magnetar.bookie.service import BackgroundService
from magnetar.bookie.state import BookieState
from magnetar.bookie_protocol.codec import ENTRY_SIZE_MAX_BYTES
from magnetar.bookie_protocol.responder import Responder
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.frozen_struct import frozen_struct
from magnetar.metadata.store import MetadataStore

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Request

log = logging.getLogger("magnetar.bookie")


@dataclass(slots=True)
class BookieConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 3181
    advertised_host: str | None = None
    entry_size_max_bytes: int = ENTRY_SIZE_MAX_BYTES
    journal_file_size_max_bytes: int = 256 * 1024 * 1024
    journal_group_bytes_max: int = 4 * 1024 * 1024
    journal_group_wait_ms: float = 1.0
    """Pacing: a journal sync starts no sooner than this after the previous one (0: back to
    back) while the journal is loaded (else at once, see :mod:`magnetar.bookie.journal`).
    1 ms caps a loaded journal at ~1000 syncs/s: fewer hand-offs to the writer and
    fdatasyncs per entry."""
    journal_pending_bytes_max: int = 64 * 1024 * 1024
    entry_log_size_max_bytes: int = 512 * 1024 * 1024
    write_cache_max_bytes: int = 64 * 1024 * 1024
    """A checkpoint starts when the entry-log write buffers exceed this. Past a quarter more
    than this (adds go on while a checkpoint writes), acknowledgements through the in-process
    transport wait for the checkpoint in flight (BookKeeper throttles adds when its write
    cache is full): the callers' windows then hold further adds back."""
    checkpoint_interval_ms: int = 1_000
    """How often the entry-log buffers and the index are written and synced. Often, so each
    checkpoint is small: with journal and entry logs on one disk, a checkpoint's flush holds
    up the journal's syncs behind it (5 s worth at 20k entries/s took 100-400 ms to sync and
    doubled the p99 of publish latency; 1 s worth takes 20-40 ms)."""
    gc_interval_ms: int = 60_000
    index_spill_interval_ms: int = 5_000
    """How often the bookie looks for idle ledgers whose index can leave memory (0: never;
    see :mod:`magnetar.bookie.entry_index`)."""
    index_spill_idle_scans: int = 2
    """A ledger neither read nor written for this many looks in a row (10-15 s with the
    default interval) has its index moved to a spill file; the next use reads it back."""
    compaction_live_fraction_max: float = 0.5
    disk_usage_threshold: float = 0.95
    """Read-only once the disk's usage reaches this (BookKeeper's ``diskUsageThreshold``)."""
    disk_usage_lwm_threshold: float = 0.90
    """Writable again once usage is below this (``diskUsageLwmThreshold``)."""
    disk_free_min_bytes: int = 0
    """An absolute floor of free space on top of the usage thresholds (0: none)."""
    disk_check_interval_ms: int = 5_000
    disk_check_every_bytes: int | None = None
    """Also look at free space after this many bytes of entries written (None: a quarter of
    the free space at which the disk turns full; 0: only every ``disk_check_interval_ms``)."""
    storage_threads: int = 4
    journal_skip_invalid_records: bool = False
    """Start even if journal replay finds a damaged record followed by valid ones
    (BookKeeper's ``skipReplayJournalInvalidRecord``): the damaged bytes are skipped and
    logged. Off: the bookie refuses to start (:class:`~magnetar.bookie.errors.JournalCorrupt`)."""
    journal_reuse_files: bool = True
    """Keep a checkpointed journal file and write the next file over it (BookKeeper's
    ``journalReuseFiles``): the journal's syncs then write data only, without committing a
    growing file's size (see :mod:`magnetar.bookie.journal`). Costs the disk space of one
    journal file."""
    rack: str | None = None
    """Where the bookie stands, ``/region/rack``, written into its registration for the
    ledger clients' placement (a rack set through ``admin bookies set-bookie-rack``
    overrides it)."""
    extra: dict[str, str] = field(default_factory=dict)


@frozen_struct(kw_only=False)
class _Parts:
    """What :meth:`Bookie.start` builds: everything that needs the bound port (the bookie
    id), loaded storage or the started journal. Services in start order."""

    server: asyncio.Server
    state: BookieState
    storage: LedgerStorage
    journal: Journal
    checkpointer: Checkpointer
    processor: RequestProcessor
    gc: GarbageCollector | None
    spiller: IndexSpiller
    services: tuple[BackgroundService, ...]


class Bookie:
    """One storage node. Call :meth:`start` once, then :meth:`stop`.

    ``metadata`` may be ``None`` for a bookie used without a cluster (unit tests): then no
    registration, no cookie in the store, and no garbage collection.
    """

    def __init__(
        self, config: BookieConfig, metadata: MetadataStore | None, *, clock: Clock | None = None
    ) -> None:
        self.config = config
        self._metadata = metadata
        self._clock = clock or SystemClock()
        self._data_dir = Path(config.data_dir)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._storage_executor = ThreadPoolExecutor(
            config.storage_threads, thread_name_prefix="storage"
        )
        self._removal_executor = ThreadPoolExecutor(1, thread_name_prefix="log-removal")
        """Entry logs a checkpoint stopped referencing are removed here (see
        :class:`Checkpointer`)."""
        self._parts: _Parts | None = None
        self.bookie_id = ""
        self.port = 0
        self.replayed_entries = 0
        self.replay_stats = ReplayStats()
        self._stopped = False

    # -- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        server = await loop.create_server(
            self._new_connection, cfg.host, cfg.port, start_serving=False
        )
        try:
            self._parts = await self._build(server)
        except BaseException:
            server.close()
            raise
        parts = self._parts
        # Everything replayed is now in ledger storage: checkpoint it so the old journal
        # files can go.
        await parts.checkpointer.checkpoint()
        parts.state.look_at_disk()
        await parts.state.register()
        await server.start_serving()
        for service in parts.services:
            service.start()
        log.info("bookie %s serving (data dir %s)", self.bookie_id, self._data_dir)

    async def _build(self, server: asyncio.Server) -> _Parts:
        """Everything :meth:`start` builds once the port is bound (then :meth:`stop` owns
        it); nothing serves yet."""
        loop = asyncio.get_running_loop()
        cfg = self.config
        self.port = int(server.sockets[0].getsockname()[1])
        bookie_id = self.bookie_id = f"{cfg.advertised_host or cfg.host}:{self.port}"
        await check_cookie(self._data_dir, bookie_id, self._metadata)
        storage = LedgerStorage(self._data_dir, log_size_max_bytes=cfg.entry_log_size_max_bytes)
        journal_dir = self._data_dir / "journal"
        try:
            start_pos = await loop.run_in_executor(self._storage_executor, storage.load)
            journal_dir.mkdir(exist_ok=True)
            self.replayed_entries = await loop.run_in_executor(
                self._storage_executor, self._replay, storage, journal_dir, start_pos
            )
        except BaseException:  # IndexCorrupt, JournalCorrupt, OSError: the bookie stays down
            storage.close()
            raise
        log.info(
            "bookie %s: replayed %d entries from journal (from %s:%s)",
            bookie_id,
            self.replayed_entries,
            start_pos.file_id,
            start_pos.offset,
        )
        every_bytes = cfg.disk_check_every_bytes
        thresholds = DiskThresholds(
            cfg.disk_usage_threshold, cfg.disk_usage_lwm_threshold, cfg.disk_free_min_bytes
        )
        if every_bytes is None:
            full_line = thresholds.full_line_bytes(disk_space(self._data_dir).total_bytes)
            every_bytes = default_check_every_bytes(full_line)
        state = BookieState(
            bookie_id,
            self._data_dir,
            self._metadata,
            thresholds=thresholds,
            rack=cfg.rack,
            check_every_bytes=every_bytes,
        )
        journal = Journal(
            journal_dir,
            clock=self._clock,
            file_size_max_bytes=cfg.journal_file_size_max_bytes,
            group_bytes_max=cfg.journal_group_bytes_max,
            group_wait_ms=cfg.journal_group_wait_ms,
            pending_bytes_max=cfg.journal_pending_bytes_max,
            reuse_files=cfg.journal_reuse_files,
            on_write_failure=state.journal_write_failed,
        )
        journal.start()
        executor = self._storage_executor
        checkpointer = Checkpointer(
            storage,
            journal,
            executor,
            self._removal_executor,
            state,
            self._clock,
            interval_ms=cfg.checkpoint_interval_ms,
            write_cache_max_bytes=cfg.write_cache_max_bytes,
        )
        gc = (
            None
            if self._metadata is None
            else GarbageCollector(
                storage,
                checkpointer,
                self._metadata,
                executor,
                state,
                self._clock,
                interval_ms=cfg.gc_interval_ms,
                compaction_live_fraction_max=cfg.compaction_live_fraction_max,
            )
        )
        spiller = IndexSpiller(
            storage,
            executor,
            self._clock,
            interval_ms=cfg.index_spill_interval_ms,
            idle_scans=cfg.index_spill_idle_scans,
        )
        disk_monitor = DiskMonitor(
            state, checkpointer.checkpoint, self._clock, interval_ms=cfg.disk_check_interval_ms
        )
        services: list[BackgroundService] = [checkpointer, disk_monitor]
        if gc is not None:
            services.append(gc)
        if cfg.index_spill_interval_ms > 0:
            services.append(spiller)
        processor = RequestProcessor(
            storage,
            journal,
            executor,
            state,
            checkpointer,
            entry_size_max_bytes=cfg.entry_size_max_bytes,
        )
        return _Parts(
            server, state, storage, journal, checkpointer, processor, gc, spiller, tuple(services)
        )

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        parts = self._parts
        if parts is None:
            self._shutdown_executors()
            return
        parts.server.close()
        parts.processor.close_connections()
        for service in parts.services:
            await service.stop()
        parts.state.stop_reregistering()
        parts.checkpointer.release_waiters()
        await parts.journal.close()
        try:
            await parts.checkpointer.checkpoint()
        except OSError as exc:  # the journal keeps what it could not write
            log.error("bookie %s: last checkpoint failed: %s", self.bookie_id, exc)
        await parts.checkpointer.removals_done()
        await parts.state.unregister()
        parts.storage.close()
        self._shutdown_executors()

    def _shutdown_executors(self) -> None:
        self._storage_executor.shutdown(wait=True)
        self._removal_executor.shutdown(wait=True)

    def _new_connection(self) -> BookieConnection:
        # Connections come only once serving started, after the parts exist.
        processor = self._started().processor
        conn = BookieConnection(processor, self.config.entry_size_max_bytes + 64 * 1024)
        processor.attach(conn)
        return conn

    def _started(self) -> _Parts:
        parts = self._parts
        if parts is None:
            raise RuntimeError(f"bookie {self.bookie_id or '?'} is not started")
        return parts

    def _replay(self, storage: LedgerStorage, journal_dir: Path, start: JournalPosition) -> int:
        """Worker thread, before serving: re-apply journaled records to ledger storage.
        Raises :class:`~magnetar.bookie.errors.JournalCorrupt` (see :func:`replay`)."""
        n = 0
        stats = self.replay_stats
        for rec in replay(
            journal_dir, start, skip_invalid=self.config.journal_skip_invalid_records, stats=stats
        ):
            if rec.type == ADD_ENTRY:
                storage.add_entry(
                    rec.ledger_id, rec.entry_id, rec.last_add_confirmed, rec.checksum, rec.payload
                )
                n += 1
            elif rec.type == FENCE:
                storage.fence(rec.ledger_id)
        if stats.corrupt_spans:
            log.error(
                "bookie %s: journal replay skipped %d damaged spans (%d bytes)",
                self.bookie_id,
                stats.corrupt_spans,
                stats.corrupt_bytes,
            )
        return n

    # -- what operators, health checks, metrics and tests look at --------------------------

    @property
    def storage(self) -> LedgerStorage | None:
        """Ledger storage once started (None before)."""
        return None if self._parts is None else self._parts.storage

    @property
    def journal(self) -> Journal | None:
        """The journal once started (None before)."""
        return None if self._parts is None else self._parts.journal

    @property
    def readonly(self) -> bool:
        return self._parts is not None and self._parts.state.readonly

    @property
    def storage_fault(self) -> str | None:
        """Why storage cannot be written (a failed journal write or checkpoint), or None."""
        return None if self._parts is None else self._parts.state.storage_fault

    def write_problem(self) -> str | None:
        """Why this bookie takes no adds now (one line), or None when it is writable (or
        not started)."""
        return None if self._parts is None else self._parts.state.write_problem()

    async def set_readonly(self, readonly: bool) -> None:
        """Force read-only mode on or off (operators, tests); disk checks still apply."""
        await self._started().state.set_readonly(readonly)

    @property
    def checkpointer(self) -> Checkpointer:
        return self._started().checkpointer

    @property
    def processor(self) -> RequestProcessor:
        return self._started().processor

    async def checkpoint(self) -> None:
        """See :meth:`Checkpointer.checkpoint`; returns once the entry logs it stopped
        referencing are removed too (:meth:`Checkpointer.removals_done`)."""
        checkpointer = self._started().checkpointer
        await checkpointer.checkpoint()
        await checkpointer.removals_done()

    async def collect_garbage(self) -> int:
        """See :meth:`GarbageCollector.collect_garbage` (a bookie with a metadata store)."""
        gc = self._started().gc
        if gc is None:
            raise RuntimeError(f"bookie {self.bookie_id}: no garbage collection without a store")
        return await gc.collect_garbage()

    @property
    def gc_runs(self) -> int:
        gc = None if self._parts is None else self._parts.gc
        return 0 if gc is None else gc.runs

    async def spill_idle_indexes(self) -> int:
        """See :meth:`IndexSpiller.spill_idle_indexes`."""
        return await self._started().spiller.spill_idle_indexes()

    # -- LocalBookie (magnetar.ledger.transport): an in-process ledger client ---------------

    @property
    def serving(self) -> bool:
        """Started and not stopped: requests may be handed over."""
        return self._parts is not None and not self._stopped

    @property
    def add_entries(self) -> AddEntries:
        """:meth:`RequestProcessor.add_entries` itself (a caller binds it once: no call
        through the bookie per run of adds). Raises ``RuntimeError`` before start."""
        return self._started().processor.add_entries

    @property
    def add_runs(self) -> AddRuns:
        """:meth:`RequestProcessor.add_runs` itself (bound once, as :attr:`add_entries`).
        Raises ``RuntimeError`` before start."""
        return self._started().processor.add_runs

    def request(self, request: Request, payload: bytes, responder: Responder) -> None:
        """See :meth:`RequestProcessor.request`."""
        self._started().processor.request(request, payload, responder)

    def attach(self, responder: Responder) -> None:
        """Track an in-process responder like a connection: :meth:`stop` closes it."""
        self._started().processor.attach(responder)

    def detach(self, responder: Responder) -> None:
        self._started().processor.connection_closed(responder)
