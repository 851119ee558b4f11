"""``magnetar standalone``: metadata store, one bookie, the broker, a readiness endpoint and
(unless turned off) one Functions Worker, all in one process and one event loop.

The worker (id ``standalone``, advertised as the HTTP address) serves its REST API
(``/admin/v3/functions|sources|sinks``, ``/admin/v2/worker/...``) on the standalone's HTTP
server. It joins its cluster in the background once the broker serves, so the ready line is
not delayed; until it has joined, its routes answer 503.

Data lives under ``data_dir``: ``metadata.db`` (the embedded SQLite metadata store, unless
``metadata_url`` names a shared one such as ZooKeeper) and ``bookie/`` (journal, entry
logs, index). Restarting on the same directory keeps every topic, message and subscription
position. Ledgers use the broker's ensemble and quorums (1/1/1 by default: one bookie; a
SEND_RECEIPT still means the entry is fsynced in that bookie's journal); larger ones need
the bookies of other processes registered in a shared metadata store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.bookie import Bookie, BookieConfig
from magnetar.bookie.gc_tuning import (
    fix_mmap_threshold,
    start_heap_trimmer,
    tune_gc_for_serving,
)
from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.common.errors import MagnetarError
from magnetar.common.gil import tune_gil_for_serving
from magnetar.common.names import TopicName
from magnetar.common.shutdown import STOP_TIMEOUT_S, stop_requested, stop_step
from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore, connect
from magnetar.protocol import FRAME_PADDING_BYTES

if TYPE_CHECKING:
    from fastapi import FastAPI

    from magnetar.admin import AdminContext, AdminServer
    from magnetar.admin.deferred_routes import DeferredRoutes
    from magnetar.functions.rest import ServiceSlot
    from magnetar.functions.worker_service import WorkerService

log = logging.getLogger(__name__)

WORKER_PATH_PREFIXES = (
    "/admin/v3/functions",
    "/admin/v3/sources",
    "/admin/v3/sinks",
    "/admin/v2/worker",
)
"""Paths of the Functions Worker's REST routes (:func:`magnetar.functions.rest.router`)."""
WORKER_ROUTES_WAIT_MS = 10_000
"""How long a request to them waits for the routes to be built (they are, just after the
ready line)."""


@dataclass(frozen=True, slots=True)
class StandaloneConfig:
    data_dir: Path = Path("data")
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    https_port: int | None = None
    """Pulsar's ``webServicePortTls``: the same HTTP API over TLS, with the broker's TLS
    certificate (``broker.tls_cert_file``/``tls_key_file``); None = off, 0 = a free port."""
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    bookie_disk_free_min_bytes: int = 64 * 1024 * 1024
    bookie_disk_check_interval_ms: int = 1_000
    """How often the bookie checks free space and, when read-only after a storage fault,
    retries a checkpoint to turn writable again."""
    bookie_write_cache_size_mb: int = 16
    """MiB of written entries the bookie buffers before a checkpoint writes them to its
    entry logs (BookKeeper's ``dbStorage_writeCacheMaxSizeMb``; a checkpoint also runs
    every second). Smaller than a dedicated bookie's 64 MiB: the standalone's broker caches
    the same entries for tailing reads, in the same process."""
    managed_ledger_max_entries_per_ledger: int = 50_000
    """Pulsar's ``managedLedgerMaxEntriesPerLedger``: a topic's ledger rolls over after this
    many entries (small values make tests span ledgers)."""
    managed_ledger_min_ledger_rollover_time_ms: int = 10_000
    """A ledger rolls over for its entry count no sooner than this after it was created
    (Pulsar's ``managedLedgerMinLedgerRolloverTimeMinutes``, 10 min there; shorter here
    because our bookies keep their index in memory). At 40 000 appends a second a ledger of
    50 000 entries otherwise rolled over every 1.25 s, appends waiting for each (the p99 of
    publish latency); 0: roll at the count."""
    metadata_url: str | None = None
    """``None``: the embedded SQLite store under ``data_dir``. Otherwise a store to share
    (``zk://host:port/chroot``), where bookies of other processes register too, so ledgers
    can span them (``broker.ensemble_size`` > 1). The standalone still owns every topic
    itself: it runs no controller, so no ``magnetar broker`` may share that store."""
    metadata_session_timeout_s: float = 10.0
    bookie_journal_skip_invalid_records: bool = False
    """See :attr:`BookieConfig.journal_skip_invalid_records`."""
    functions_worker: bool = True
    """Run one Functions Worker in the process (``--no-functions-worker`` turns it off)."""
    functions_runtime: str = "thread"
    """How the worker runs instances: ``thread`` (in this process) or ``process``."""
    broker_client_auth: ClientCredentials = NO_CREDENTIALS
    """Pulsar's ``brokerClientAuthenticationPlugin``/``Parameters``: what the Functions
    Worker and its instances present to this broker (binary protocol and REST). With
    authorization on, the role must be a super user."""


class Standalone:
    """Start with :meth:`start`, stop with :meth:`stop` (idempotent, persists cursors)."""

    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.store: MetadataStore | None = None
        self.bookie: Bookie | None = None
        self.ledger_client: LedgerClient | None = None
        self.broker: BrokerService | None = None
        self.http: AdminServer | None = None
        self.functions_worker: WorkerService | None = None
        self._worker_slot: ServiceSlot | None = None
        self._worker_routes: DeferredRoutes | None = None
        self._app: FastAPI | None = None
        self._admin_ctx: AdminContext | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self.https: AdminServer | None = None

    async def start(self) -> None:
        cfg = self.config
        data_dir = cfg.data_dir.resolve()
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
        # Storage takes any entry a SEND frame can carry: the max message size plus the
        # frame padding for metadata (a chunk is a payload of the max size plus metadata).
        entry_size_max_bytes = cfg.broker.max_message_size_bytes + FRAME_PADDING_BYTES
        self.bookie = Bookie(
            BookieConfig(
                data_dir=data_dir / "bookie",
                host="127.0.0.1",
                port=port,
                disk_free_min_bytes=cfg.bookie_disk_free_min_bytes,
                entry_size_max_bytes=entry_size_max_bytes,
                disk_check_interval_ms=cfg.bookie_disk_check_interval_ms,
                write_cache_max_bytes=cfg.bookie_write_cache_size_mb * 1024 * 1024,
                journal_skip_invalid_records=cfg.bookie_journal_skip_invalid_records,
            ),
            self.store,
        )
        await self.bookie.start()
        if port == 0:
            tmp = port_file.with_suffix(".tmp")
            tmp.write_text(str(self.bookie.port))
            tmp.replace(port_file)
        # The bookie is on this loop: direct calls instead of a loopback socket.
        self.ledger_client = LedgerClient(
            self.store,
            config=LedgerClientConfig(entry_size_max_bytes=entry_size_max_bytes),
            local_bookies=[self.bookie],
        )
        b = cfg.broker
        storage = LedgerClientStorage(
            self.ledger_client,
            ensemble_size=b.ensemble_size,
            write_quorum=b.write_quorum,
            ack_quorum=b.ack_quorum,
        )
        self.broker = BrokerService(
            b,
            self.store,
            storage,
            ml_config=ManagedLedgerConfig(
                ledger_entries_max=cfg.managed_ledger_max_entries_per_ledger,
                ledger_age_min_ms=cfg.managed_ledger_min_ledger_rollover_time_ms,
            ),
        )
        from magnetar.replication.manager import attach_replication

        attach_replication(self.broker, cfg.broker_client_auth)
        await self.broker.start()
        await self._start_http()

    async def _start_http(self) -> None:
        # The admin app (FastAPI, uvicorn, prometheus-client) is imported here, after the
        # broker is up: those imports are most of the HTTP side's start-up cost.
        from magnetar.admin import AdminContext, AdminServer
        from magnetar.admin.app import create_app
        from magnetar.admin.metrics import JournalCollector

        assert self.broker is not None
        bookie = self.bookie
        ctx = AdminContext(
            self.broker,
            compactor=self.broker.compactor,
            collectors=[JournalCollector(lambda: None if bookie is None else bookie.journal)],
            health_checks=[lambda: None if bookie is None else bookie.write_problem()],
        )
        app = create_app(ctx)
        if self.config.functions_worker:
            # The worker's routes are built once serving (DeferredRoutes): until then this
            # stand-in, first of the routes as they will be, holds their requests.
            from magnetar.admin.deferred_routes import DeferredRoutes

            self._worker_routes = DeferredRoutes(WORKER_PATH_PREFIXES, WORKER_ROUTES_WAIT_MS)
            app.router.routes.insert(0, self._worker_routes)
        self._app = app
        self._admin_ctx = ctx
        self.http = AdminServer(app, self.config.http_host, self.config.http_port)
        await self.http.start()
        ctx.http_port = self.http.port
        b = self.config.broker
        if self.config.https_port is not None:
            from magnetar.admin.server import HttpsSettings

            assert b.tls_cert_file is not None and b.tls_key_file is not None
            tls = HttpsSettings(
                b.tls_cert_file,
                b.tls_key_file,
                b.tls_trust_certs_file,
                b.tls_require_trusted_client_cert,
            )
            self.https = AdminServer(app, self.config.http_host, self.config.https_port, tls=tls)
            await self.https.start()
        if self._worker_routes is not None:
            self._worker_task = asyncio.get_running_loop().create_task(
                self._start_functions_worker(), name="functions-worker start"
            )

    async def _start_functions_worker(self) -> None:
        from magnetar.functions.rest import ServiceSlot, router

        assert self._worker_routes is not None and self._app is not None
        self._worker_slot = ServiceSlot()
        self._worker_routes.install(self._app, router(self._worker_slot))
        from magnetar.admin.server import build_route_matching_off_loop

        # the routes are complete now: their matching is built off the loop, not by the
        # first request (a user's, or the worker's REST calls) on it
        await build_route_matching_off_loop(self._app)
        from magnetar.functions.runtime_manager import runtime_factory
        from magnetar.functions.worker_config import WorkerConfig
        from magnetar.functions.worker_info import WorkerInfo
        from magnetar.functions.worker_service import WorkerService

        assert self.broker is not None and self.http is not None
        host = self.config.http_host
        config = WorkerConfig(
            worker=WorkerInfo("standalone", host, self.http.port),
            service_url=self.broker.service_url,
            admin_url=f"http://{host}:{self.http.port}",
            work_dir=str(self.config.data_dir.resolve() / "functions"),
            client_credentials=self.config.broker_client_auth,
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
        from magnetar.admin.topics import loaded_topic_stats
        from magnetar.functions.errors import MembershipUnavailable

        assert self._admin_ctx is not None
        try:
            return await loaded_topic_stats(self._admin_ctx, TopicName.parse(topic))
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
        https, self.https = self.https, None
        if https is not None:
            await stop_step("HTTPS server", https.close(), deadline_s)
        http, self.http = self.http, None
        if http is not None:
            await stop_step("HTTP server", http.close(), deadline_s)
        broker, self.broker = self.broker, None
        if broker is not None:
            await stop_step("broker", broker.close(), deadline_s)
        ledger_client, self.ledger_client = self.ledger_client, None
        if ledger_client is not None:
            await stop_step("ledger client", ledger_client.close(), deadline_s)
        bookie, self.bookie = self.bookie, None
        if bookie is not None:
            await stop_step("bookie", bookie.stop(), deadline_s)
        store, self.store = self.store, None
        if store is not None:
            await stop_step("metadata store", store.close(), deadline_s)


async def run(config: StandaloneConfig, started_at: float | None = None) -> None:
    """Run until SIGINT/SIGTERM; prints one ready line to stdout once serving."""
    t0 = started_at if started_at is not None else time.perf_counter()
    node = Standalone(config)
    stop = stop_requested()
    try:
        await node.start()
        assert node.broker is not None and node.http is not None
        tune_gc_for_serving()
        tune_gil_for_serving()
        fix_mmap_threshold()
        start_heap_trimmer()
        elapsed_ms = (time.perf_counter() - t0) * 1000
        tls_url = node.broker.service_url_tls
        print(
            f"magnetar standalone ready: broker {node.broker.service_url} "
            + (f"tls {tls_url} " if tls_url else "")
            + f"http http://{config.http_host}:{node.http.port} "
            + (f"https https://{config.http_host}:{node.https.port} " if node.https else "")
            + f"data {config.data_dir.resolve()} ({elapsed_ms:.0f} ms)",
            flush=True,
        )
        await stop.wait()
        log.info("shutting down")
    finally:
        await node.stop()
