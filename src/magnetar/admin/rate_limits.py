"""Publish rate policies, Pulsar's paths and JSON:

* ``GET|POST|DELETE /admin/v2/namespaces/{t}/{ns}/publishRate`` — body
  ``{"publishThrottlingRateInMsg": N, "publishThrottlingRateInByte": B}`` (0 or less: no
  limit), stored as Pulsar does in the namespace's ``publishMaxMessageRate`` under this
  cluster's name; it applies to each topic of the namespace;
* ``GET|POST|DELETE /admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}/publishRate`` —
  the same for one topic (topic policy ``publishRate``), which wins over the namespace's.

A topic over its rate is throttled: its publishers' connections are not read until the
rate allows (backpressure, not errors), counted in topic stats ``publishRateLimitedTimes``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, ResourceNotFound
from magnetar.admin.namespaces import namespace_policies
from magnetar.admin.request_body import read_json
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.policies import Policies, TopicPolicies
from magnetar.common.names import NamespaceName, TopicDomain, TopicName
from magnetar.metadata.store import NotFound

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/publishRate"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/publishRate"
NS_KEY, TOPIC_KEY = "publishMaxMessageRate", "publishRate"
_FIELDS = ("publishThrottlingRateInMsg", "publishThrottlingRateInByte")


async def _rate(request: Request) -> dict[str, int]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadRequest("a publish rate must be a JSON object")
    rate = {}
    for key in _FIELDS:
        value = body.get(key, -1)
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadRequest(f"{key} must be an integer")
        rate[key] = value
    return rate


def _topic(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    try:
        kind = TopicDomain(domain)
    except ValueError:
        raise ResourceNotFound(f"Unknown topic domain {domain!r}") from None
    return TopicName.of(kind, tenant, namespace, unquote(topic))


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["rate limits"])

    async def edit_namespace(ns: NamespaceName, rate: dict[str, int] | None) -> None:
        await namespace_policies(ctx, ns)

        def change(p: Policies) -> Policies:
            extra = dict(p.extra)
            rates = dict(extra.get(NS_KEY) or {})
            if rate is None:
                rates.pop(ctx.cluster, None)
            else:
                rates[ctx.cluster] = rate
            extra[NS_KEY] = rates or None
            return p.with_(extra=extra)

        try:
            await ctx.policies.update_namespace(ns, change)
        except NotFound:
            raise ResourceNotFound("Namespace does not exist") from None

    @r.get(NAMESPACE, summary="The namespace's publish rate per topic")
    async def get_ns(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response((policies.extra.get(NS_KEY) or {}).get(ctx.cluster))

    @r.post(NAMESPACE, status_code=204, summary="Set the publish rate of each topic")
    async def set_ns(tenant: str, namespace: str, request: Request) -> Response:
        await edit_namespace(NamespaceName.of(tenant, namespace), await _rate(request))
        return no_content()

    @r.delete(NAMESPACE, status_code=204, summary="Remove the namespace's publish rate")
    async def clear_ns(tenant: str, namespace: str) -> Response:
        await edit_namespace(NamespaceName.of(tenant, namespace), None)
        return no_content()

    async def edit_topic(name: TopicName, rate: dict[str, int] | None) -> None:
        await namespace_policies(ctx, name.namespace_name)

        def change(p: TopicPolicies) -> TopicPolicies:
            extra: dict[str, Any] = dict(p.extra)
            if rate is None:
                extra.pop(TOPIC_KEY, None)
            else:
                extra[TOPIC_KEY] = rate
            return p.with_(extra=extra)

        await ctx.policies.update_topic(name, change)

    @r.get(TOPIC, summary="The topic's publish rate")
    async def get_topic(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        policies = await ctx.policies.get_topic(_topic(domain, tenant, namespace, topic))
        return json_response(None if policies is None else policies.extra.get(TOPIC_KEY))

    @r.post(TOPIC, status_code=204, summary="Set the topic's publish rate")
    async def set_topic(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        await edit_topic(_topic(domain, tenant, namespace, topic), await _rate(request))
        return no_content()

    @r.delete(TOPIC, status_code=204, summary="Remove the topic's publish rate")
    async def clear_topic(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        await edit_topic(_topic(domain, tenant, namespace, topic), None)
        return no_content()

    return r
