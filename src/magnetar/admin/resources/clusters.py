"""Cluster names: ``/admin/clusters/<name>`` plus the broker's own cluster, which always
exists."""

from __future__ import annotations

from magnetar.admin.context import AdminContext
from magnetar.metadata.store import NotFound
from magnetar.replication.cluster_registry import CLUSTERS_ROOT as CLUSTERS_ROOT


async def cluster_names(ctx: AdminContext) -> list[str]:
    """The known clusters, sorted (the broker's own among them)."""
    try:
        stored = await ctx.store.children(CLUSTERS_ROOT)
    except NotFound:
        stored = []
    return sorted({ctx.cluster, *stored})
