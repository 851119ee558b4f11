"""A broker's HTTP port serving the Functions Worker's REST API of a worker elsewhere.

With ``function_worker_url`` (``--function-worker-web-service-url``, the name of Pulsar's
proxy setting ``functionWorkerWebServiceURL``) a broker answers the worker's paths
(``/admin/v3/{functions|sources|sinks}/{tenant}/{namespace}[/...]`` and
``/admin/v2/worker/...``) by sending the request, as it came, to that worker and answering
with the worker's answer: one admin URL serves the cluster and its functions (the CLI, the
web console). The routes are ordinary routes of the admin app, so the app's request guard
checks them first, as it checks the standalone's own worker routes
(:mod:`magnetar.admin.security`: a namespace's function, source or sink permission or its
tenant's admin for ``/admin/v3``, a super user for ``/admin/v2/worker``). The caller's
credentials go along, and a worker with authentication on checks them again.

A worker that cannot be reached gets **503** ``{"reason": ...}`` naming it; a body over
:data:`BODY_BYTES_MAX` gets **413** before anything is sent.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.responses import error_response
from magnetar.admin_client.errors import AdminError
from magnetar.admin_client.transport import Transport
from magnetar.auth.authentication import AUTH_METHOD_HEADER

PATHS = (
    "/admin/v3/{kinds}/{tenant}/{namespace}",
    "/admin/v3/{kinds}/{tenant}/{namespace}/{rest:path}",
    "/admin/v2/worker/{rest:path}",
)
"""The worker's paths (:func:`magnetar.functions.rest.router`); ``{kinds}`` keeps the
template the request guard reads the needed permission from."""
KINDS = frozenset({"functions", "sources", "sinks"})
METHODS = ["GET", "POST", "PUT", "DELETE"]
FORWARD_TIMEOUT_S = 60.0
"""One forwarded request, answer included (a create uploads the package)."""
BODY_BYTES_MAX = 65 * 1024 * 1024
"""A package at the worker's default limit (64 MiB) plus its multipart envelope."""
FORWARDED_HEADERS = ("content-type", "accept", "authorization", AUTH_METHOD_HEADER.lower())


class _TooLarge(Exception):
    pass


def router(function_worker_url: str, timeout_s: float = FORWARD_TIMEOUT_S) -> APIRouter:
    """The worker's paths on this app, forwarded to ``function_worker_url`` (one URL, or
    several hosts as one service URL: ``http://h1:p1,h2:p2``; its form checked by the
    caller, :func:`magnetar.admin_client.service_url.parse_service_url`)."""
    r = APIRouter(tags=["functions"])

    async def forward(request: Request) -> Response:
        kinds = request.path_params.get("kinds")
        if kinds is not None and kinds not in KINDS:
            return error_response(404, "Not Found")
        try:
            body = await _body(request)
        except _TooLarge:
            return error_response(413, f"request body larger than {BODY_BYTES_MAX} bytes")
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = {k: v for k in FORWARDED_HEADERS if (v := request.headers.get(k))}
        transport = Transport(function_worker_url, timeout_s=timeout_s)  # one per request:
        # it remembers the host that answered, and requests run in threads side by side
        try:
            answer = await asyncio.to_thread(
                transport.exchange, request.method, path, body or None, headers
            )
        except AdminError as exc:
            return error_response(
                503, f"the Functions Worker at {function_worker_url} cannot be reached: {exc}"
            )
        media = answer.header("Content-Type")
        return Response(answer.body, status_code=answer.status, media_type=media or None)

    for path in PATHS:
        r.add_api_route(
            path,
            forward,
            methods=METHODS,
            summary="Forwarded to the Functions Worker",
            include_in_schema=False,
        )
    return r


async def _body(request: Request) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > BODY_BYTES_MAX:
            raise _TooLarge
        parts.append(chunk)
    return b"".join(parts)
