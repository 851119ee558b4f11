"""A namespace's stored ``Policies``: read it (404 when the namespace does not exist) and
change it. The lowest resource: topics check their namespace through it."""

from __future__ import annotations

from typing import Any

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import ResourceNotFound
from magnetar.broker.policies import Policies
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import NotFound


async def namespace_policies(ctx: AdminContext, ns: NamespaceName) -> Policies:
    """The namespace's policies. Raises ResourceNotFound when the namespace does not
    exist (a stored value that cannot be read raises the policy store's error: a 500)."""
    policies = await ctx.policies.get_namespace(ns)
    if policies is None:
        raise ResourceNotFound("Namespace does not exist")
    return policies


async def update_namespace_policies(ctx: AdminContext, ns: NamespaceName, **changes: Any) -> None:
    """Set the given ``Policies`` fields (a compare-and-set on the stored value; answers
    once this broker's loaded topics apply it). Raises ResourceNotFound."""
    await namespace_policies(ctx, ns)
    try:
        await ctx.policies.update_namespace(ns, lambda p: p.with_(**changes))
    except NotFound:
        raise ResourceNotFound("Namespace does not exist") from None
