"""The web console's routes in the admin app.

* ``GET /`` and ``GET /console/{asset}``: the page, its script and its style sheet, read
  from the package once and served without credentials (they hold no data). They are
  plain Starlette routes, outside the admin app's request guard.
* ``GET /admin/v2/console/namespaces``: the namespaces the caller's role may see (its
  tenants' as tenant admin, every one as super user, and those granting it produce or
  consume). Any authenticated role may ask; the answer is filtered by role.
* ``GET /admin/v2/console/cluster``: brokers, the controller and its epoch, bookies with
  their read-only state and free and total disk, bundle ownership (super user, as the
  brokers' REST).
* ``GET /admin/v2/console/history/{domain}/{tenant}/{namespace}/{topic}``: the last minutes
  of the topic's rates and backlog on this broker (:mod:`magnetar.console.history`), under
  the authorization of topic stats.
* ``GET /admin/v2/console/owner/{domain}/{tenant}/{namespace}/{topic}``: the broker serving
  the topic (``{"brokerId", "httpUrl", "local"}``), under the same authorization. The page
  reads other brokers' topics on their own console: a browser does not follow the admin
  API's 307 to another origin with the token.

Everything else the console shows comes from the admin REST API itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from importlib import resources
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import ResourceNotFound
from magnetar.admin.resources.namespaces import list_namespaces
from magnetar.admin.resources.tenants import list_tenants
from magnetar.admin.responses import json_response
from magnetar.bookie_protocol.layout import AVAILABLE_PATH, READONLY_NAME
from magnetar.broker.ownership import OWNERSHIP_ROOT, current_controller, registered_brokers
from magnetar.common.errors import MagnetarError
from magnetar.common.names import NamespaceName, TopicDomain, TopicName
from magnetar.console.history import SAMPLE_INTERVAL_S, HistorySampler
from magnetar.metadata.store import NotFound

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
HISTORY_PATH = "/admin/v2/console/history/{domain}/{tenant}/{namespace}/{topic}"
OWNER_PATH = "/admin/v2/console/owner/{domain}/{tenant}/{namespace}/{topic}"
NAMESPACES_PATH = "/admin/v2/console/namespaces"
BUNDLES_MAX = 10_000
"""Ownership nodes the cluster view reads at most."""
BOOKIES_MAX = 1_000
"""Bookie registrations the cluster view reads at most."""

_FUNCTIONS_PROBE = "/admin/v3/functions/public/default"
"""A path only the Functions Worker's routes match."""
_SECURITY_HEADERS = {
    # The page loads nothing from elsewhere and talks only to this broker.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def _asset_bodies() -> dict[str, bytes]:
    folder = resources.files("magnetar.console").joinpath("assets")
    return {name: folder.joinpath(name).read_bytes() for name in ASSETS}


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["console"])
    bodies = _asset_bodies()
    sampler = HistorySampler(ctx.service, ctx.service.clock)

    def asset(name: str) -> Response:
        return Response(bodies[name], media_type=ASSETS[name], headers=_SECURITY_HEADERS)

    async def index(request: Request) -> Response:
        return asset("index.html")

    async def console_asset(request: Request) -> Response:
        name = str(request.path_params["asset"])
        if name not in ASSETS:
            return json_response({"reason": "Not Found"}, 404)
        return asset(name)

    r.add_route("/", index, methods=["GET"], include_in_schema=False)
    r.add_route("/console/{asset}", console_asset, methods=["GET"], include_in_schema=False)

    @r.get(NAMESPACES_PATH, summary="The namespaces the caller's role may see, by tenant")
    async def namespaces(request: Request) -> Response:
        """``{"role", "superUser", "functions", "clusterMode", "tenants": {tenant: [{"name",
        "admin"}]}}``:
        ``admin`` where the role administers the tenant (lists topics, acts on them);
        other namespaces are listed where the role may produce or consume there.
        ``functions`` says whether this host runs a Functions Worker."""
        role = getattr(request.state, "auth_role", None)
        access = ctx.service.access
        every = not access.enabled or access.authorizer.is_super_user(role)
        visible: dict[str, list[dict[str, Any]]] = {}
        for tenant in await list_tenants(ctx):
            with contextlib.suppress(NotFound):
                names = await list_namespaces(ctx, tenant)
                admin = every or await access.is_tenant_admin(role, tenant)
                if not admin:
                    names = [n for n in names if await _may_list(ctx, role, n)]
                if names:
                    visible[tenant] = [{"name": n, "admin": admin} for n in names]
        functions = _serves_functions(request.app.routes)
        return json_response(
            {
                "role": role,
                "superUser": every,
                "functions": functions,
                "clusterMode": ctx.service.ownership is not None,
                "tenants": visible,
            }
        )

    @r.get("/admin/v2/console/cluster", summary="Brokers, controller, bookies and bundles")
    async def cluster() -> Response:
        store = ctx.service.store
        controller = await current_controller(store)
        return json_response(
            {
                "cluster": ctx.cluster,
                "clusterMode": ctx.service.ownership is not None,
                "brokers": await registered_brokers(store)
                if ctx.service.ownership is not None
                else [f"{ctx.advertised_host}:{ctx.http_port}"],
                "controller": None
                if controller is None
                else {"brokerId": controller.address.broker_id, "epoch": controller.epoch},
                "bookies": await _bookies(store),
                "bundles": await _bundle_owners(store),
            }
        )

    @r.get(OWNER_PATH, summary="The broker serving a topic")
    async def owner(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = _topic_name(domain, tenant, namespace, topic)
        ownership = ctx.service.ownership
        here = f"{ctx.advertised_host}:{ctx.http_port}"
        if ownership is None:
            return json_response({"brokerId": here, "httpUrl": ctx.http_url, "local": True})
        await ctx.service.require_namespace(name)
        address = await ownership.owner(name, ctx.service.config.lookup_owner_wait_ms)
        local = address.broker_id == ownership.broker_id
        return json_response(
            {"brokerId": address.broker_id, "httpUrl": address.http_url, "local": local}
        )

    @r.get(HISTORY_PATH, summary="The last minutes of a topic's rates and backlog")
    async def history(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = _topic_name(domain, tenant, namespace, topic)
        names = [name.full_name]
        if not name.is_partition:
            prefix = name.full_name + "-partition-"
            names += [n for n in sampler.history.topic_names() if n.startswith(prefix)]
        samples = sampler.read(names)
        return json_response(
            {"intervalSeconds": SAMPLE_INTERVAL_S, "samples": [s.to_json() for s in samples]}
        )

    return r


def _serves_functions(routes: list[BaseRoute]) -> bool:
    """Whether the app has the Functions Worker's routes."""
    probe = {"type": "http", "method": "GET", "path": _FUNCTIONS_PROBE, "root_path": ""}
    return any(route.matches(probe)[0] is Match.FULL for route in routes)


def _topic_name(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    try:
        return TopicName.of(TopicDomain(domain), tenant, namespace, unquote(topic))
    except (ValueError, MagnetarError):
        raise ResourceNotFound("Topic not found") from None


async def _may_list(ctx: AdminContext, role: str | None, namespace: str) -> bool:
    try:
        await ctx.service.access.check_namespace(role, NamespaceName.parse(namespace))
    except MagnetarError:
        return False
    return True


async def _bookies(store: Any) -> list[dict[str, Any]]:
    """Registered bookies, writable and read-only, with the free and total disk bytes their
    registration carries (``None`` when it has none: see :mod:`magnetar.bookie.state`)."""
    nodes: list[tuple[str, str, bool]] = []
    for path, read_only in ((AVAILABLE_PATH, False), (f"{AVAILABLE_PATH}/{READONLY_NAME}", True)):
        with contextlib.suppress(NotFound):
            for bookie in await store.children(path):
                if bookie != READONLY_NAME:
                    nodes.append((f"{path}/{bookie}", bookie, read_only))
    found = await asyncio.gather(*(_bookie(store, *node) for node in nodes[:BOOKIES_MAX]))
    return sorted(found, key=lambda b: str(b["bookieId"]))


async def _bookie(store: Any, path: str, bookie: str, read_only: bool) -> dict[str, Any]:
    try:
        body = json.loads((await store.get(path)).value)
    except (NotFound, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    free, total = body.get("disk_free_bytes"), body.get("disk_total_bytes")
    return {
        "bookieId": bookie,
        "readOnly": read_only,
        "diskFreeBytes": free if isinstance(free, int) else None,
        "diskTotalBytes": total if isinstance(total, int) else None,
    }


async def _bundle_owners(store: Any) -> list[dict[str, Any]]:
    """Each owned bundle with its owner (``/namespace/<tenant>/<ns>/<range>``), at most
    :data:`BUNDLES_MAX`."""
    owners: list[dict[str, Any]] = []
    with contextlib.suppress(NotFound):
        for tenant in await store.children(OWNERSHIP_ROOT):
            with contextlib.suppress(NotFound):
                for ns in await store.children(f"{OWNERSHIP_ROOT}/{tenant}"):
                    with contextlib.suppress(NotFound):
                        for bundle in await store.children(f"{OWNERSHIP_ROOT}/{tenant}/{ns}"):
                            if len(owners) >= BUNDLES_MAX:
                                return owners
                            owners.append(await _owner(store, f"{tenant}/{ns}", bundle))
    return owners


async def _owner(store: Any, namespace: str, bundle: str) -> dict[str, Any]:
    try:
        got = await store.get(f"{OWNERSHIP_ROOT}/{namespace}/{bundle}")
        body = json.loads(got.value)
    except (NotFound, ValueError):
        body = {}
    broker = body.get("brokerId") if isinstance(body, dict) else None
    return {"namespace": namespace, "bundle": bundle, "brokerId": broker}
