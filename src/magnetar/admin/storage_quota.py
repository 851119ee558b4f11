"""A namespace's storage quota in all: ``GET|POST|DELETE
/admin/v2/namespaces/{tenant}/{namespace}/storageQuota`` with
``{"limitSize": BYTES, "policy": "producer_request_hold" | "producer_exception"}``, stored in
the namespace policies as ``namespaceStorageQuota``. GET answers 204 when none is set.

Pulsar's backlog quota applies to each topic separately; this one bounds the sum of the
backlogs (bytes not yet consumed by the slowest durable subscription) of all the
namespace's topics on the broker. Over it, new producers are held or refused as the
backlog quota's policy of the same name does (:meth:`magnetar.broker.topic.Topic`'s
producer checks); ``consumer_backlog_eviction`` is not offered (which topic would lose
messages is not defined).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, ResourceNotFound
from magnetar.admin.request_body import read_json
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.policies import (
    NAMESPACE_STORAGE_QUOTA_KEY,
    BacklogQuotaPolicy,
    Policies,
)
from magnetar.common.names import NamespaceName
from magnetar.metadata.store import NotFound

POLICIES = (BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD, BacklogQuotaPolicy.PRODUCER_EXCEPTION)


async def _quota(request: Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadRequest("a storageQuota must be a JSON object")
    limit = body.get("limitSize")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise BadRequest("limitSize must be a number of bytes (0 or more)")
    policy = body.get("policy", BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD.value)
    if policy not in [p.value for p in POLICIES]:
        raise BadRequest(f"policy must be one of {', '.join(p.value for p in POLICIES)}")
    return {"limitSize": limit, "policy": policy}


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["storage quota"])
    path = "/admin/v2/namespaces/{tenant}/{namespace}/storageQuota"

    async def edit(ns: NamespaceName, quota: dict[str, Any] | None) -> None:
        await namespace_policies(ctx, ns)

        def change(p: Policies) -> Policies:
            extra = dict(p.extra)
            if quota is None:
                extra.pop(NAMESPACE_STORAGE_QUOTA_KEY, None)
            else:
                extra[NAMESPACE_STORAGE_QUOTA_KEY] = quota
            return p.with_(extra=extra)

        try:
            await ctx.policies.update_namespace(ns, change)
        except NotFound:
            raise ResourceNotFound("Namespace does not exist") from None

    async def get_quota(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response(policies.extra.get(NAMESPACE_STORAGE_QUOTA_KEY))

    async def set_quota(tenant: str, namespace: str, request: Request) -> Response:
        await edit(NamespaceName.of(tenant, namespace), await _quota(request))
        return no_content()

    async def clear_quota(tenant: str, namespace: str) -> Response:
        await edit(NamespaceName.of(tenant, namespace), None)
        return no_content()

    r.add_api_route(path, get_quota, methods=["GET"], summary="The namespace's storage quota")
    r.add_api_route(path, set_quota, methods=["POST"], status_code=204, summary="Set it")
    r.add_api_route(path, clear_quota, methods=["DELETE"], status_code=204, summary="Remove it")
    return r
