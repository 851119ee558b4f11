"""Permissions: Pulsar's grant/revoke REST, stored in the namespace policies' ``auth_policies``.

* ``GET /admin/v2/namespaces/{t}/{ns}/permissions`` → ``{role: [actions]}`` (namespace grants)
* ``POST /admin/v2/namespaces/{t}/{ns}/permissions/{role}`` body ``["produce", ...]`` →
  the role holds exactly those actions on the namespace (204)
* ``DELETE /admin/v2/namespaces/{t}/{ns}/permissions/{role}`` → revoked (204)
* ``GET|POST|DELETE /admin/v2/{persistent|non-persistent}/{t}/{ns}/{topic}/permissions[/{role}]``
  → the same on one topic (``destination_auth``); GET merges the namespace's grants
* ``GET /admin/v2/namespaces/{t}/{ns}/permissions/subscription`` → ``{sub: [roles]}``;
  ``POST .../permissions/subscription/{sub}`` body ``["role", ...]`` limits who may consume
  from the subscription; ``DELETE .../permissions/{sub}/{role}`` removes one role.

Actions: produce, consume, functions, sources, sinks, packages; anything else is a 400.
Who may call these: the tenant's admins and super users (:mod:`magnetar.admin.security`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, ResourceNotFound
from magnetar.admin.request_body import as_str_list, read_json
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.auth.authorization import (
    InvalidPermission,
    grant_namespace,
    grant_topic,
    parse_actions,
    revoke_namespace,
    revoke_topic,
    topic_permissions,
    validate_role,
)
from magnetar.broker.policies import Policies
from magnetar.common.names import NamespaceName, TopicDomain, TopicName
from magnetar.metadata.store import NotFound

TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"


def _role(role: str) -> str:
    try:
        return validate_role(role)
    except InvalidPermission as exc:
        raise BadRequest(str(exc)) from None


async def _actions(request: Request) -> Any:
    body = await read_json(request, [])
    if not isinstance(body, list):
        raise BadRequest("permissions must be a JSON list of actions")
    try:
        return parse_actions(body)
    except InvalidPermission as exc:
        raise BadRequest(str(exc)) from None


async def _edit(
    ctx: AdminContext,
    ns: NamespaceName,
    change: Callable[[Mapping[str, Any]], dict[str, Any]],
) -> None:
    await namespace_policies(ctx, ns)

    def apply(p: Policies) -> Policies:
        return p.with_(auth_policies=change(p.auth_policies))

    try:
        await ctx.policies.update_namespace(ns, apply)
    except NotFound:
        raise ResourceNotFound("Namespace does not exist") from None


def _topic(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    try:
        kind = TopicDomain(domain)
    except ValueError:
        raise ResourceNotFound(f"Unknown topic domain {domain!r}") from None
    return TopicName.of(kind, tenant, namespace, unquote(topic))


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["permissions"])

    @r.get(NAMESPACE, summary="Roles and their actions on the namespace")
    async def namespace_grants(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response(topic_permissions(policies.auth_policies, ()))

    @r.get(NAMESPACE + "/subscription", summary="Roles allowed per subscription")
    async def subscription_roles(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response(dict(policies.auth_policies.get("subscription_auth_roles") or {}))

    @r.post(NAMESPACE + "/subscription/{subscription}", status_code=204)
    async def set_subscription_roles(
        tenant: str, namespace: str, subscription: str, request: Request
    ) -> Response:
        roles = sorted({_role(x) for x in as_str_list(await read_json(request), "roles")})

        def change(auth: Mapping[str, Any]) -> dict[str, Any]:
            body = dict(auth)
            subs = dict(body.get("subscription_auth_roles") or {})
            subs[subscription] = roles
            body["subscription_auth_roles"] = subs
            return body

        await _edit(ctx, NamespaceName.of(tenant, namespace), change)
        return no_content()

    @r.post(NAMESPACE + "/{role}", status_code=204, summary="Grant actions on the namespace")
    async def grant(tenant: str, namespace: str, role: str, request: Request) -> Response:
        checked, actions = _role(role), await _actions(request)
        await _edit(
            ctx,
            NamespaceName.of(tenant, namespace),
            lambda a: grant_namespace(a, checked, actions),
        )
        return no_content()

    @r.delete(NAMESPACE + "/{role}", status_code=204, summary="Revoke the role's actions")
    async def revoke(tenant: str, namespace: str, role: str) -> Response:
        checked = _role(role)
        await _edit(
            ctx, NamespaceName.of(tenant, namespace), lambda a: revoke_namespace(a, checked)
        )
        return no_content()

    @r.delete(NAMESPACE + "/{subscription}/{role}", status_code=204)
    async def revoke_subscription_role(
        tenant: str, namespace: str, subscription: str, role: str
    ) -> Response:
        def change(auth: Mapping[str, Any]) -> dict[str, Any]:
            body = dict(auth)
            subs = dict(body.get("subscription_auth_roles") or {})
            left = [x for x in subs.get(subscription, []) if x != role]
            if left:
                subs[subscription] = left
            else:
                subs.pop(subscription, None)
            body["subscription_auth_roles"] = subs
            return body

        await _edit(ctx, NamespaceName.of(tenant, namespace), change)
        return no_content()

    @r.get(TOPIC, summary="Roles and their actions on the topic (namespace grants included)")
    async def topic_grants(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = _topic(domain, tenant, namespace, topic)
        policies = await namespace_policies(ctx, name.namespace_name)
        names = [name.full_name]
        if name.is_partition:
            names.append(name.partitioned_topic.full_name)
        return json_response(topic_permissions(policies.auth_policies, names))

    @r.post(TOPIC + "/{role}", status_code=204, summary="Grant actions on the topic")
    async def grant_on_topic(
        domain: str, tenant: str, namespace: str, topic: str, role: str, request: Request
    ) -> Response:
        name = _topic(domain, tenant, namespace, topic)
        checked, actions = _role(role), await _actions(request)
        await _edit(
            ctx, name.namespace_name, lambda a: grant_topic(a, name.full_name, checked, actions)
        )
        return no_content()

    @r.delete(TOPIC + "/{role}", status_code=204, summary="Revoke the role's actions on the topic")
    async def revoke_on_topic(
        domain: str, tenant: str, namespace: str, topic: str, role: str
    ) -> Response:
        name = _topic(domain, tenant, namespace, topic)
        checked = _role(role)
        await _edit(ctx, name.namespace_name, lambda a: revoke_topic(a, name.full_name, checked))
        return no_content()

    return r
