"""Tenants: ``/admin/v2/tenants[/{tenant}]``. TenantInfo ``{"adminRoles": [...],
"allowedClusters": [...]}`` is stored at ``/admin/policies/<tenant>``, whose children are
the tenant's namespaces (``magnetar.broker.policies`` layout)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.clusters import cluster_names
from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Conflict, PreconditionFailed, ResourceNotFound
from magnetar.admin.request_body import as_object, as_str_list, read_json
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.policies import NAMESPACE_POLICIES_ROOT
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import MUST_NOT_EXIST, NodeExists, NotFound


def tenant_path(tenant: str) -> str:
    return f"{NAMESPACE_POLICIES_ROOT}/{tenant}"


async def tenant_info(ctx: AdminContext, tenant: str) -> dict[str, Any]:
    """Raises 404 when the tenant does not exist."""
    try:
        got = await ctx.store.get(tenant_path(tenant))
    except NotFound:
        raise ResourceNotFound("Tenant does not exist") from None
    try:
        info = json.loads(got.value) if got.value.strip() else {}
    except ValueError:
        info = {}
    return {
        "adminRoles": info.get("adminRoles") or [],
        "allowedClusters": info.get("allowedClusters") or [],
    }


async def _parse_info(ctx: AdminContext, request: Request) -> dict[str, Any]:
    body = as_object(await read_json(request, {}), "tenant info")
    info = {
        "adminRoles": as_str_list(body.get("adminRoles"), "adminRoles"),
        "allowedClusters": as_str_list(body.get("allowedClusters"), "allowedClusters"),
    }
    known = await cluster_names(ctx)
    missing = [c for c in info["allowedClusters"] if c not in known]
    if missing:
        raise PreconditionFailed(f"Clusters {missing} do not exist")
    return info


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["tenants"])

    @r.get("/admin/v2/tenants", summary="List tenants")
    async def list_tenants() -> Response:
        try:
            names = await ctx.store.children(NAMESPACE_POLICIES_ROOT)
        except NotFound:
            names = []
        return json_response(sorted(names))

    @r.get("/admin/v2/tenants/{tenant}", summary="Get a tenant's info")
    async def get_tenant(tenant: str) -> Response:
        return json_response(await tenant_info(ctx, tenant))

    @r.put("/admin/v2/tenants/{tenant}", summary="Create a tenant")
    async def create_tenant(tenant: str, request: Request) -> Response:
        NamespaceName.of(tenant, "x")
        info = await _parse_info(ctx, request)
        try:
            await ctx.store.put(tenant_path(tenant), json.dumps(info).encode(), MUST_NOT_EXIST)
        except NodeExists:
            raise Conflict("Tenant already exists") from None
        return no_content()

    @r.post("/admin/v2/tenants/{tenant}", summary="Update a tenant")
    async def update_tenant(tenant: str, request: Request) -> Response:
        await tenant_info(ctx, tenant)
        info = await _parse_info(ctx, request)
        await ctx.store.put(tenant_path(tenant), json.dumps(info).encode())
        return no_content()

    @r.delete("/admin/v2/tenants/{tenant}", summary="Delete a tenant")
    async def delete_tenant(tenant: str, force: bool = False) -> Response:
        from magnetar.admin.namespaces import delete_namespace

        await tenant_info(ctx, tenant)
        namespaces = await ctx.store.children(tenant_path(tenant))
        if namespaces and not force:
            raise PreconditionFailed("The tenant still has active namespaces")
        for ns in namespaces:
            await delete_namespace(ctx, NamespaceName.of(tenant, ns), force=True)
        try:
            await ctx.store.delete(tenant_path(tenant))
        except NotFound:
            raise ResourceNotFound("Tenant does not exist") from None
        return no_content()

    return r
