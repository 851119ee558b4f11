"""Namespaces and their policies: ``/admin/v2/namespaces/{tenant}[/{namespace}[/…]]``,
routes over :mod:`magnetar.admin.resources.namespaces`.

Policies are stored through :class:`magnetar.broker.policies.PolicyStore` (Pulsar's
``Policies`` JSON at ``/admin/policies/<tenant>/<namespace>``); the broker's policy cache
follows the store, so a change reaches loaded topics without a restart.

Each single-value policy has Pulsar's three verbs: ``POST`` sets it (204), ``GET`` reads it
(200, or 204 with no body while unset, as Pulsar's JAX-RS answers a null value), ``DELETE``
clears it (204). ``schemaCompatibilityStrategy`` is set with ``PUT`` (``POST`` accepted too).
``isAllowAutoUpdateSchema`` and ``schemaValidationEnforced`` take ``true``/``false``; an unset
``schemaValidationEnforced`` reads ``false``, as in Pulsar.
``backlogQuota`` takes ``?backlogQuotaType=destination_storage|message_age`` and is read as
a whole with ``GET …/backlogQuotaMap``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest
from magnetar.admin.policy_values import (
    message_ttl,
    non_negative,
    persistence_policies,
    policy_json,
    retention_policies,
)
from magnetar.admin.request_body import as_bool, as_object, as_str, read_json
from magnetar.admin.resources import namespaces
from magnetar.admin.resources.namespace_policies import (
    namespace_policies,
    update_namespace_policies,
)
from magnetar.admin.resources.tenants import tenant_info
from magnetar.admin.resources.topics import list_topics
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.policies import (
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaType,
    InactiveTopicPolicies,
    Policies,
    PolicyError,
)
from magnetar.common.names import NamespaceName
from magnetar.protocol import TopicsMode

SCHEMA_COMPATIBILITY_STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)


def schema_strategy(value: Any) -> str:
    name = as_str(value, "schema compatibility strategy").upper()
    if name not in SCHEMA_COMPATIBILITY_STRATEGIES:
        raise BadRequest(f"unknown schema compatibility strategy {value!r}")
    return name


def _to_json(value: Any) -> Any:
    return value.to_json() if hasattr(value, "to_json") else value


@dataclass(frozen=True, slots=True)
class Setting:
    """One namespace policy endpoint: URL suffix, ``Policies`` attribute, body parser."""

    path: str
    attribute: str
    parse: Callable[[Any], Any]
    cleared: Any = None
    set_methods: tuple[str, ...] = ("POST",)
    unset: Any = None
    """What GET answers while the policy is unset (None: 204 with no body)."""


SETTINGS = (
    Setting("deduplication", "deduplicationEnabled", lambda v: as_bool(v, "deduplication")),
    Setting("retention", "retention_policies", retention_policies),
    Setting("messageTTL", "message_ttl_in_seconds", message_ttl),
    Setting("persistence", "persistence", persistence_policies),
    Setting(
        "maxProducersPerTopic", "max_producers_per_topic", non_negative("maxProducersPerTopic")
    ),
    Setting(
        "maxConsumersPerTopic", "max_consumers_per_topic", non_negative("maxConsumersPerTopic")
    ),
    Setting(
        "maxConsumersPerSubscription",
        "max_consumers_per_subscription",
        non_negative("maxConsumersPerSubscription"),
    ),
    Setting(
        "maxUnackedMessagesPerConsumer",
        "max_unacked_messages_per_consumer",
        non_negative("maxUnackedMessagesPerConsumer"),
    ),
    Setting(
        "maxUnackedMessagesPerSubscription",
        "max_unacked_messages_per_subscription",
        non_negative("maxUnackedMessagesPerSubscription"),
    ),
    Setting(
        "autoTopicCreation",
        "autoTopicCreationOverride",
        policy_json(AutoTopicCreationOverride.from_json),
    ),
    Setting(
        "inactiveTopicPolicies",
        "inactive_topic_policies",
        policy_json(InactiveTopicPolicies.from_json),
    ),
    Setting(
        "schemaCompatibilityStrategy",
        "schema_compatibility_strategy",
        schema_strategy,
        cleared="UNDEFINED",
        set_methods=("PUT", "POST"),
    ),
    Setting(
        "isAllowAutoUpdateSchema",
        "is_allow_auto_update_schema",
        lambda v: as_bool(v, "isAllowAutoUpdateSchema"),
    ),
    Setting(
        "schemaValidationEnforced",
        "schema_validation_enforced",
        lambda v: as_bool(v, "schemaValidationEnforced"),
        unset=False,
    ),
)


def _setting_routes(r: APIRouter, ctx: AdminContext, setting: Setting) -> None:
    path = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{setting.path}"

    async def get_value(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        value = getattr(policies, setting.attribute)
        return json_response(_to_json(setting.unset if value is None else value))

    async def set_value(tenant: str, namespace: str, request: Request) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        value = setting.parse(await read_json(request))
        await update_namespace_policies(ctx, ns, **{setting.attribute: value})
        return no_content()

    async def clear_value(tenant: str, namespace: str) -> Response:
        await update_namespace_policies(
            ctx, NamespaceName.of(tenant, namespace), **{setting.attribute: setting.cleared}
        )
        return no_content()

    r.add_api_route(path, get_value, methods=["GET"], summary=f"Get {setting.path}")
    for method in setting.set_methods:
        # One route per method: FastAPI names a route's operation after its first method,
        # so one route for PUT and POST gave both operations the same id.
        r.add_api_route(path, set_value, methods=[method], summary=f"Set {setting.path}")
    r.add_api_route(path, clear_value, methods=["DELETE"], summary=f"Remove {setting.path}")


def _quota_type(value: str | None) -> BacklogQuotaType:
    try:
        return BacklogQuotaType(value or "destination_storage")
    except ValueError:
        raise BadRequest(f"unknown backlogQuotaType {value!r}") from None


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["namespaces"])

    @r.get("/admin/v2/namespaces/{tenant}", summary="List a tenant's namespaces")
    async def list_namespaces(tenant: str) -> Response:
        await tenant_info(ctx, tenant)
        return json_response(await namespaces.list_namespaces(ctx, tenant))

    @r.put("/admin/v2/namespaces/{tenant}/{namespace}", summary="Create a namespace")
    async def create_namespace(tenant: str, namespace: str, request: Request) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        body = as_object(await read_json(request, {}), "policies")
        await tenant_info(ctx, tenant)
        try:
            policies = Policies.from_json(body)
        except PolicyError as exc:
            raise BadRequest(str(exc)) from exc
        await namespaces.create_namespace(ctx, ns, policies)
        return no_content()

    @r.get("/admin/v2/namespaces/{tenant}/{namespace}", summary="Get a namespace's policies")
    async def get_policies(tenant: str, namespace: str) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        return json_response(await namespaces.namespace_policies_json(ctx, ns))

    @r.delete("/admin/v2/namespaces/{tenant}/{namespace}", summary="Delete a namespace")
    async def delete(tenant: str, namespace: str, force: bool = False) -> Response:
        await namespaces.delete_namespace(ctx, NamespaceName.of(tenant, namespace), force=force)
        return no_content()

    @r.get(
        "/admin/v2/namespaces/{tenant}/{namespace}/topics",
        summary="Topics of a namespace (partitions included)",
    )
    async def topics(tenant: str, namespace: str, mode: str = "PERSISTENT") -> Response:
        ns = NamespaceName.of(tenant, namespace)
        try:
            topics_mode = TopicsMode[mode.upper()]
        except KeyError:
            raise BadRequest(f"unknown mode {mode!r}") from None
        return json_response(await list_topics(ctx, ns, topics_mode))

    @r.get(
        "/admin/v2/namespaces/{tenant}/{namespace}/backlogQuotaMap",
        summary="Get the backlog quotas",
    )
    async def get_quotas(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        return json_response({k.value: q.to_json() for k, q in policies.backlog_quota_map.items()})

    @r.post("/admin/v2/namespaces/{tenant}/{namespace}/backlogQuota", summary="Set a backlog quota")
    async def set_quota(
        tenant: str, namespace: str, request: Request, backlogQuotaType: str | None = None
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        kind = _quota_type(backlogQuotaType)
        try:
            quota = BacklogQuota.from_json(await read_json(request))
        except PolicyError as exc:
            raise BadRequest(str(exc)) from exc
        policies = await namespace_policies(ctx, ns)
        quotas = dict(policies.backlog_quota_map)
        quotas[kind] = quota
        await update_namespace_policies(ctx, ns, backlog_quota_map=quotas)
        return no_content()

    @r.delete(
        "/admin/v2/namespaces/{tenant}/{namespace}/backlogQuota", summary="Remove a backlog quota"
    )
    async def clear_quota(
        tenant: str, namespace: str, backlogQuotaType: str | None = None
    ) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        kind = _quota_type(backlogQuotaType)
        policies = await namespace_policies(ctx, ns)
        quotas = {k: q for k, q in policies.backlog_quota_map.items() if k is not kind}
        await update_namespace_policies(ctx, ns, backlog_quota_map=quotas)
        return no_content()

    for setting in SETTINGS:
        _setting_routes(r, ctx, setting)
    return r
