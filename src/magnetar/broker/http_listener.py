"""A minimal HTTP/1.1 listener for readiness and the few REST calls the binary side needs
until the full admin REST (FastAPI, ``magnetar.admin``) replaces it.

Routes (JSON bodies; errors are ``{"reason": ...}`` with 4xx):

* ``GET /ready``, ``GET /admin/v2/brokers/health``, ``GET /metrics`` — liveness/readiness;
* ``PUT|GET /admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}/partitions`` —
  create a partitioned topic (body ``N``; 204, 409 if it exists) / read ``{"partitions": N}``;
* ``GET /admin/v2/namespaces/{tenant}/{ns}/topics`` — topic names, partitions included;
* ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}`` — the lookup REST of §8.2.

Requests are bounded (headers 64 KiB, body 1 MiB); one request per connection is enough for
the callers (``Connection: close``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from urllib.parse import unquote, urlsplit

from magnetar.broker.service import BrokerService
from magnetar.broker.topic_name import NamespaceName, TopicName
from magnetar.common.errors import MagnetarError
from magnetar.metadata.store import NodeExists
from magnetar.protocol import TopicsMode

log = logging.getLogger(__name__)

HEADER_SIZE_MAX_BYTES = 64 * 1024
BODY_SIZE_MAX_BYTES = 1024 * 1024
_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    500: "Internal Server Error",
}


class HttpListener:
    def __init__(self, service: BrokerService, host: str, port: int) -> None:
        self.service = service
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=HEADER_SIZE_MAX_BYTES
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await self._request(reader)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            status, body = 400, {"reason": "malformed request"}
        except ConnectionError:
            writer.close()
            return
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            writer.write(head.encode() + payload)
            await writer.drain()
        writer.close()

    async def _request(self, reader: asyncio.StreamReader) -> tuple[int, object]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length > BODY_SIZE_MAX_BYTES:
            return 413, {"reason": "body too large"}
        body = await reader.readexactly(length) if length else b""
        path = urlsplit(target).path
        parts = [unquote(p) for p in path.strip("/").split("/")]
        try:
            return await self._route(method, parts, body)
        except MagnetarError as exc:
            return 400, {"reason": str(exc)}

    async def _route(self, method: str, parts: list[str], body: bytes) -> tuple[int, object]:
        svc = self.service
        if method == "GET" and parts in (["ready"], ["admin", "v2", "brokers", "health"]):
            return 200, "ok"
        if method == "GET" and parts == ["metrics"]:
            return 200, None
        if (
            len(parts) == 7
            and parts[:2] == ["admin", "v2"]
            and parts[2] in ("persistent", "non-persistent")
            and parts[6] == "partitions"
        ):
            name = TopicName.parse(f"{parts[2]}://{parts[3]}/{parts[4]}/{parts[5]}")
            if method == "GET":
                return 200, {"partitions": await svc.partitions_of(name)}
            if method == "PUT":
                try:
                    await svc.create_partitioned_topic(name, int(json.loads(body or b"0")))
                except NodeExists:
                    return 409, {"reason": "This topic already exists"}
                return 204, None
            return 405, {"reason": "method not allowed"}
        if (
            method == "GET"
            and len(parts) == 6
            and parts[:3] == ["admin", "v2", "namespaces"]
            and parts[5] == "topics"
        ):
            ns = NamespaceName.parse(f"{parts[3]}/{parts[4]}")
            return 200, await svc.topics_of_namespace(ns, TopicsMode.ALL)
        if method == "GET" and len(parts) == 7 and parts[:3] == ["lookup", "v2", "topic"]:
            TopicName.parse(f"{parts[3]}://{parts[4]}/{parts[5]}/{parts[6]}")
            url = svc.service_url
            http = f"http://{svc.config.advertised_address or svc.config.host}:{self.port}"
            return 200, {
                "brokerUrl": url,
                "brokerUrlTls": url,
                "brokerUrlSsl": "",
                "nativeUrl": url,
                "httpUrl": http,
                "httpUrlTls": http,
            }
        return 404, {"reason": "not found"}
