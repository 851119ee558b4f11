"""Rate policies, Pulsar's paths and JSON. For each ``{kind}`` below:
``GET|POST|DELETE /admin/v2/namespaces/{t}/{ns}/{kind}`` (stored as Pulsar stores it, in
the namespace policies under this cluster's name) and
``GET|POST|DELETE /admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}/{kind}`` (a topic
policy, which wins over the namespace's). GET answers 204 when nothing is set.

* ``publishRate`` — ``{"publishThrottlingRateInMsg": N, "publishThrottlingRateInByte": B}``
  (0 or less: no limit), stored in ``publishMaxMessageRate``; applies to each topic. A topic
  over it is throttled: its publishers' connections are not read until the rate allows
  (backpressure, not errors), counted in topic stats ``publishRateLimitedTimes``.
* ``publishRatePerProducer`` — the same JSON as ``publishRate``, stored in
  ``publishRatePerProducer`` (namespace) or ``publishRatePerProducer`` (topic): each
  producer of each topic gets this budget of its own.
* ``namespacePublishRate`` (namespace only) — the same JSON, stored in
  ``namespacePublishRate``: one budget shared by all topics of the namespace on this
  broker (what Pulsar does with a resource group's publish rate).
* ``dispatchRate`` — ``{"dispatchThrottlingRateInMsg": N, "dispatchThrottlingRateInByte": B,
  "ratePeriodInSecond": S, "relativeToPublishRate": false}``, stored in
  ``topicDispatchRate``: what each topic sends to all its subscriptions together; with
  ``relativeToPublishRate`` the limit is the topic's publish rate plus N / B.
* ``subscriptionDispatchRate`` — the same JSON, stored in ``subscriptionDispatchRate``: what
  each subscription receives. Over a dispatch rate the dispatcher waits; nothing is dropped.
* ``subscribeRate`` — ``{"subscribeThrottlingRatePerConsumer": N, "ratePeriodInSecond": S}``
  (S 30 by default), stored in ``clusterSubscribeRate``: SUBSCRIBEs per client address on
  each topic; one over it waits until the rate allows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, ResourceNotFound
from magnetar.admin.request_body import read_json
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.policies import Policies, TopicPolicies
from magnetar.common.names import NamespaceName, TopicDomain, TopicName
from magnetar.metadata.store import NotFound


@dataclass(frozen=True, slots=True)
class RateKind:
    """One rate policy: its path segment, its keys in namespace and topic policies, and
    its JSON fields with their defaults (ints; ``relativeToPublishRate`` a bool)."""

    path: str
    namespace_key: str
    topic_key: str
    fields: tuple[tuple[str, int | bool], ...]
    topic_level: bool = True
    """Whether a topic may set it too (else namespace only)."""


PUBLISH_RATE = RateKind(
    "publishRate",
    "publishMaxMessageRate",
    "publishRate",
    (("publishThrottlingRateInMsg", -1), ("publishThrottlingRateInByte", -1)),
)
PRODUCER_PUBLISH_RATE = RateKind(
    "publishRatePerProducer",
    "publishRatePerProducer",
    "publishRatePerProducer",
    PUBLISH_RATE.fields,
)
NAMESPACE_PUBLISH_RATE = RateKind(
    "namespacePublishRate",
    "namespacePublishRate",
    "namespacePublishRate",
    PUBLISH_RATE.fields,
    topic_level=False,
)
_DISPATCH_FIELDS: tuple[tuple[str, int | bool], ...] = (
    ("dispatchThrottlingRateInMsg", -1),
    ("dispatchThrottlingRateInByte", -1),
    ("ratePeriodInSecond", 1),
    ("relativeToPublishRate", False),
)
DISPATCH_RATE = RateKind("dispatchRate", "topicDispatchRate", "dispatchRate", _DISPATCH_FIELDS)
SUBSCRIPTION_DISPATCH_RATE = RateKind(
    "subscriptionDispatchRate",
    "subscriptionDispatchRate",
    "subscriptionDispatchRate",
    _DISPATCH_FIELDS,
)
SUBSCRIBE_RATE = RateKind(
    "subscribeRate",
    "clusterSubscribeRate",
    "subscribeRate",
    (("subscribeThrottlingRatePerConsumer", -1), ("ratePeriodInSecond", 30)),
)
KINDS = (
    PUBLISH_RATE,
    PRODUCER_PUBLISH_RATE,
    NAMESPACE_PUBLISH_RATE,
    DISPATCH_RATE,
    SUBSCRIPTION_DISPATCH_RATE,
    SUBSCRIBE_RATE,
)


async def _rate(request: Request, kind: RateKind) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadRequest(f"a {kind.path} must be a JSON object")
    rate: dict[str, Any] = {}
    for key, default in kind.fields:
        value = body.get(key, default)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise BadRequest(f"{key} must be true or false")
        elif not isinstance(value, int) or isinstance(value, bool):
            raise BadRequest(f"{key} must be an integer")
        rate[key] = value
    if "ratePeriodInSecond" in rate and rate["ratePeriodInSecond"] < 1:
        raise BadRequest("ratePeriodInSecond must be at least 1")
    return rate


def _topic(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    try:
        kind = TopicDomain(domain)
    except ValueError:
        raise ResourceNotFound(f"Unknown topic domain {domain!r}") from None
    return TopicName.of(kind, tenant, namespace, unquote(topic))


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["rate limits"])
    for kind in KINDS:
        _add_routes(r, ctx, kind)
    return r


def _add_routes(r: APIRouter, ctx: AdminContext, kind: RateKind) -> None:
    namespace_path = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{kind.path}"
    topic_path = f"/admin/v2/{{domain}}/{{tenant}}/{{namespace}}/{{topic}}/{kind.path}"

    async def edit_namespace(ns: NamespaceName, rate: dict[str, Any] | None) -> None:
        await namespace_policies(ctx, ns)

        def change(p: Policies) -> Policies:
            extra = dict(p.extra)
            rates = dict(extra.get(kind.namespace_key) or {})
            if rate is None:
                rates.pop(ctx.cluster, None)
            else:
                rates[ctx.cluster] = rate
            extra[kind.namespace_key] = rates or None
            return p.with_(extra=extra)

        try:
            await ctx.policies.update_namespace(ns, change)
        except NotFound:
            raise ResourceNotFound("Namespace does not exist") from None

    async def get_ns(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response((policies.extra.get(kind.namespace_key) or {}).get(ctx.cluster))

    async def set_ns(tenant: str, namespace: str, request: Request) -> Response:
        await edit_namespace(NamespaceName.of(tenant, namespace), await _rate(request, kind))
        return no_content()

    async def clear_ns(tenant: str, namespace: str) -> Response:
        await edit_namespace(NamespaceName.of(tenant, namespace), None)
        return no_content()

    async def edit_topic(name: TopicName, rate: dict[str, Any] | None) -> None:
        await namespace_policies(ctx, name.namespace_name)

        def change(p: TopicPolicies) -> TopicPolicies:
            extra: dict[str, Any] = dict(p.extra)
            if rate is None:
                extra.pop(kind.topic_key, None)
            else:
                extra[kind.topic_key] = rate
            return p.with_(extra=extra)

        await ctx.policies.update_topic(name, change)

    async def get_topic(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        policies = await ctx.policies.get_topic(_topic(domain, tenant, namespace, topic))
        return json_response(None if policies is None else policies.extra.get(kind.topic_key))

    async def set_topic(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        rate = await _rate(request, kind)
        await edit_topic(_topic(domain, tenant, namespace, topic), rate)
        return no_content()

    async def clear_topic(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        await edit_topic(_topic(domain, tenant, namespace, topic), None)
        return no_content()

    what = kind.path
    r.add_api_route(namespace_path, get_ns, methods=["GET"], summary=f"The namespace's {what}")
    r.add_api_route(
        namespace_path, set_ns, methods=["POST"], status_code=204, summary=f"Set {what}"
    )
    r.add_api_route(
        namespace_path, clear_ns, methods=["DELETE"], status_code=204, summary=f"Remove {what}"
    )
    if not kind.topic_level:
        return
    r.add_api_route(topic_path, get_topic, methods=["GET"], summary=f"The topic's {what}")
    r.add_api_route(
        topic_path, set_topic, methods=["POST"], status_code=204, summary=f"Set the topic's {what}"
    )
    r.add_api_route(
        topic_path,
        clear_topic,
        methods=["DELETE"],
        status_code=204,
        summary=f"Remove the topic's {what}",
    )
