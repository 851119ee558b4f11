"""``magnetar admin tenants list|get|create|update|delete`` (``/admin/v2/tenants``)."""

from __future__ import annotations

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import tenant_path
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import output_option, printer


@click.group(cls=SuggestingGroup)
def tenants() -> None:
    """Tenants: the top level of the naming hierarchy."""


@tenants.command("list")
@output_option
def list_() -> None:
    """List tenants."""
    printer().result(rest().get("/admin/v2/tenants"))


@tenants.command()
@click.argument("tenant")
@output_option
def get(tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    printer().result(rest().get(tenant_path(tenant)))


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _tenant_info(admin_roles: str | None, allowed_clusters: str | None) -> dict[str, list[str]]:
    clusters = _split(allowed_clusters)
    if not clusters:
        clusters = list(rest().get("/admin/v2/clusters") or [])
    return {"adminRoles": _split(admin_roles), "allowedClusters": clusters}


_ROLES = click.option("--admin-roles", "-r", default=None, help="Comma-separated admin roles.")
_CLUSTERS = click.option(
    "--allowed-clusters",
    "-c",
    default=None,
    help="Comma-separated allowed clusters (default: every cluster).",
)


@tenants.command()
@click.argument("tenant")
@_ROLES
@_CLUSTERS
@output_option
def create(tenant: str, admin_roles: str | None, allowed_clusters: str | None) -> None:
    """Create a tenant."""
    rest().put(tenant_path(tenant), _tenant_info(admin_roles, allowed_clusters))
    printer().done(f"Tenant {tenant} created", tenant=tenant)


@tenants.command()
@click.argument("tenant")
@_ROLES
@_CLUSTERS
@output_option
def update(tenant: str, admin_roles: str | None, allowed_clusters: str | None) -> None:
    """Replace a tenant's admin roles and allowed clusters."""
    rest().post(tenant_path(tenant), _tenant_info(admin_roles, allowed_clusters))
    printer().done(f"Tenant {tenant} updated", tenant=tenant)


@tenants.command()
@click.argument("tenant")
@click.option("--force", "-f", is_flag=True, help="Delete its namespaces and topics too.")
@output_option
def delete(tenant: str, force: bool) -> None:
    """Delete a tenant (it must be empty unless --force)."""
    if force:
        rest().delete(tenant_path(tenant), force=True)
    else:
        rest().delete(tenant_path(tenant))
    printer().done(f"Tenant {tenant} deleted", tenant=tenant)
