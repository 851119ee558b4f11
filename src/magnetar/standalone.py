"""``magnetar standalone``: the broker of :mod:`magnetar.broker_server` plus an embedded
metadata store, one in-process bookie, a readiness endpoint and (unless turned off) one
Functions Worker, all in one process and one event loop.

The worker (id ``standalone``, advertised as the HTTP address) serves its REST API
(``/admin/v3/functions|sources|sinks``, ``/admin/v2/worker/...``) on the standalone's HTTP
server. It joins its cluster in the background once the broker serves, so the ready line is
not delayed; until it has joined, its routes answer 503.

The ready line means the binary protocol and the HTTP port accept connections; the admin
app (FastAPI's imports and routes, the worker's among them) is built when the first HTTP
request comes (:mod:`magnetar.broker_server`), which waits for it instead of failing: an
idle standalone does without the web framework's memory. The worker's own imports (the
client library, the runtime) follow the ready line.

Data lives under ``data_dir``: ``metadata.db`` (the embedded SQLite metadata store, unless
``metadata_url`` names a shared one such as ZooKeeper) and ``bookie/`` (journal, entry
logs, index). Restarting on the same directory keeps every topic, message and subscription
position; a start that fails removes the directory if it created it. Ledgers use the
broker's ensemble and quorums (1/1/1 by default: one bookie; a SEND_RECEIPT still means the
entry is fsynced in that bookie's journal); larger ones need the bookies of other processes
registered in a shared metadata store.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import logging
import shutil
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.bookie import Bookie, BookieConfig
from magnetar.broker_server import (
    APP_AFTER_WAIT_S,
    BrokerServer,
    BrokerServerConfig,
    HostsBrokerServer,
    serve,
)
from magnetar.common.errors import MagnetarError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.common.names import TopicName
from magnetar.common.shutdown import STOP_TIMEOUT_S, stop_step
from magnetar.metadata import MetadataStore, connect

if TYPE_CHECKING:
    from magnetar.functions.service_slot import ServiceSlot
    from magnetar.functions.worker_service import WorkerService

log = logging.getLogger(__name__)


@frozen_struct(kw_only=False)
class StandaloneConfig:
    data_dir: Path = Path("data")
    server: BrokerServerConfig = field(default_factory=BrokerServerConfig)
    """The broker, its HTTP API and what its own clients present (the Functions Worker's
    credentials: with authorization on, a super user's)."""
    bookie_port: int | None = None
    """The in-process bookie's port. None: a free port on the first start, then the same
    one (it is recorded in the data directory: the bookie's id, host:port, is in every
    ledger's ensemble, so it must keep it across restarts)."""
    bookie_disk_free_min_bytes: int = 0
    """An absolute floor of free space for the bookie, on top of its usage thresholds (0.95,
    writable again under 0.90)."""
    bookie_disk_check_interval_ms: int = 1_000
    """How often the bookie checks free space and, when read-only after a storage fault,
    retries a checkpoint to turn writable again."""
    bookie_write_cache_size_mb: int = 16
    """MiB of written entries the bookie buffers before a checkpoint writes them to its
    entry logs (BookKeeper's ``dbStorage_writeCacheMaxSizeMb``; a checkpoint also runs
    every second). Smaller than a dedicated bookie's 64 MiB: the standalone's broker caches
    the same entries for tailing reads, in the same process."""
    bookie_gc_interval_ms: int = 60_000
    """How often the bookie garbage-collects deleted ledgers (BookKeeper's ``gcWaitTime``):
    forgets their entries and removes or compacts the entry logs that held them."""
    metadata_url: str | None = None
    """``None``: the embedded SQLite store under ``data_dir``. Otherwise a store to share
    (``zk://host:port/chroot``), where bookies of other processes register too, so ledgers
    can span them (``broker.ensemble_size`` > 1). The standalone still owns every topic
    itself: it runs no controller, so no ``magnetar broker`` may share that store."""
    metadata_session_timeout_s: float = 10.0
    bookie_journal_skip_invalid_records: bool = False
    """See :attr:`BookieConfig.journal_skip_invalid_records`."""
    bookie_journal_reuse_files: bool = True
    """See :attr:`BookieConfig.journal_reuse_files`."""
    functions_worker: bool = True
    """Run one Functions Worker in the process (``--no-functions-worker`` turns it off)."""
    functions_runtime: str = "thread"
    """How the worker runs instances: ``thread`` (in this process) or ``process``."""


_unclaimed_data_dirs: set[Path] = set()
"""Data directories a failed start created, removed again at exit (see below)."""


def _remove_unclaimed(data_dir: Path) -> None:
    """Removes a data directory a failed or cancelled start created, now and once more when
    the process exits: a start cancelled while a thread of it was opening a file (the SQLite
    store, the bookie's storage) leaves that thread running, and what it creates after the
    first removal goes at exit, once :func:`asyncio.run` has joined its threads. A later
    successful start over the same directory claims it back (nothing is removed then)."""
    shutil.rmtree(data_dir, ignore_errors=True)
    _unclaimed_data_dirs.add(data_dir)


@atexit.register
def _remove_unclaimed_at_exit() -> None:
    for data_dir in sorted(_unclaimed_data_dirs):
        shutil.rmtree(data_dir, ignore_errors=True)


class Standalone(HostsBrokerServer):
    """Start with :meth:`start`, stop with :meth:`stop` (idempotent, persists cursors)."""

    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.store: MetadataStore | None = None
        self.bookie: Bookie | None = None
        self.server: BrokerServer | None = None
        self.functions_worker: WorkerService | None = None
        self._worker_slot: ServiceSlot | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._announced = asyncio.Event()
        """Set by :meth:`ready_line`: the worker's imports and start follow the ready line."""

    async def start(self) -> None:
        """Start every part. On failure (or cancellation) what started is stopped, and the
        data directory removed if this start created it; then the error is raised."""
        data_dir = self.config.data_dir.resolve()
        created = not data_dir.exists()
        try:
            await self._start(data_dir)
        except BaseException:
            await self.stop()
            if created:
                _remove_unclaimed(data_dir)
            raise
        _unclaimed_data_dirs.discard(data_dir)

    async def _start(self, data_dir: Path) -> None:
        cfg = self.config
        data_dir.mkdir(parents=True, exist_ok=True)
        if cfg.metadata_url is None:
            self.store = await connect(f"sqlite://{data_dir / 'metadata.db'}")
        else:
            self.store = await connect(
                cfg.metadata_url, session_timeout_s=cfg.metadata_session_timeout_s
            )
        # The bookie's id (host:port) is recorded in its data dir and in every ledger's
        # ensemble, so it must keep its port across restarts: picked once, then reused.
        port_file = data_dir / "bookie-port"
        port = int(port_file.read_text()) if port_file.exists() else 0
        if cfg.bookie_port is not None:
            port = cfg.bookie_port
        self.bookie = bookie = Bookie(
            BookieConfig(
                data_dir=data_dir / "bookie",
                host="127.0.0.1",
                port=port,
                disk_free_min_bytes=cfg.bookie_disk_free_min_bytes,
                entry_size_max_bytes=cfg.server.entry_size_max_bytes,
                disk_check_interval_ms=cfg.bookie_disk_check_interval_ms,
                write_cache_max_bytes=cfg.bookie_write_cache_size_mb * 1024 * 1024,
                journal_skip_invalid_records=cfg.bookie_journal_skip_invalid_records,
                journal_reuse_files=cfg.bookie_journal_reuse_files,
                gc_interval_ms=cfg.bookie_gc_interval_ms,
            ),
            self.store,
        )
        await bookie.start()
        if port != bookie.port or not port_file.exists():
            tmp = port_file.with_suffix(".tmp")
            tmp.write_text(str(bookie.port))
            tmp.replace(port_file)

        def collectors() -> list[Any]:
            from magnetar.admin.metrics import JournalCollector

            return [JournalCollector(lambda: None if self.bookie is None else bookie.journal)]

        def first_routes() -> list[Any]:
            if self._worker_slot is None:
                return []
            from magnetar.functions.rest import routes_on

            assert self.server is not None and self.server.app is not None
            return routes_on(self.server.app, self._worker_slot)

        # The admin app (with the worker's routes) is built when the first HTTP request
        # comes, after the ready line: an idle standalone does without FastAPI's memory.
        if cfg.functions_worker:
            from magnetar.functions.service_slot import ServiceSlot

            self._worker_slot = ServiceSlot()
        self.server = BrokerServer(
            cfg.server,
            self.store,
            local_bookies=[bookie],
            collectors=collectors,
            health_checks=[lambda: None if self.bookie is None else bookie.write_problem()],
            first_routes=first_routes,
            app_after=self._announced,
            app_when_needed=True,
        )
        await self.server.start()
        assert self.server.admin is not None
        self.server.admin.host_settings.update(
            metadataStoreUrl=cfg.metadata_url or f"sqlite://{data_dir / 'metadata.db'}",
            metadataStoreSessionTimeoutMillis=round(cfg.metadata_session_timeout_s * 1000),
            functionsWorkerEnabled=cfg.functions_worker,
            bookiePort=bookie.port,
        )
        if cfg.functions_worker:
            self._worker_task = asyncio.get_running_loop().create_task(
                self._start_functions_worker(), name="functions-worker start"
            )

    async def _start_functions_worker(self) -> None:
        # Its imports (the client library, the runtime) follow the ready line, off the loop
        # (which serves meanwhile), as the admin app's do.
        server = self.server
        assert server is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._announced.wait(), APP_AFTER_WAIT_S)
        # imported in a thread: the loop gets the GIL back every switch interval instead of
        # waiting out each import (the stats reader's module, first used by the worker's
        # first membership poll, with them)
        for module in ("magnetar.functions.worker_service", "magnetar.admin.resources.topics"):
            await asyncio.to_thread(importlib.import_module, module)
        from magnetar.functions.runtime_manager import runtime_factory
        from magnetar.functions.worker_config import WorkerConfig
        from magnetar.functions.worker_info import WorkerInfo
        from magnetar.functions.worker_service import WorkerService

        assert server.broker is not None and server.http is not None
        host = server.config.http_host
        config = WorkerConfig(
            worker=WorkerInfo("standalone", host, server.http.port),
            service_url=server.broker.service_url,
            admin_url=f"http://{host}:{server.http.port}",
            work_dir=str(self.config.data_dir.resolve() / "functions"),
            client_credentials=server.config.broker_client_auth,
        )
        service = WorkerService(
            config,
            runtime_factory=runtime_factory(self.config.functions_runtime),
            topic_stats=self._read_topic_stats,
        )
        try:
            await service.start()
        except Exception as exc:
            log.error("the functions worker could not start: %s", exc)
            if self._worker_slot is not None:
                self._worker_slot.failure = str(exc)
            return
        self.functions_worker = service
        if self._worker_slot is not None:
            self._worker_slot.service = service
        log.info("functions worker %s joined", config.worker.consumer_name)

    async def _read_topic_stats(self, topic: str) -> dict[str, Any]:
        """The functions worker's member list source: the coordination topic's stats read
        in this process, as ``GET .../stats`` answers them (an HTTP request to ourselves
        cost ~2 ms of the event loop, once a second). Raises MembershipUnavailable."""
        from magnetar.admin.resources.topics import loaded_topic_stats
        from magnetar.functions.errors import MembershipUnavailable

        assert self.server is not None and self.server.admin is not None
        try:
            return await loaded_topic_stats(self.server.admin, TopicName.parse(topic))
        except MagnetarError as exc:
            raise MembershipUnavailable(f"stats of {topic}: {exc}") from None

    async def stop(self) -> None:
        """Stop every part, all within ``STOP_TIMEOUT_S``: a part that fails to stop in its
        share (a full disk, a hung write) is logged in one line and the next still stops."""
        deadline_s = asyncio.get_running_loop().time() + STOP_TIMEOUT_S
        task, self._worker_task = self._worker_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._worker_slot is not None:
            self._worker_slot.service = None
        worker, self.functions_worker = self.functions_worker, None
        if worker is not None:
            await stop_step("functions worker", worker.close(), deadline_s)
        server, self.server = self.server, None
        if server is not None:
            await server.stop(deadline_s)
        bookie, self.bookie = self.bookie, None
        if bookie is not None:
            await stop_step("bookie", bookie.stop(), deadline_s)
        store, self.store = self.store, None
        if store is not None:
            await stop_step("metadata store", store.close(), deadline_s)

    def ready_line(self, elapsed_ms: float) -> str:
        """The ready line; also lets the Functions Worker start (it waits for this)."""
        assert self.server is not None
        self._announced.set()
        return (
            "magnetar standalone ready: "
            + self.server.urls_text(self.config.server.http_host)
            + f" data {self.config.data_dir.resolve()} ({elapsed_ms:.0f} ms)"
        )

    async def ended(self) -> int:
        """Never: a standalone runs until it is stopped."""
        await asyncio.Event().wait()
        return 0


async def run(config: StandaloneConfig, started_at: float | None = None) -> int:
    """Run until SIGINT/SIGTERM (returns 0); prints one ready line to stdout once serving
    (see :func:`magnetar.broker_server.serve`)."""
    return await serve(Standalone(config), started_at)
