"""One connection per broker, shared by every producer, consumer and lookup of a client.

Connections are keyed by logical URL (``pulsar://host:port``): as in the C++ client, a
lookup answer spelled exactly like the service URL reuses the service connection.
Concurrent requests for the same broker share one connection attempt. A closed connection
is dropped from the pool; the next :meth:`get` opens a new one.
"""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

from magnetar.client.auth import Authentication
from magnetar.client.connection import Connection
from magnetar.client.errors import AlreadyClosed, InvalidConfiguration
from magnetar.common.clock import Clock


def parse_service_url(url: str) -> tuple[str, int, bool]:
    """``(host, port, tls)`` of a one-host ``pulsar://`` or ``pulsar+ssl://`` URL (a broker's
    URL; a service URL listing several hosts is split by
    :class:`~magnetar.client.service_url.ServiceUrl` first). Raises InvalidConfiguration."""
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise InvalidConfiguration(
            f"unsupported service URL {url!r} (need pulsar:// or pulsar+ssl://)"
        )
    tls = parts.scheme == "pulsar+ssl"
    netloc = parts.netloc
    if "," in netloc:
        raise InvalidConfiguration(f"{url!r} names several hosts where one broker is expected")
    host, _, port = netloc.rpartition(":")
    if not host:
        host, port = netloc, ""
    return host.strip("[]"), int(port) if port else (6651 if tls else 6650), tls


class ConnectionPool:
    def __init__(
        self,
        *,
        authentication: Authentication | None,
        clock: Clock,
        ssl_context: ssl.SSLContext | None,
        tls_validate_hostname: bool,
        connect_timeout_s: float,
        keep_alive_interval_s: float,
    ) -> None:
        self._auth = authentication
        self._clock = clock
        self._ssl = ssl_context
        self._validate_hostname = tls_validate_hostname
        self._connect_timeout_s = connect_timeout_s
        self._keep_alive_interval_s = keep_alive_interval_s
        self._connections: dict[tuple[str, str], Connection] = {}
        self._pending: dict[tuple[str, str], asyncio.Future[Connection]] = {}
        self._closed = False

    async def get(self, logical_url: str, physical_url: str | None = None) -> Connection:
        """A ready connection to ``logical_url`` (through ``physical_url`` for a proxy).
        Raises ConnectError, the broker's handshake error, or AlreadyClosed."""
        if self._closed:
            raise AlreadyClosed("client is closed")
        physical = physical_url or logical_url
        key = (logical_url, physical)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            host, port, tls = parse_service_url(physical)
            conn = await Connection.open(
                host,
                port,
                logical_url=logical_url,
                authentication=self._auth,
                clock=self._clock,
                ssl_context=self._ssl if tls else None,
                server_hostname=host if self._validate_hostname else None,
                connect_timeout_s=self._connect_timeout_s,
                keep_alive_interval_s=self._keep_alive_interval_s,
                proxy_to_broker_url=None
                if physical == logical_url
                else logical_url.split("://", 1)[1],
            )
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._pending.pop(key, None)
        if self._closed:
            conn.close()
            raise AlreadyClosed("client is closed")
        self._connections[key] = conn
        conn.on_close.append(lambda c: self._drop(key, c))
        fut.set_result(conn)
        return conn

    def _drop(self, key: tuple[str, str], conn: Connection) -> None:
        if self._connections.get(key) is conn:
            del self._connections[key]

    def __len__(self) -> int:
        return len(self._connections)

    def close(self) -> None:
        self._closed = True
        for conn in list(self._connections.values()):
            conn.close()
        self._connections.clear()
