"""Namespace operations: list, create (with the broker's defaults), read the policies as
Pulsar shows them, delete (cascading to the namespace's topics), list its topics.

Policies are stored through :class:`magnetar.broker.policies.PolicyStore` (Pulsar's
``Policies`` JSON at ``/admin/policies/<tenant>/<namespace>``); reading and changing them
one field at a time is :mod:`magnetar.admin.resources.namespace_policies`.
"""

from __future__ import annotations

from typing import Any

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Conflict, PreconditionFailed, ResourceNotFound
from magnetar.admin.resources.namespace_policies import (
    namespace_policies,
    update_namespace_policies,
)
from magnetar.admin.resources.topics import delete_namespace_topics
from magnetar.broker.policies import NAMESPACE_POLICIES_ROOT, Policies, namespace_path
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import NodeExists, NotFound
from magnetar.protocol import TopicsMode

__all__ = [
    "create_namespace",
    "delete_namespace",
    "list_namespaces",
    "namespace_policies",
    "namespace_policies_json",
    "update_namespace_policies",
]

ONE_BUNDLE = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}


async def list_namespaces(ctx: AdminContext, tenant: str) -> list[str]:
    """``tenant/namespace`` of each of the tenant's namespaces, sorted (the caller checks
    that the tenant exists)."""
    names = await ctx.store.children(f"{NAMESPACE_POLICIES_ROOT}/{tenant}")
    return [f"{tenant}/{n}" for n in sorted(names)]


async def create_namespace(ctx: AdminContext, ns: NamespaceName, policies: Policies) -> None:
    """Store a new namespace: replicated to this broker's cluster unless ``policies`` say
    otherwise, one bundle unless they say otherwise. Raises Conflict when it exists (the
    caller checks the tenant)."""
    if not policies.replication_clusters:
        policies = policies.with_(replication_clusters=(ctx.cluster,))
    extra = dict(policies.extra)
    extra.setdefault("bundles", dict(ONE_BUNDLE))
    policies = policies.with_(extra=extra)
    try:
        await ctx.policies.create_namespace(ns, policies)
    except NodeExists:
        raise Conflict("Namespace already exists") from None


async def namespace_policies_json(ctx: AdminContext, ns: NamespaceName) -> dict[str, Any]:
    """The namespace's ``Policies`` JSON; in a cluster its ``bundles`` are the
    controller's current ones. Raises ResourceNotFound."""
    body = (await namespace_policies(ctx, ns)).to_json()
    ownership = ctx.service.ownership
    if ownership is not None:  # in a cluster the bundles are the controller's
        bundles = await ownership.namespace_bundles(str(ns))
        if bundles is not None:
            names = bundles.to_names()
            body["bundles"] = {"boundaries": names, "numBundles": len(names) - 1}
    return body


async def delete_namespace(ctx: AdminContext, ns: NamespaceName, *, force: bool) -> None:
    """Delete a namespace. PreconditionFailed while it has topics, unless ``force``, which
    deletes them first (disconnecting their clients); ResourceNotFound if it does not
    exist."""
    await namespace_policies(ctx, ns)
    topics = await ctx.service.topics_of_namespace(ns, TopicsMode.ALL)
    if topics and not force:
        raise PreconditionFailed("Cannot delete non empty namespace")
    await delete_namespace_topics(ctx, ns)
    try:
        await ctx.store.delete(namespace_path(ns))
    except NotFound:
        raise ResourceNotFound("Namespace does not exist") from None
