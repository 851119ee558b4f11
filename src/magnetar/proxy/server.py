"""The proxy process: its discovery, binary listeners and HTTP server, started and stopped
together (a :class:`~magnetar.broker_server.ServedProcess` for
:func:`~magnetar.broker_server.serve`, which prints the ready line and handles signals).

The proxy holds no state of its own: several run side by side in front of one cluster, and
a restarted one serves at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

from magnetar.auth.authentication import AuthenticationService
from magnetar.common.clock import Clock, SystemClock
from magnetar.proxy.binary_proxy import BinaryProxy
from magnetar.proxy.config import ProxyConfig
from magnetar.proxy.discovery import BrokerDirectory, MetadataDiscovery
from magnetar.proxy.stats import ProxyStats

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024
TLS_HANDSHAKE_TIMEOUT_S = 10.0
READY_PROBE_TIMEOUT_S = 2.0
READY_CACHE_S = 1.0
"""How long a successful readiness probe is trusted (probes come every few seconds)."""


def _server_ssl_context(config: ProxyConfig) -> ssl.SSLContext:
    """The TLS listener's context. Raises ``OSError``/``ssl.SSLError`` for unusable files."""
    assert config.tls_cert_file is not None and config.tls_key_file is not None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    if config.tls_trust_certs_file is not None:
        context.load_verify_locations(config.tls_trust_certs_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


class ProxyServer:
    """See the module docstring. Ports of 0 are known after :meth:`start`."""

    def __init__(self, config: ProxyConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.stats = ProxyStats()
        source = (
            None
            if config.metadata_url is None
            else MetadataDiscovery(
                config.metadata_url,
                session_timeout_s=config.session_timeout_s,
                refresh_interval_s=config.discovery_refresh_s,
            )
        )
        self.directory = BrokerDirectory(
            static=config.static_brokers,
            source=source,
            allowed_target_ports=config.allowed_target_ports,
        )
        self.authentication = AuthenticationService(config.auth)
        self.binary = BinaryProxy(
            config, self.directory, self.authentication, self.stats, self.clock
        )
        self.port: int | None = None
        self.tls_port: int | None = None
        self.http_port = config.http_port
        self._servers: list[asyncio.Server] = []
        self._http: object | None = None
        self._ready_until_s = 0.0

    async def start(self) -> None:
        """Discovery first (a metadata store that cannot be reached fails the start), then
        the listeners. Raises ``OSError`` naming a port that cannot be bound."""
        from magnetar.admin.server import AdminServer
        from magnetar.proxy.http_proxy import ProxyHttpApp

        cfg = self.config
        tls_context = None if cfg.tls_port is None else _server_ssl_context(cfg)
        await self.directory.start()
        loop = asyncio.get_running_loop()
        if cfg.port is not None:
            server = await loop.create_server(
                self.binary.connection, cfg.bind_address, cfg.port, backlog=LISTEN_BACKLOG
            )
            self._servers.append(server)
            self.port = int(server.sockets[0].getsockname()[1])
        if tls_context is not None:
            server = await loop.create_server(
                self.binary.connection,
                cfg.bind_address,
                cfg.tls_port,
                backlog=LISTEN_BACKLOG,
                ssl=tls_context,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
            )
            self._servers.append(server)
            self.tls_port = int(server.sockets[0].getsockname()[1])
        app = ProxyHttpApp(
            cfg,
            self.directory,
            self.authentication,
            self.stats,
            ready=self.ready,
            now_s=lambda: self.clock.now_ms() / 1000,
            tls_port=lambda: self.tls_port,
            binary_port=lambda: self.port,
            http_port=lambda: self.http_port,
        )
        http = AdminServer(app, cfg.bind_address, cfg.http_port)
        await http.start()
        self._http = http
        self.http_port = http.port

    async def ready(self) -> bool:
        """Whether a broker accepts a connection now (a success is trusted for
        :data:`READY_CACHE_S`)."""
        now_s = self.clock.monotonic_s()
        if now_s < self._ready_until_s:
            return True
        for endpoint in self.directory.rotation():
            host, _, port = endpoint.address.rpartition(":")
            try:
                async with asyncio.timeout(READY_PROBE_TIMEOUT_S):
                    _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
            except (OSError, TimeoutError):
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            self._ready_until_s = now_s + READY_CACHE_S
            return True
        return False

    def ready_line(self, elapsed_ms: float) -> str:
        host = self.config.advertised_host
        parts = ["magnetar proxy ready:"]
        if self.port is not None:
            parts.append(f"proxy pulsar://{host}:{self.port}")
        if self.tls_port is not None:
            parts.append(f"tls pulsar+ssl://{host}:{self.tls_port}")
        parts.append(f"http http://{host}:{self.http_port}")
        brokers = self.directory.endpoints()
        parts.append(f"brokers {len(brokers)} ({elapsed_ms:.0f} ms)")
        return " ".join(parts)

    async def ended(self) -> int:
        await asyncio.Event().wait()
        return 0  # pragma: no cover - never reached

    async def stop(self) -> None:
        """Stop listening, close every client connection, stop discovery. Idempotent."""
        from magnetar.admin.server import AdminServer

        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        self.binary.close_all()
        http, self._http = self._http, None
        if isinstance(http, AdminServer):
            await http.close()
        await self.directory.close()


async def run(config: ProxyConfig, started_at: float | None = None) -> int:
    """Serve until SIGINT/SIGTERM; prints one ready line to stdout once serving."""
    from magnetar.broker_server import serve

    return await serve(ProxyServer(config), started_at)
