"""One broker process's composition, shared by ``magnetar broker``
(:mod:`magnetar.broker_node`) and ``magnetar standalone`` (:mod:`magnetar.standalone`), as
Pulsar's ``PulsarStandalone`` starts the same ``PulsarService`` as a broker does.

:class:`BrokerServer` is handed a metadata store that its host owns, and starts, in order:

1. the ledger client: TCP to the bookies registered in the store, direct calls into the
   host's in-process bookies (``local_bookies``);
2. the broker service over ledger storage with the broker's ensemble and quorums (binary
   protocol, TLS when configured);
3. the admin app (:class:`~magnetar.admin.AdminContext`) on the HTTP server, and on the
   HTTPS server when ``https_port`` is set. With ``app_after`` (the standalone's ready
   line) the servers start with a stand-in (:class:`~magnetar.admin.deferred_app.DeferredApp`)
   and the app (FastAPI's imports, the routes) is built once ``app_after`` is set: the
   ports accept at once, and a request that comes first waits for the app
   (``APP_WAIT_MS`` at most) and is then served by it.

:meth:`BrokerServer.stop` stops them in the reverse order. The host adds what is its own
around it: the cluster broker its registration, bundle ownership and controller; the
standalone its metadata store, bookie and Functions Worker.

:func:`serve` runs a host until SIGINT/SIGTERM with one ready line; a signal during start-up
stops it without that line.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.common.clock import Clock
from magnetar.common.frozen_struct import frozen_struct
from magnetar.common.shutdown import stop_requested, stop_step
from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.ledger.placement import PlacementPolicy
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore
from magnetar.protocol import FRAME_PADDING_BYTES

APP_WAIT_MS = 10_000
"""How long an HTTP request that comes before the admin app is built waits for it (then
503): the app is built just after the ready line."""
APP_AFTER_WAIT_S = 0.5
"""How long building the app waits for ``app_after`` before going ahead anyway (a host
started without :func:`serve`, e.g. in-process in a test, prints no ready line)."""

if TYPE_CHECKING:
    from fastapi import FastAPI

    from magnetar.admin import AdminContext, AdminServer
    from magnetar.admin.deferred_app import DeferredApp
    from magnetar.bookie import Bookie
    from magnetar.broker.ownership import ClusterOwnership

log = logging.getLogger(__name__)


@frozen_struct(kw_only=False)
class BrokerServerConfig:
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    """0 picks a free port."""
    https_port: int | None = None
    """Pulsar's ``webServicePortTls``: the same HTTP API over TLS, with the broker's TLS
    certificate (``broker.tls_cert_file``/``tls_key_file``); None = off, 0 = a free port."""
    managed_ledger_max_entries_per_ledger: int = 50_000
    """Pulsar's ``managedLedgerMaxEntriesPerLedger``: a topic's ledger rolls over after this
    many entries (small values make tests span ledgers)."""
    managed_ledger_min_ledger_rollover_time_ms: int = 10_000
    """A ledger rolls over for its entry count no sooner than this after it was created
    (Pulsar's ``managedLedgerMinLedgerRolloverTimeMinutes``, 10 min there; shorter here
    because our bookies keep their index in memory). At 40 000 appends a second a ledger of
    50 000 entries otherwise rolled over every 1.25 s, appends waiting for each (the p99 of
    publish latency); 0: roll at the count."""
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    """How the ledger client places ensembles over racks and regions (Pulsar's
    ``bookkeeperClient*PolicyEnabled`` settings, :mod:`magnetar.ledger.placement`)."""
    broker_client_auth: ClientCredentials = NO_CREDENTIALS
    """Pulsar's ``brokerClientAuthenticationPlugin``/``Parameters``: what this process's own
    clients present to brokers (calls between brokers, a Functions Worker and its
    instances). With authorization on, the role must be a super user."""
    function_worker_url: str | None = None
    """A Functions Worker's REST URL (Pulsar's proxy names it ``functionWorkerWebServiceURL``):
    the HTTP API forwards the worker's paths there
    (:mod:`magnetar.admin.function_worker_forward`); None: they are not served."""

    @property
    def entry_size_max_bytes(self) -> int:
        """Storage takes any entry a SEND frame can carry: the max message size plus the
        frame padding for metadata (a chunk is a payload of the max size plus metadata)."""
        return self.broker.max_message_size_bytes + FRAME_PADDING_BYTES


class BrokerServer:
    """The broker service and its HTTP API over a metadata store owned by the caller.

    ``ownership`` (cluster mode) limits the broker to the bundles it holds; without it the
    broker owns every topic. ``collectors`` and ``health_checks`` are the host's own (see
    :class:`~magnetar.admin.AdminContext`); ``first_routes`` go before every route of the
    admin app (the standalone's Functions Worker routes). The app's route matching is built
    off the loop once the app is (:func:`~magnetar.admin.server.build_route_matching_off_loop`).
    ``collectors`` and ``first_routes`` may be given as a function returning them, called
    when the app is built (:attr:`app` is set by then). With ``app_after``
    the app is built once that event is set (see the module's docstring), and with
    ``app_when_needed`` too only once the first HTTP request comes or :meth:`wait_app` is
    called (an idle process then never imports the web framework); :meth:`wait_app`
    returns it.
    """

    def __init__(
        self,
        config: BrokerServerConfig,
        store: MetadataStore,
        *,
        clock: Clock | None = None,
        local_bookies: Sequence[Bookie] = (),
        ownership: ClusterOwnership | None = None,
        collectors: Sequence[Any] | Callable[[], Sequence[Any]] = (),
        health_checks: Sequence[Callable[[], str | None]] = (),
        first_routes: Sequence[Any] | Callable[[], Sequence[Any]] = (),
        app_after: asyncio.Event | None = None,
        app_when_needed: bool = False,
    ) -> None:
        self.config = config
        self.store = store
        self._clock = clock
        self._local_bookies = list(local_bookies)
        self._ownership = ownership
        self._collectors = collectors
        self._health_checks = list(health_checks)
        self._first_routes = first_routes
        self._app_after = app_after
        self._app_when_needed = app_when_needed
        self._deferred: DeferredApp | None = None
        self._app_build: asyncio.Task[None] | None = None
        self.ledger_client: LedgerClient | None = None
        self.broker: BrokerService | None = None
        self.admin: AdminContext | None = None
        self.app: FastAPI | None = None
        self.http: AdminServer | None = None
        self.https: AdminServer | None = None
        self._route_matching: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the ledger client, the broker service, then the HTTP API. Raises what a
        part raises (a bound port, a store error); :meth:`stop` then stops what started."""
        cfg = self.config
        b = cfg.broker
        # In-process bookies are on this loop: direct calls instead of a loopback socket.
        self.ledger_client = LedgerClient(
            self.store,
            config=LedgerClientConfig(
                entry_size_max_bytes=cfg.entry_size_max_bytes, placement=cfg.placement
            ),
            local_bookies=self._local_bookies,
        )
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
            clock=self._clock,
            ml_config=ManagedLedgerConfig(
                ledger_entries_max=cfg.managed_ledger_max_entries_per_ledger,
                ledger_age_min_ms=cfg.managed_ledger_min_ledger_rollover_time_ms,
            ),
            ownership=self._ownership,
        )
        from magnetar.replication.manager import attach_replication

        attach_replication(self.broker, cfg.broker_client_auth)  # geo-replication
        await self.broker.start()
        await self._start_http(self.broker)

    async def _start_http(self, broker: BrokerService) -> None:
        # The admin app (FastAPI, pydantic, prometheus-client) is imported here, after the
        # broker is up, or after the ready line (app_after): those imports are most of the
        # HTTP side's start-up cost.
        from magnetar.admin import AdminContext

        cfg = self.config
        ctx = AdminContext(
            broker,
            compactor=broker.compactor,
            health_checks=self._health_checks,
        )
        ctx.host_settings.update(
            managedLedgerMaxEntriesPerLedger=cfg.managed_ledger_max_entries_per_ledger,
            managedLedgerMinLedgerRolloverTimeMinutes=(
                cfg.managed_ledger_min_ledger_rollover_time_ms / 60_000
            ),
            webServiceHost=cfg.http_host,
        )
        ctx.internal_client_credentials = cfg.broker_client_auth
        self.admin = ctx
        if self._app_after is None:
            app: Any = self._build_app(ctx)
        else:
            from magnetar.admin.deferred_app import DeferredApp

            app = self._deferred = DeferredApp(APP_WAIT_MS)
            self._app_build = asyncio.create_task(self._build_app_later(ctx, self._app_after))
        await self._start_servers(app)
        if self._app_after is None:
            self._build_route_matching()

    def _build_app(self, ctx: AdminContext) -> FastAPI:
        from magnetar.admin.app import create_app

        collectors = self._collectors
        ctx.collectors.extend(collectors() if callable(collectors) else collectors)
        extra = []
        if self.config.function_worker_url is not None:
            from magnetar.admin import function_worker_forward

            extra.append(function_worker_forward.router(self.config.function_worker_url))
        self.app = app = create_app(ctx, extra)
        first = self._first_routes
        for position, route in enumerate(first() if callable(first) else first):
            app.router.routes.insert(position, route)
        return app

    async def _build_app_later(self, ctx: AdminContext, after: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(after.wait(), APP_AFTER_WAIT_S)
        if self._app_when_needed:
            assert self._deferred is not None
            await self._deferred.wait_needed()
        try:
            # the imports off the loop (the loop serves meanwhile), the routes on it
            await asyncio.to_thread(importlib.import_module, "magnetar.admin.app")
            app = self._build_app(ctx)
        except Exception:  # a bug: requests get 503 after their wait, the log says why
            log.exception("building the admin app failed")
            raise
        assert self._deferred is not None
        self._deferred.install(app)
        self._build_route_matching()

    def _build_route_matching(self) -> None:
        # built off the loop, not on it by the first request (see build_route_matching)
        from magnetar.admin.server import build_route_matching_off_loop

        self._route_matching = asyncio.create_task(build_route_matching_off_loop(self.app))

    async def wait_app(self) -> FastAPI:
        """The admin app, once built (at once unless ``app_after`` was given)."""
        if self._deferred is not None:
            self._deferred.need()
            await self._deferred.wait_installed()
        assert self.app is not None
        return self.app

    async def _start_servers(self, app: Any) -> None:
        from magnetar.admin import AdminServer

        cfg = self.config
        ctx = self.admin
        assert ctx is not None
        # With the app built when first needed, so is the HTTP server: from the first
        # connection (then the app's imports follow uvicorn's, never beside them).
        self.http = AdminServer(
            app,
            cfg.http_host,
            cfg.http_port,
            serve_on_first_connection=self._app_when_needed,
        )
        await self.http.start()
        ctx.http_port = self.http.port
        b = cfg.broker
        if cfg.https_port is not None:
            from magnetar.admin.server import HttpsSettings

            assert b.tls_cert_file is not None and b.tls_key_file is not None
            tls = HttpsSettings(
                b.tls_cert_file,
                b.tls_key_file,
                b.tls_trust_certs_file,
                b.tls_require_trusted_client_cert,
            )
            self.https = AdminServer(app, cfg.http_host, cfg.https_port, tls=tls)
            await self.https.start()
            ctx.host_settings["webServicePortTls"] = self.https.port

    def urls_text(self, http_host: str) -> str:
        """``broker <url> [tls <url>] http <url> [https <url>]`` for a ready line, the HTTP
        URLs on ``http_host``."""
        assert self.broker is not None and self.http is not None
        tls_url = self.broker.service_url_tls
        return (
            f"broker {self.broker.service_url} "
            + (f"tls {tls_url} " if tls_url else "")
            + f"http http://{http_host}:{self.http.port}"
            + (f" https https://{http_host}:{self.https.port}" if self.https else "")
        )

    async def stop(self, deadline_s: float) -> None:
        """Stop the HTTP servers, the broker (it persists cursors) and the ledger client, each
        within what is left until ``deadline_s`` (loop time; see
        :func:`~magnetar.common.shutdown.stop_step`). Idempotent."""
        for task in (self._app_build, self._route_matching):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._app_build = self._route_matching = None
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


class HostsBrokerServer:
    """For a process built around one :class:`BrokerServer` (``self.server``, ``None`` before
    the start and after the stop): its parts, or ``None`` while there is no server."""

    server: BrokerServer | None

    @property
    def broker(self) -> BrokerService | None:
        return None if self.server is None else self.server.broker

    @property
    def http(self) -> AdminServer | None:
        return None if self.server is None else self.server.http

    @property
    def https(self) -> AdminServer | None:
        return None if self.server is None else self.server.https

    @property
    def admin(self) -> AdminContext | None:
        return None if self.server is None else self.server.admin


class ServedProcess(Protocol):
    """What :func:`serve` runs: a server process's parts."""

    async def start(self) -> None:
        """Start every part; raises what a part raises."""

    async def stop(self) -> None:
        """Stop what started (idempotent, bounded)."""

    def ready_line(self, elapsed_ms: float) -> str:
        """The line printed once serving."""

    async def ended(self) -> int:
        """Returns an exit status when the process must end on its own (e.g. its metadata
        session is lost); waits forever if it never must."""


def tune_for_serving() -> None:
    """The interpreter's settings for a long-running server (GC, GIL switch interval, the
    allocator's trim), once its start-up allocations are done."""
    from magnetar.bookie.gc_tuning import (
        fix_mmap_threshold,
        start_heap_trimmer,
        tune_gc_for_serving,
    )
    from magnetar.common.gil import tune_gil_for_serving

    tune_gc_for_serving()
    tune_gil_for_serving()
    fix_mmap_threshold()
    start_heap_trimmer()


async def serve(process: ServedProcess, started_at: float | None = None) -> int:
    """Start ``process``, print its ready line to stdout, and run it until SIGINT/SIGTERM
    (returns 0) or until it ends on its own (returns what :meth:`ServedProcess.ended`
    returns); stops it in every case. A signal during start-up cancels the start: no ready
    line, returns 0. Raises what the start raises."""
    t0 = started_at if started_at is not None else time.perf_counter()
    stop = stop_requested()
    stopping = asyncio.create_task(stop.wait())
    try:
        starting = asyncio.create_task(process.start())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            log.info("stopped during start-up")
            return 0
        starting.result()
        print(process.ready_line((time.perf_counter() - t0) * 1000), flush=True)
        # after the line: serving does not wait for its imports (ctypes), and it runs before
        # anything else does on this loop
        tune_for_serving()
        ending = asyncio.create_task(process.ended())
        await asyncio.wait({stopping, ending}, return_when=asyncio.FIRST_COMPLETED)
        if ending.done():
            return ending.result()
        ending.cancel()
        log.info("shutting down")
        return 0
    finally:
        stopping.cancel()
        await process.stop()
