"""Cluster mode: admin requests about one topic go to the broker that owns it.

As Pulsar's brokers do, a broker answers a topic's admin request (stats, unload,
subscriptions, policies, ...) only for topics of the bundles it holds; elsewhere it answers
307 with the same path and query on the owner's HTTP URL (clients and ``magnetar admin``
follow it). Requests about a partitioned topic's metadata (``/partitions``,
``/partitioned-stats``, ``/partitioned-internalStats``) and namespace-level paths are served
by any broker (each partition gathered from its owner: :mod:`magnetar.admin.partition_owners`).
A bundle no broker holds yet is waited for as lookups wait; then 503.
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import http_error
from magnetar.admin.responses import error_response
from magnetar.common.errors import MagnetarError
from magnetar.common.names import TopicName

ANY_BROKER_ACTIONS = frozenset({"partitions", "partitioned-stats", "partitioned-internalStats"})
"""Actions on a topic path that only read or write metadata (any broker serves them)."""

_DOMAINS = ("persistent", "non-persistent")


def _topic_of(path: str) -> TopicName | None:
    """The topic a ``/admin/v2/<domain>/<tenant>/<ns>/<topic>[/<action>...]`` path is
    about, ``None`` for other paths and for actions any broker serves."""
    parts = path.split("/")
    # ['', 'admin', 'v2', domain, tenant, ns, topic, *action]
    if len(parts) < 7 or parts[1:3] != ["admin", "v2"] or parts[3] not in _DOMAINS:
        return None
    if len(parts) > 7 and parts[7] in ANY_BROKER_ACTIONS:
        return None
    try:
        return TopicName.parse(f"{parts[3]}://{parts[4]}/{parts[5]}/{unquote(parts[6])}")
    except MagnetarError:
        return None  # the route answers with its own error


class OwnerRedirect:
    """The ASGI middleware of ``ctx``'s app (a pass-through without cluster ownership).

    Plain ASGI, not Starlette's ``BaseHTTPMiddleware`` (``app.middleware("http")``), which
    runs every request's app in a task of its own and streams the answer through a memory
    channel: a third of the event loop's time per admin request (1.5 ms for the smallest
    one), the standalone's too, where this middleware has nothing to do."""

    def __init__(self, app: ASGIApp, ctx: AdminContext) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ownership = self.ctx.service.ownership
        if ownership is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        url = Request(scope).url
        topic = _topic_of(url.path)
        if topic is None:
            await self.app(scope, receive, send)
            return
        response: Response
        try:
            owner = await ownership.owner(topic, self.ctx.service.config.lookup_owner_wait_ms)
        except MagnetarError as exc:
            response = error_response(*http_error(exc))
        else:
            if owner.broker_id == ownership.broker_id:
                await self.app(scope, receive, send)
                return
            target = owner.http_url + url.path
            if url.query:
                target += "?" + url.query
            response = RedirectResponse(target, status_code=307)
        await response(scope, receive, send)
