"""The proxy's HTTP side: an ASGI app served on ``--http-port``.

* ``GET /status.html`` — ``OK`` while the process serves (liveness; Pulsar's proxy has it).
* ``GET /ready`` — 200 once a broker can be reached, 503 before (readiness).
* ``GET /metrics`` — the proxy's own counters (:mod:`magnetar.proxy.stats`).
* ``GET /proxy-stats/connections`` — the open client connections, as JSON.
* ``GET /lookup/v2/topic/...`` — asked of a broker, answered with the proxy's addresses.
* anything else (the admin REST API) — forwarded to a broker; a broker's redirect to the
  topic's owner is followed here, so the client only ever talks to the proxy.

Forwarding goes through :class:`~magnetar.admin_client.transport.Transport` (the brokers'
HTTP URLs as one multi-host service URL: failover between them, redirects followed, one
deadline, a bounded answer), in a worker thread. With authentication on, a request is
authenticated here first (401 when refused) and forwarded with the client's own
``Authorization`` header, so the broker authorizes the client's role.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from magnetar.admin_client.errors import AdminError
from magnetar.auth.authentication import AUTH_METHOD_HEADER
from magnetar.common.errors import AuthenticationError
from magnetar.proxy.handshake import host_port

if TYPE_CHECKING:
    from magnetar.auth.authentication import AuthenticationService
    from magnetar.proxy.config import ProxyConfig
    from magnetar.proxy.discovery import BrokerDirectory
    from magnetar.proxy.stats import ProxyStats

log = logging.getLogger(__name__)

REQUEST_BODY_BYTES_MAX = 64 * 1024 * 1024
OPEN_PATHS = frozenset({"/status.html", "/ready", "/metrics"})
"""Answered without credentials, as the brokers answer ``/metrics`` and ``/ready``."""
_FORWARDED_HEADERS = ("authorization", AUTH_METHOD_HEADER.lower(), "content-type", "accept")
_LOOKUP_PREFIX = "/lookup/v2/topic/"

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class ProxyHttpApp:
    """The ASGI application (see the module docstring)."""

    def __init__(
        self,
        config: ProxyConfig,
        directory: BrokerDirectory,
        authentication: AuthenticationService,
        stats: ProxyStats,
        ready: Callable[[], Awaitable[bool]],
        now_s: Callable[[], float],
        tls_port: Callable[[], int | None],
        binary_port: Callable[[], int | None],
        http_port: Callable[[], int],
    ) -> None:
        self._config = config
        self._directory = directory
        self._authentication = authentication
        self._stats = stats
        self._ready = ready
        self._now_s = now_s
        self._tls_port = tls_port
        self._binary_port = binary_port
        self._http_port = http_port

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        try:
            if path == "/status.html" and method in ("GET", "HEAD"):
                await _reply(send, 200, b"OK", "text/plain")
            elif path == "/ready" and method == "GET":
                ok = await self._ready()
                body = {"ready": ok} if ok else {"ready": False, "reason": "no broker reachable"}
                await _reply_json(send, 200 if ok else 503, body)
            elif path == "/metrics" and method == "GET":
                text = self._stats.prometheus_text().encode()
                await _reply(send, 200, text, "text/plain; version=0.0.4")
            else:
                await self._forwarded(scope, receive, send)
        except Exception as exc:  # every request is answered (DESIGN.md §6)
            log.exception("HTTP %s %s failed", method, path)
            await _reply_json(send, 500, {"reason": f"{type(exc).__name__}: {exc}"})

    async def _forwarded(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self._authentication.enabled:
            try:
                self._authentication.authenticate_http(headers, self._now_s())
            except AuthenticationError as exc:
                self._stats.count("pulsar_proxy_authentication_failures")
                await _reply_json(send, 401, {"reason": f"Authentication required: {exc}"})
                return
        path: str = scope["path"]
        if path == "/proxy-stats/connections" and scope["method"] == "GET":
            await _reply_json(send, 200, self._stats.connections_json())
            return
        body = await _read_body(receive)
        if body is None:
            await _reply_json(send, 413, {"reason": "request body too large"})
            return
        target = scope.get("raw_path") or path.encode()
        query = scope.get("query_string") or b""
        full_path = target.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        status, answer, content_type = await self._exchange(
            scope["method"],
            full_path,
            body,
            {k: v for k, v in headers.items() if k in _FORWARDED_HEADERS},
        )
        if path.startswith(_LOOKUP_PREFIX) and status == 200:
            answer = self._own_lookup_answer(answer)
        await _reply(send, status, answer, content_type)

    async def _exchange(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        from magnetar.admin_client.transport import Transport

        urls = self._directory.http_urls()
        if not urls:
            await self._directory.refresh()
            urls = self._directory.http_urls()
        if not urls:
            return 503, _json({"reason": "the proxy knows no broker HTTP URL"}), "application/json"
        scheme = urls[0].split("://", 1)[0]
        service_url = f"{scheme}://" + ",".join(
            host_port(u) for u in urls if u.startswith(f"{scheme}://")
        )
        transport = Transport(service_url, timeout_s=self._config.request_timeout_s)
        self._stats.count("pulsar_proxy_http_requests")
        try:
            answer = await asyncio.to_thread(
                transport.exchange,
                method,
                path,
                body if body or method in ("PUT", "POST") else None,
                headers,
            )
        except AdminError as exc:
            return 503, _json({"reason": str(exc)}), "application/json"
        return answer.status, answer.body, answer.header("Content-Type") or "application/json"

    def _own_lookup_answer(self, body: bytes) -> bytes:
        """A broker's lookup answer with the proxy's addresses in place of the owner's."""
        try:
            data = json.loads(body)
        except ValueError:
            return body
        if not isinstance(data, dict):
            return body
        host = self._config.advertised_host
        binary, tls = self._binary_port(), self._tls_port()
        own = {
            "brokerUrl": f"pulsar://{host}:{binary}" if binary is not None else None,
            "brokerUrlTls": f"pulsar+ssl://{host}:{tls}" if tls is not None else None,
            "httpUrl": f"http://{host}:{self._http_port()}",
            "httpUrlTls": None,
        }
        own["nativeUrl"] = own["brokerUrl"]
        return _json({**data, **{k: v for k, v in own.items() if k in data or v is not None}})


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or None when it is over :data:`REQUEST_BODY_BYTES_MAX`."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > REQUEST_BODY_BYTES_MAX:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _reply(send: Send, status: int, body: bytes, content_type: str) -> None:
    no_body = status in (204, 304) or 100 <= status < 200
    headers = [] if no_body else [(b"content-type", content_type.encode("latin-1"))]
    if not no_body:
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if no_body else body})


async def _reply_json(send: Send, status: int, value: Any) -> None:
    await _reply(send, status, _json(value), "application/json")
