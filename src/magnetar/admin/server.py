"""The HTTP server of a broker: uvicorn serving the admin ASGI app on the broker's own
event loop (no thread, no second loop).

:class:`AdminServer` binds its listening socket itself (so port 0 works and the bound
port is known at once), then runs ``uvicorn.Server.serve(sockets=[sock])`` as a task on
the running loop. Signal handling stays with the host process: the embedded server does not
install handlers (uvicorn's default would replace the host's SIGTERM/SIGINT handlers).
:meth:`start` returns once uvicorn accepts connections (or, for a server started on its
first connection, once the socket listens); :meth:`close` asks it to exit and waits for
in-flight requests (bounded by ``graceful_shutdown_s``).

uvicorn and the app's FastAPI are imported on first :meth:`start`, which keeps importing
this module cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Any

from magnetar.common.frozen_struct import frozen_struct

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024
GRACEFUL_SHUTDOWN_S = 3
REQUEST_CONCURRENCY_MAX = 1000
"""Beyond this many concurrent connections uvicorn answers 503 (bounds memory)."""


@frozen_struct(kw_only=False)
class HttpsSettings:
    """Certificates of an HTTPS port (the broker's TLS listener files, PEM)."""

    cert_file: str
    key_file: str
    trust_certs_file: str | None = None
    """CA bundle a client certificate, when sent, must chain to."""
    require_client_cert: bool = False

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        if self.trust_certs_file is not None:
            options["ssl_ca_certs"] = self.trust_certs_file
            options["ssl_cert_reqs"] = (
                ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
            )
        return options


PEER_CERTIFICATE_KEY = "peer_certificate"
"""Key in ``scope["extensions"]["tls"]`` of the client certificate an HTTPS request came
with (``ssl.SSLSocket.getpeercert()``'s dict, verified against the trusted CA)."""


def _certificate_recording_protocol(certificates: dict[tuple[str, int], Any]) -> Any:
    """uvicorn's h11 protocol, recording each TLS connection's verified client
    certificate under its client address while the connection is open."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class CertificateRecordingProtocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            cert = transport.get_extra_info("peercert")
            if cert and self.client is not None:
                certificates[self.client] = cert

        def connection_lost(self, exc: Exception | None) -> None:
            if self.client is not None:
                certificates.pop(self.client, None)
            super().connection_lost(exc)

    return CertificateRecordingProtocol


class _WithPeerCertificates:
    """ASGI wrapper putting the connection's client certificate in each request's scope
    (``scope["extensions"]["tls"][PEER_CERTIFICATE_KEY]``), where the mTLS provider finds
    it."""

    def __init__(self, app: Any, certificates: dict[tuple[str, int], Any]) -> None:
        self._app = app
        self._certificates = certificates

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        client = scope.get("client")
        cert = self._certificates.get(tuple(client)) if client else None
        if cert is not None:
            extensions = dict(scope.get("extensions") or {})
            extensions["tls"] = {**extensions.get("tls", {}), PEER_CERTIFICATE_KEY: cert}
            scope = {**scope, "extensions": extensions}
        await self._app(scope, receive, send)


def build_route_matching(app: Any) -> None:
    """Build now what FastAPI otherwise builds when the first request is matched against each
    included router: the analysis of every endpoint's parameters and models (FastAPI 0.165
    does it lazily, on the event loop, inside that request). For the standalone's admin API
    that first request held the loop for 0.1-0.4 s, and every publish and dispatch waited
    behind it (a 0.4 s stall a few seconds after start, when the Functions Worker's first
    stats poll came in). Meant for a worker thread (:func:`build_route_matching_off_loop`):
    the framework guards these caches with a lock, and the loop keeps running between the
    thread's GIL turns. Does nothing with a FastAPI that builds them eagerly."""
    pending = list(getattr(getattr(app, "router", None), "routes", []))
    while pending:
        route = pending.pop()
        for name in ("effective_candidates", "effective_low_priority_routes"):
            build = getattr(route, name, None)
            if callable(build):
                pending.extend(build())


async def build_route_matching_off_loop(app: Any) -> None:
    """:func:`build_route_matching` in the loop's default executor; a failure is logged, not
    raised (the first request then builds what is missing, as it would have)."""
    try:
        await asyncio.get_running_loop().run_in_executor(None, build_route_matching, app)
    except Exception as exc:  # the framework's internals: never worth failing a server for
        log.warning("building the HTTP routes ahead of the first request failed: %s", exc)


def _server_class() -> Any:
    """The uvicorn server subclass (built on first use: uvicorn is imported lazily)."""
    import uvicorn

    class LoopServer(uvicorn.Server):
        """A uvicorn server that leaves signals to its host and reports readiness."""

        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            self.ready = asyncio.Event()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            self.ready.set()

    return LoopServer


class AdminServer:
    """Serves ``app`` (an ASGI application) on ``host:port``; ``port`` 0 picks a free port,
    readable from :attr:`port` after :meth:`start`.

    With ``serve_on_first_connection`` (plain HTTP only) :meth:`start` only binds and
    listens: the kernel accepts connections into the backlog, and uvicorn (its imports and
    its server) starts when the first one is there, then takes it as any other."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        graceful_shutdown_s: int = GRACEFUL_SHUTDOWN_S,
        tls: HttpsSettings | None = None,
        serve_on_first_connection: bool = False,
    ) -> None:
        assert tls is None or not serve_on_first_connection, "TLS settings are checked at start"
        self.app = app
        self.serve_on_first_connection = serve_on_first_connection
        self.tls = tls
        """Serve HTTPS with these certificates (None: plain HTTP)."""
        self.host = host
        self.port = port
        self.graceful_shutdown_s = graceful_shutdown_s
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        """uvicorn's start on the first connection (``serve_on_first_connection``)."""

    async def start(self) -> None:
        """Bind and serve (or, with ``serve_on_first_connection``, bind and listen). Raises
        ``OSError`` (naming the address) if the port cannot be bound, ``RuntimeError`` if
        uvicorn stops during start-up."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            # The socket's own message ("Address already in use") names neither address
            # nor purpose; whoever reads it needs both.
            raise OSError(
                e.errno, f"cannot listen for HTTP on {self.host}:{self.port}: {e.strerror}"
            ) from e
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        if not self.serve_on_first_connection:
            await self._serve(sock)
            return
        loop = asyncio.get_running_loop()

        def first_connection() -> None:
            loop.remove_reader(sock.fileno())
            self._starting = loop.create_task(self._serve_later(sock), name="http start")

        loop.add_reader(sock.fileno(), first_connection)
        log.info("HTTP listening on %s:%d (served from the first connection)", self.host, self.port)

    async def _serve_later(self, sock: socket.socket) -> None:
        try:
            await self._serve(sock)
        except Exception as exc:  # a bug (the port is bound): refuse rather than hold clients
            log.error("the HTTP server could not start: %s", exc)
            sock.close()
            self._sock = None

    async def _serve(self, sock: socket.socket) -> None:
        import uvicorn

        app, http = self.app, "h11"
        if self.tls is not None and self.tls.trust_certs_file is not None:
            certificates: dict[tuple[str, int], Any] = {}
            app = _WithPeerCertificates(app, certificates)
            http = _certificate_recording_protocol(certificates)
        config = uvicorn.Config(
            app,
            lifespan="off",
            http=http,
            ws="none",
            interface="asgi3",
            log_level="warning",
            access_log=False,
            server_header=False,
            limit_concurrency=REQUEST_CONCURRENCY_MAX,
            timeout_graceful_shutdown=self.graceful_shutdown_s,
            **({} if self.tls is None else self.tls.uvicorn_options()),
        )
        server = _server_class()(config)
        self._server = server
        task = asyncio.get_running_loop().create_task(
            server.serve(sockets=[sock]), name=f"http-{self.port}"
        )
        self._task = task
        ready = asyncio.ensure_future(server.ready.wait())
        await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            exc = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"HTTP server stopped during start-up: {exc!r}")
        log.info("HTTP listening on %s:%d", self.host, self.port)

    async def close(self) -> None:
        """Stop accepting, finish in-flight requests, release the port. Idempotent."""
        starting, self._starting = self._starting, None
        if starting is not None:
            with contextlib.suppress(Exception):
                await starting  # a server half started is stopped below
        elif self._sock is not None and self.serve_on_first_connection:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            try:
                await task
            except Exception:
                log.exception("HTTP server failed while stopping")
        if self._sock is not None:
            self._sock.close()
            self._sock = None
