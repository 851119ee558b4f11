"""Namespaces and their policies: ``/admin/v2/namespaces/{tenant}[/{namespace}[/…]]``.

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

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, Conflict, PreconditionFailed, ResourceNotFound
from magnetar.admin.policy_values import (
    message_ttl,
    non_negative,
    persistence_policies,
    retention_policies,
)
from magnetar.admin.request_body import as_bool, as_object, as_str, read_json
from magnetar.admin.responses import json_response, no_content
from magnetar.admin.tenants import tenant_info
from magnetar.broker.policies import (
    TOPIC_POLICIES_ROOT,
    AutoTopicCreationOverride,
    BacklogQuota,
    BacklogQuotaType,
    Policies,
    PolicyError,
    namespace_path,
)
from magnetar.broker.service import PARTITIONED_ROOT
from magnetar.common.names import NamespaceName, TopicName
from magnetar.managed_ledger.metadata_layout import ROOT as ML_ROOT
from magnetar.metadata.store import NodeExists, NotFound
from magnetar.protocol import TopicsMode
from magnetar.schema.registry import SCHEMAS_ROOT

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


def _policy(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def run(value: Any) -> Any:
        try:
            return parse(value)
        except PolicyError as exc:
            raise BadRequest(str(exc)) from exc

    return run


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
        _policy(AutoTopicCreationOverride.from_json),
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


async def namespace_policies(ctx: AdminContext, ns: NamespaceName) -> Policies:
    """Raises 404 when the namespace does not exist, 500 if its stored value is broken."""
    policies = await ctx.policies.get_namespace(ns)
    if policies is None:
        raise ResourceNotFound("Namespace does not exist")
    return policies


async def _update(ctx: AdminContext, ns: NamespaceName, **changes: Any) -> None:
    await namespace_policies(ctx, ns)
    try:
        await ctx.policies.update_namespace(ns, lambda p: p.with_(**changes))
    except NotFound:
        raise ResourceNotFound("Namespace does not exist") from None


async def delete_namespace(ctx: AdminContext, ns: NamespaceName, *, force: bool) -> None:
    """Delete a namespace: 412 if it still has topics (unless ``force``, which deletes
    them first, disconnecting their clients)."""
    from magnetar.admin.topics import delete_partitioned_topic, delete_topic

    await namespace_policies(ctx, ns)
    topics = await ctx.service.topics_of_namespace(ns, TopicsMode.ALL)
    if topics and not force:
        raise PreconditionFailed("Cannot delete non empty namespace")
    for domain in ("persistent", "non-persistent"):
        with contextlib.suppress(NotFound):
            for local in await ctx.store.children(
                f"{PARTITIONED_ROOT}/{ns.tenant}/{ns.namespace}/{domain}"
            ):
                base = TopicName.parse(f"{domain}://{ns}/{_unquote(local)}")
                await delete_partitioned_topic(ctx, base, force=True)
    for name in await ctx.service.topics_of_namespace(ns, TopicsMode.ALL):
        with contextlib.suppress(ResourceNotFound):
            await delete_topic(ctx, TopicName.parse(name), force=True)
    for root in (PARTITIONED_ROOT, TOPIC_POLICIES_ROOT, ML_ROOT, SCHEMAS_ROOT):
        with contextlib.suppress(NotFound):
            await ctx.store.delete_recursive(f"{root}/{ns.tenant}/{ns.namespace}")
    try:
        await ctx.store.delete(namespace_path(ns))
    except NotFound:
        raise ResourceNotFound("Namespace does not exist") from None


def _unquote(local: str) -> str:
    from urllib.parse import unquote

    return unquote(local)


def _setting_routes(r: APIRouter, ctx: AdminContext, setting: Setting) -> None:
    path = f"/admin/v2/namespaces/{{tenant}}/{{namespace}}/{setting.path}"

    async def get_value(tenant: str, namespace: str) -> Response:
        policies = await namespace_policies(ctx, NamespaceName.of(tenant, namespace))
        value = getattr(policies, setting.attribute)
        return json_response(_to_json(setting.unset if value is None else value))

    async def set_value(tenant: str, namespace: str, request: Request) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        value = setting.parse(await read_json(request))
        await _update(ctx, ns, **{setting.attribute: value})
        return no_content()

    async def clear_value(tenant: str, namespace: str) -> Response:
        await _update(
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
        names = await ctx.store.children(f"/admin/policies/{tenant}")
        return json_response([f"{tenant}/{n}" for n in sorted(names)])

    @r.put("/admin/v2/namespaces/{tenant}/{namespace}", summary="Create a namespace")
    async def create_namespace(tenant: str, namespace: str, request: Request) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        body = as_object(await read_json(request, {}), "policies")
        await tenant_info(ctx, tenant)
        try:
            policies = Policies.from_json(body)
        except PolicyError as exc:
            raise BadRequest(str(exc)) from exc
        if not policies.replication_clusters:
            policies = policies.with_(replication_clusters=(ctx.cluster,))
        extra = dict(policies.extra)
        extra.setdefault("bundles", {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1})
        policies = policies.with_(extra=extra)
        try:
            await ctx.policies.create_namespace(ns, policies)
        except NodeExists:
            raise Conflict("Namespace already exists") from None
        return no_content()

    @r.get("/admin/v2/namespaces/{tenant}/{namespace}", summary="Get a namespace's policies")
    async def get_policies(tenant: str, namespace: str) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        body = (await namespace_policies(ctx, ns)).to_json()
        ownership = ctx.service.ownership
        if ownership is not None:  # in a cluster the bundles are the controller's
            bundles = await ownership.namespace_bundles(str(ns))
            if bundles is not None:
                names = bundles.to_names()
                body["bundles"] = {"boundaries": names, "numBundles": len(names) - 1}
        return json_response(body)

    @r.delete("/admin/v2/namespaces/{tenant}/{namespace}", summary="Delete a namespace")
    async def delete(tenant: str, namespace: str, force: bool = False) -> Response:
        await delete_namespace(ctx, NamespaceName.of(tenant, namespace), force=force)
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
        await namespace_policies(ctx, ns)
        return json_response(await ctx.service.topics_of_namespace(ns, topics_mode))

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
        await _update(ctx, ns, backlog_quota_map=quotas)
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
        await _update(ctx, ns, backlog_quota_map=quotas)
        return no_content()

    for setting in SETTINGS:
        _setting_routes(r, ctx, setting)
    return r
