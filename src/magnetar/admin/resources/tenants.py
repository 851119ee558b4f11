"""Tenant operations. TenantInfo ``{"adminRoles": [...], "allowedClusters": [...]}`` is
stored at ``/admin/policies/<tenant>``, whose children are the tenant's namespaces
(:mod:`magnetar.broker.policies` layout)."""

from __future__ import annotations

import json
from typing import Any

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Conflict, PreconditionFailed, ResourceNotFound
from magnetar.admin.resources.clusters import cluster_names
from magnetar.admin.resources.namespaces import delete_namespace
from magnetar.broker.policies import NAMESPACE_POLICIES_ROOT
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import MUST_NOT_EXIST, NodeExists, NotFound


def tenant_path(tenant: str) -> str:
    return f"{NAMESPACE_POLICIES_ROOT}/{tenant}"


def check_tenant_name(tenant: str) -> None:
    """Raises InvalidTopicName unless ``tenant`` follows the naming rules."""
    NamespaceName.of(tenant, "x")


async def list_tenants(ctx: AdminContext) -> list[str]:
    """Every tenant's name, sorted."""
    try:
        names = await ctx.store.children(NAMESPACE_POLICIES_ROOT)
    except NotFound:
        names = []
    return sorted(names)


async def tenant_info(ctx: AdminContext, tenant: str) -> dict[str, Any]:
    """The tenant's TenantInfo (a stored value that is not JSON reads as empty). Raises
    ResourceNotFound when the tenant does not exist."""
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


async def _check_clusters(ctx: AdminContext, info: dict[str, Any]) -> None:
    known = await cluster_names(ctx)
    missing = [c for c in info["allowedClusters"] if c not in known]
    if missing:
        raise PreconditionFailed(f"Clusters {missing} do not exist")


async def create_tenant(ctx: AdminContext, tenant: str, info: dict[str, Any]) -> None:
    """Store a new tenant. Raises InvalidTopicName (a bad name), PreconditionFailed (an
    unknown cluster), Conflict (it exists)."""
    check_tenant_name(tenant)
    await _check_clusters(ctx, info)
    try:
        await ctx.store.put(tenant_path(tenant), json.dumps(info).encode(), MUST_NOT_EXIST)
    except NodeExists:
        raise Conflict("Tenant already exists") from None


async def update_tenant(ctx: AdminContext, tenant: str, info: dict[str, Any]) -> None:
    """Replace the tenant's info. Raises ResourceNotFound, PreconditionFailed."""
    await tenant_info(ctx, tenant)
    await _check_clusters(ctx, info)
    await ctx.store.put(tenant_path(tenant), json.dumps(info).encode())


async def delete_tenant(ctx: AdminContext, tenant: str, *, force: bool) -> None:
    """Delete a tenant. PreconditionFailed while it has namespaces, unless ``force``, which
    deletes them (and their topics) first; ResourceNotFound if it does not exist."""
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
