"""Clusters: ``/admin/v2/clusters[/{cluster}]`` (GET, PUT creates, POST updates, DELETE).
ClusterData (``serviceUrl[Tls]``, ``brokerServiceUrl[Tls]``, ``peerClusterNames``, ...) is
stored at ``/admin/clusters/<name>`` of this cluster's own metadata store: each cluster
registers the others it replicates with (geo-replication reads ``brokerServiceUrl`` from
here). The broker's own cluster always exists (its data is derived from the broker's URLs
until someone stores other values) and cannot be deleted."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, Conflict, PreconditionFailed, ResourceNotFound
from magnetar.admin.request_body import as_object, as_str_list, read_json
from magnetar.admin.resources.clusters import CLUSTERS_ROOT, cluster_names
from magnetar.admin.responses import json_response, no_content
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import MUST_NOT_EXIST, NodeExists, NotFound

_STRING_FIELDS = (
    "serviceUrl",
    "serviceUrlTls",
    "brokerServiceUrl",
    "brokerServiceUrlTls",
    "proxyServiceUrl",
    "authenticationPlugin",
    "authenticationParameters",
)


def _cluster_data(value: Any) -> dict[str, Any]:
    body = as_object(value, "cluster data")
    data: dict[str, Any] = {}
    for key in _STRING_FIELDS:
        if body.get(key) is not None:
            if not isinstance(body[key], str):
                raise BadRequest(f"{key} must be a string")
            data[key] = body[key]
    data["peerClusterNames"] = as_str_list(body.get("peerClusterNames"), "peerClusterNames")
    for key, val in body.items():
        data.setdefault(key, val)
    return data


def _default_data(ctx: AdminContext) -> dict[str, Any]:
    return {
        "serviceUrl": ctx.http_url,
        "serviceUrlTls": "",
        "brokerServiceUrl": ctx.service.service_url,
        "brokerServiceUrlTls": ctx.service.service_url_tls or "",
        "peerClusterNames": [],
    }


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["clusters"])

    def check_name(cluster: str) -> None:
        NamespaceName.of(cluster, "x")  # the same name rule as tenants (400 otherwise)

    @r.get("/admin/v2/clusters", summary="List clusters")
    async def list_clusters() -> Response:
        return json_response(await cluster_names(ctx))

    @r.get("/admin/v2/clusters/{cluster}", summary="Get a cluster's data")
    async def get_cluster(cluster: str) -> Response:
        data = await cluster_data(ctx, cluster)
        if data is None:  # absent, or only the parent of its isolation policies
            raise ResourceNotFound("Cluster does not exist")
        return json_response(data)

    @r.put("/admin/v2/clusters/{cluster}", summary="Create a cluster")
    async def create_cluster(cluster: str, request: Request) -> Response:
        check_name(cluster)
        data = _cluster_data(await read_json(request, {}))
        if cluster == ctx.cluster:
            raise Conflict("Cluster already exists")
        try:
            await ctx.store.put(
                f"{CLUSTERS_ROOT}/{cluster}", json.dumps(data).encode(), MUST_NOT_EXIST
            )
        except NodeExists:
            raise Conflict("Cluster already exists") from None
        return no_content()

    @r.post("/admin/v2/clusters/{cluster}", summary="Update a cluster")
    async def update_cluster(cluster: str, request: Request) -> Response:
        check_name(cluster)
        data = _cluster_data(await read_json(request))
        path = f"{CLUSTERS_ROOT}/{cluster}"
        if cluster != ctx.cluster and await ctx.store.exists(path) is None:
            raise ResourceNotFound("Cluster does not exist")
        await ctx.store.put(path, json.dumps(data).encode())
        return no_content()

    @r.get("/admin/v2/clusters/{cluster}/peers", summary="Get a cluster's peer clusters")
    async def get_peers(cluster: str) -> Response:
        data = await cluster_data(ctx, cluster)
        if data is None:
            raise ResourceNotFound("Cluster does not exist")
        return json_response(data.get("peerClusterNames") or [])

    @r.post("/admin/v2/clusters/{cluster}/peers", summary="Set a cluster's peer clusters")
    async def set_peers(cluster: str, request: Request) -> Response:
        peers = as_str_list(await read_json(request), "peer cluster names")
        data = await cluster_data(ctx, cluster)
        if data is None:
            raise ResourceNotFound("Cluster does not exist")
        known = await cluster_names(ctx)
        for peer in peers:
            if peer == cluster or peer not in known:
                raise PreconditionFailed(f"Peer cluster {peer} does not exist or is {cluster}")
        data["peerClusterNames"] = peers
        await ctx.store.put(f"{CLUSTERS_ROOT}/{cluster}", json.dumps(data).encode())
        return no_content()

    @r.delete("/admin/v2/clusters/{cluster}", summary="Delete a cluster")
    async def delete_cluster(cluster: str) -> Response:
        if cluster == ctx.cluster:
            raise PreconditionFailed("Cannot delete the broker's own cluster")
        path = f"{CLUSTERS_ROOT}/{cluster}"
        if await ctx.store.exists(path) is None:
            raise ResourceNotFound("Cluster does not exist")
        await ctx.store.delete_recursive(path)  # with its namespace isolation policies
        return no_content()

    return r


async def cluster_data(ctx: AdminContext, cluster: str) -> dict[str, Any] | None:
    """The stored ClusterData of ``cluster`` (the defaults for the broker's own cluster),
    or None when it is not registered."""
    try:
        got = await ctx.store.get(f"{CLUSTERS_ROOT}/{cluster}")
    except NotFound:
        got = None
    if got is None or not got.value.strip():
        return _default_data(ctx) if cluster == ctx.cluster else None
    data: dict[str, Any] = json.loads(got.value)
    return data
