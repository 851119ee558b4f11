"""Cluster names: ``/admin/clusters/<name>`` plus the broker's own cluster, which always
exists."""

from __future__ import annotations

from magnetar.admin.context import AdminContext
from magnetar.metadata.store import NotFound

CLUSTERS_ROOT = "/admin/clusters"


async def cluster_names(ctx: AdminContext) -> list[str]:
    """The known clusters, sorted (the broker's own among them)."""
    try:
        stored = await ctx.store.children(CLUSTERS_ROOT)
    except NotFound:
        stored = []
    return sorted({ctx.cluster, *stored})
