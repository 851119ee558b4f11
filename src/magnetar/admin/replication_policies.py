"""Replication clusters of a namespace and of a topic, as Pulsar's REST spells them.

* ``POST /admin/v2/namespaces/{tenant}/{namespace}/replication`` with a JSON list of
  cluster names sets the namespace's ``replication_clusters`` (204); ``GET`` answers the
  list.
* ``POST|GET|DELETE /admin/v2/{domain}/{tenant}/{namespace}/{topic}/replication``: the
  topic-level override (``replicationClusters`` of Pulsar's ``TopicPolicies``); ``GET``
  answers 204 with no body while unset, ``?applied=true`` the namespace's list then.

Checks, with Pulsar's statuses: a body that is not a list of strings 400 (malformed JSON
too); a cluster not registered in this cluster's metadata store (``admin clusters
create``) 403 ``Invalid cluster id: <name>``; a cluster outside the tenant's
``allowedClusters`` 403; ``global`` 412. A topic-level list must also be within the
namespace's clusters (412), as Pulsar requires.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import PreconditionFailed, RestError
from magnetar.admin.request_body import as_str_list, read_json
from magnetar.admin.resources.clusters import cluster_names
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.resources.tenants import tenant_info
from magnetar.admin.responses import json_response, no_content
from magnetar.admin.topic_policies import checked_topic
from magnetar.admin.topics import TOPIC, topic_name
from magnetar.broker.policies import TopicPolicies
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import NotFound
from magnetar.replication.policy import TOPIC_POLICY_KEY, topic_replication_clusters


class Forbidden(RestError):
    """403: the request names a cluster the namespace may not use."""

    status: ClassVar[int] = 403


async def checked_clusters(ctx: AdminContext, tenant: str, value: Any) -> tuple[str, ...]:
    """``value`` as a sorted, de-duplicated tuple of clusters the tenant may use; raises
    the errors the module docstring lists."""
    clusters = sorted(set(as_str_list(value, "replication clusters")))
    if "global" in clusters:
        raise PreconditionFailed("Cannot specify global in the list of replication clusters")
    known = set(await cluster_names(ctx))
    allowed = set((await tenant_info(ctx, tenant))["allowedClusters"])
    for cluster in clusters:
        if cluster not in known:
            raise Forbidden(f"Invalid cluster id: {cluster}")
        if cluster not in allowed:
            raise Forbidden(
                f"Cluster {cluster} is not in the list of allowed clusters list for "
                f"tenant [{tenant}]"
            )
    return tuple(clusters)


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["replication"])
    ns_path = "/admin/v2/namespaces/{tenant}/{namespace}/replication"

    @r.get(ns_path, summary="Get a namespace's replication clusters")
    async def get_namespace_clusters(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response(list(policies.replication_clusters))

    @r.post(ns_path, summary="Set a namespace's replication clusters")
    async def set_namespace_clusters(tenant: str, namespace: str, request: Request) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        await namespace_policies(ctx, ns)
        clusters = await checked_clusters(ctx, tenant, await read_json(request))
        try:
            await ctx.policies.update_namespace(
                ns, lambda p: p.with_(replication_clusters=clusters)
            )
        except NotFound:
            raise PreconditionFailed("Namespace does not exist") from None
        return no_content()

    topic_path = f"{TOPIC}/replication"

    @r.get(topic_path, summary="Get a topic's replication clusters")
    async def get_topic_clusters(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        applied: bool = False,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        own = topic_replication_clusters(await ctx.policies.get_topic(name))
        if own is None and applied:
            own = (await namespace_policies(ctx, name.namespace_name)).replication_clusters
        return no_content() if own is None else json_response(list(own))

    @r.post(topic_path, summary="Set a topic's replication clusters")
    async def set_topic_clusters(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        clusters = await checked_clusters(ctx, tenant, await read_json(request))
        ns_clusters = (await namespace_policies(ctx, name.namespace_name)).replication_clusters
        outside = [c for c in clusters if c not in ns_clusters]
        if outside:
            raise PreconditionFailed(
                f"Clusters {outside} are not in the namespace's replication clusters"
            )
        await ctx.policies.update_topic(name, lambda p: _with_clusters(p, list(clusters)))
        return no_content()

    @r.delete(topic_path, summary="Remove a topic's replication clusters")
    async def remove_topic_clusters(
        domain: str, tenant: str, namespace: str, topic: str, isGlobal: bool = False
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        await ctx.policies.update_topic(name, lambda p: _with_clusters(p, None))
        return no_content()

    return r


def _with_clusters(policies: TopicPolicies, clusters: list[str] | None) -> TopicPolicies:
    extra = dict(policies.extra)
    if clusters is None:
        extra.pop(TOPIC_POLICY_KEY, None)
    else:
        extra[TOPIC_POLICY_KEY] = clusters
    return policies.with_(extra=extra)
