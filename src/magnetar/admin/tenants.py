"""Tenants: ``/admin/v2/tenants[/{tenant}]``, routes over
:mod:`magnetar.admin.resources.tenants`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.request_body import as_object, as_str_list, read_json
from magnetar.admin.resources import tenants
from magnetar.admin.resources.tenants import tenant_info
from magnetar.admin.responses import json_response, no_content


def _parse_info(body: Any) -> dict[str, Any]:
    body = as_object(body, "tenant info")
    return {
        "adminRoles": as_str_list(body.get("adminRoles"), "adminRoles"),
        "allowedClusters": as_str_list(body.get("allowedClusters"), "allowedClusters"),
    }


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["tenants"])

    @r.get("/admin/v2/tenants", summary="List tenants")
    async def list_tenants() -> Response:
        return json_response(await tenants.list_tenants(ctx))

    @r.get("/admin/v2/tenants/{tenant}", summary="Get a tenant's info")
    async def get_tenant(tenant: str) -> Response:
        return json_response(await tenant_info(ctx, tenant))

    @r.put("/admin/v2/tenants/{tenant}", summary="Create a tenant")
    async def create_tenant(tenant: str, request: Request) -> Response:
        tenants.check_tenant_name(tenant)
        await tenants.create_tenant(ctx, tenant, _parse_info(await read_json(request, {})))
        return no_content()

    @r.post("/admin/v2/tenants/{tenant}", summary="Update a tenant")
    async def update_tenant(tenant: str, request: Request) -> Response:
        await tenant_info(ctx, tenant)
        await tenants.update_tenant(ctx, tenant, _parse_info(await read_json(request, {})))
        return no_content()

    @r.delete("/admin/v2/tenants/{tenant}", summary="Delete a tenant")
    async def delete_tenant(tenant: str, force: bool = False) -> Response:
        await tenants.delete_tenant(ctx, tenant, force=force)
        return no_content()

    return r
