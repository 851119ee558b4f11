"""Topic-level policies: ``T/{retention,messageTTL,backlogQuota,backlogQuotaMap,
deduplicationEnabled,persistence,maxProducers,maxConsumers,maxConsumersPerSubscription,
maxUnackedMessagesOnConsumer,maxUnackedMessagesOnSubscription,inactiveTopicPolicies}`` as Pulsar's
``PersistentTopics`` REST (``T`` = ``/admin/v2/{domain}/{tenant}/{namespace}/{topic}``).

Each policy has three verbs: ``POST`` sets it (204; the body is the bare JSON value or
object, except ``messageTTL`` whose value is the ``messageTTL`` query parameter),
``GET`` reads it (200; 204 with no body while unset; ``?applied=true`` answers the value in
force: topic, else namespace, else the broker's default), ``DELETE`` clears it (204).
``isGlobal`` is accepted and ignored (there is one cluster).

Checks before any of them, as Pulsar's ``preValidation``: a partition's name answers 412
(policies belong to the partitioned topic), a topic that does not exist 404. Invalid values
answer 412 with Pulsar's reasons (negative limits, bad quorums, a retention smaller than
the backlog quota or the reverse), malformed JSON 400.

Values are stored through :class:`magnetar.broker.policies.PolicyStore` (Pulsar's
``TopicPolicies`` JSON at ``/admin/topic-policies/…``); the broker follows the store's
notifications and applies a change to the loaded topic (and every loaded partition of a
partitioned topic) without a restart, with topic values taking precedence over the
namespace's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, PreconditionFailed, ResourceNotFound
from magnetar.admin.namespaces import schema_strategy
from magnetar.admin.policy_values import (
    message_ttl,
    non_negative,
    persistence_policies,
    policy_json,
    retention_policies,
)
from magnetar.admin.request_body import as_bool, read_json
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.admin.topics import TOPIC, topic_name
from magnetar.broker.policies import (
    BacklogQuota,
    BacklogQuotaType,
    BrokerDefaults,
    InactiveTopicPolicies,
    PersistencePolicies,
    Policies,
    PolicyError,
    RetentionPolicies,
    TopicPolicies,
)
from magnetar.common.names import TopicName


def _json(value: Any) -> Any:
    return value.to_json() if hasattr(value, "to_json") else value


@dataclass(frozen=True, slots=True)
class TopicSetting:
    """One single-value topic policy: URL suffix, ``TopicPolicies`` attribute, body parser,
    and the value in force when the topic sets none (namespace, else broker default)."""

    path: str
    attribute: str
    parse: Callable[[Any], Any]
    inherited: Callable[[Policies, BrokerDefaults], Any]


SETTINGS = (
    TopicSetting(
        "retention",
        "retentionPolicies",
        retention_policies,
        lambda ns, d: (
            ns.retention_policies
            or RetentionPolicies(d.retention_time_minutes, d.retention_size_mb)
        ),
    ),
    TopicSetting(
        "messageTTL",
        "messageTTLInSeconds",
        message_ttl,
        lambda ns, d: (
            ns.message_ttl_in_seconds if ns.message_ttl_in_seconds is not None else d.message_ttl_s
        ),
    ),
    TopicSetting(
        "deduplicationEnabled",
        "deduplicationEnabled",
        lambda v: as_bool(v, "deduplicationEnabled"),
        lambda ns, d: (
            ns.deduplicationEnabled
            if ns.deduplicationEnabled is not None
            else d.deduplication_enabled
        ),
    ),
    TopicSetting(
        "persistence",
        "persistence",
        persistence_policies,
        lambda ns, d: (
            ns.persistence or PersistencePolicies(d.ensemble_size, d.write_quorum, d.ack_quorum)
        ),
    ),
    TopicSetting(
        "maxProducers",
        "maxProducerPerTopic",
        non_negative("maxProducers"),
        lambda ns, d: _or(ns.max_producers_per_topic, d.max_producers_per_topic),
    ),
    TopicSetting(
        "maxConsumers",
        "maxConsumerPerTopic",
        non_negative("maxConsumers"),
        lambda ns, d: _or(ns.max_consumers_per_topic, d.max_consumers_per_topic),
    ),
    TopicSetting(
        "maxConsumersPerSubscription",
        "maxConsumersPerSubscription",
        non_negative("maxConsumersPerSubscription"),
        lambda ns, d: _or(ns.max_consumers_per_subscription, d.max_consumers_per_subscription),
    ),
    TopicSetting(
        "maxUnackedMessagesOnConsumer",
        "maxUnackedMessagesOnConsumer",
        non_negative("maxUnackedNum"),
        lambda ns, d: _or(
            ns.max_unacked_messages_per_consumer, d.max_unacked_messages_per_consumer
        ),
    ),
    TopicSetting(
        "maxUnackedMessagesOnSubscription",
        "maxUnackedMessagesOnSubscription",
        non_negative("maxUnackedNum"),
        lambda ns, d: _or(
            ns.max_unacked_messages_per_subscription, d.max_unacked_messages_per_subscription
        ),
    ),
    TopicSetting(
        "inactiveTopicPolicies",
        "inactiveTopicPolicies",
        policy_json(InactiveTopicPolicies.from_json),
        lambda ns, d: ns.inactive_topic_policies or d.inactive_topic,
    ),
    TopicSetting(
        "schemaCompatibilityStrategy",
        "schemaCompatibilityStrategy",
        schema_strategy,
        lambda ns, d: ns.schema_compatibility_strategy,
    ),
)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


async def checked_topic(ctx: AdminContext, name: TopicName) -> TopicName:
    """Pulsar's ``preValidation``: 412 for a partition, 404 for a topic that does not exist
    (a partitioned topic's base name exists when its metadata does)."""
    if name.is_partition:
        raise PreconditionFailed("Not allowed to set/get topic policy for a partition")
    await namespace_policies(ctx, name.namespace_name)
    service = ctx.service
    if (
        await service.partitions_of(name) == 0
        and not await service.topic_exists(name)
        and service.loaded_topic(name) is None
    ):
        raise ResourceNotFound(f"Topic {name.full_name} not found")
    return name


async def _topic_policies(ctx: AdminContext, name: TopicName) -> TopicPolicies:
    return await ctx.policies.get_topic(name) or TopicPolicies()


async def _update(ctx: AdminContext, name: TopicName, **changes: Any) -> None:
    await ctx.policies.update_topic(name, lambda p: p.with_(**changes))


def _defaults(ctx: AdminContext) -> BrokerDefaults:
    return ctx.service.policies.defaults


def _quota_type(value: str | None) -> BacklogQuotaType:
    try:
        return BacklogQuotaType(value or "destination_storage")
    except ValueError:
        raise BadRequest(f"unknown backlogQuotaType {value!r}") from None


def _quota_fits_retention(quota: BacklogQuota | None, retention: RetentionPolicies | None) -> bool:
    """Pulsar's ``checkBacklogQuota``: a retention limit must exceed the backlog quota."""
    if retention is None or (
        retention.retention_size_mb <= 0 and retention.retention_time_minutes <= 0
    ):
        return True
    if quota is None:
        return True  # the broker's default quota is unlimited
    if (
        retention.retention_size_mb > 0
        and quota.limit_size_bytes >= retention.retention_size_mb * 1024 * 1024
    ):
        return False
    return not (
        retention.retention_time_minutes > 0
        and quota.limit_time_s >= retention.retention_time_minutes * 60
    )


def _setting_routes(r: APIRouter, ctx: AdminContext, setting: TopicSetting) -> None:
    path = f"{TOPIC}/{setting.path}"

    async def get_value(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        applied: bool = False,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        value = getattr(await _topic_policies(ctx, name), setting.attribute)
        if value is None and applied:
            ns = await namespace_policies(ctx, name.namespace_name)
            value = setting.inherited(ns, _defaults(ctx))
        return json_response(_json(value))

    async def set_value(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        if setting.path == "messageTTL":
            raw = request.query_params.get("messageTTL")
            value = setting.parse(raw if raw is not None else await read_json(request))
        else:
            value = setting.parse(await read_json(request))
        if setting.path == "retention":
            current = await _topic_policies(ctx, name)
            quota = current.backLogQuotaMap.get(BacklogQuotaType.DESTINATION_STORAGE)
            if quota is None:
                ns = await namespace_policies(ctx, name.namespace_name)
                quota = ns.backlog_quota_map.get(BacklogQuotaType.DESTINATION_STORAGE)
            if not _quota_fits_retention(quota, value):
                raise PreconditionFailed(
                    "Retention Quota must exceed configured backlog quota for topic. "
                    "Please increase retention quota and retry"
                )
        await _update(ctx, name, **{setting.attribute: value})
        return no_content()

    async def clear_value(
        domain: str, tenant: str, namespace: str, topic: str, isGlobal: bool = False
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        await _update(ctx, name, **{setting.attribute: None})
        return no_content()

    r.add_api_route(path, get_value, methods=["GET"], summary=f"Get a topic's {setting.path}")
    for method in ("POST", "PUT") if setting.path == "schemaCompatibilityStrategy" else ("POST",):
        # one route per method, as for namespaces (distinct OpenAPI operation ids)
        r.add_api_route(path, set_value, methods=[method], summary=f"Set a topic's {setting.path}")
    r.add_api_route(
        path, clear_value, methods=["DELETE"], summary=f"Remove a topic's {setting.path}"
    )


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["topic policies"])

    @r.get(TOPIC + "/backlogQuotaMap", summary="Get a topic's backlog quotas")
    async def get_quotas(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        applied: bool = False,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        quotas = (await _topic_policies(ctx, name)).backLogQuotaMap
        if not quotas and applied:
            quotas = (await namespace_policies(ctx, name.namespace_name)).backlog_quota_map
            if not quotas:
                d = _defaults(ctx)
                default = BacklogQuota(
                    d.backlog_quota_size_bytes, d.backlog_quota_time_s, d.backlog_quota_policy
                )
                quotas = {kind: default for kind in BacklogQuotaType}
        return json_response({k.value: q.to_json() for k, q in sorted(quotas.items())})

    @r.post(TOPIC + "/backlogQuota", summary="Set a topic's backlog quota")
    async def set_quota(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        backlogQuotaType: str | None = None,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        kind = _quota_type(backlogQuotaType)
        try:
            quota = BacklogQuota.from_json(await read_json(request))
        except PolicyError as exc:
            raise BadRequest(str(exc)) from exc
        current = await _topic_policies(ctx, name)
        retention = current.retentionPolicies
        if retention is None:
            retention = (await namespace_policies(ctx, name.namespace_name)).retention_policies
        if not _quota_fits_retention(quota, retention):
            raise PreconditionFailed(
                "Backlog Quota exceeds configured retention quota for topic. "
                "Please increase retention quota and retry"
            )

        def change(p: TopicPolicies) -> TopicPolicies:
            return p.with_(backLogQuotaMap={**p.backLogQuotaMap, kind: quota})

        await ctx.policies.update_topic(name, change)
        return no_content()

    @r.delete(TOPIC + "/backlogQuota", summary="Remove a topic's backlog quota")
    async def clear_quota(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        backlogQuotaType: str | None = None,
        isGlobal: bool = False,
    ) -> Response:
        name = await checked_topic(ctx, topic_name(domain, tenant, namespace, topic))
        kind = _quota_type(backlogQuotaType)

        def change(p: TopicPolicies) -> TopicPolicies:
            return p.with_(
                backLogQuotaMap={k: q for k, q in p.backLogQuotaMap.items() if k != kind}
            )

        await ctx.policies.update_topic(name, change)
        return no_content()

    for setting in SETTINGS:
        _setting_routes(r, ctx, setting)
    return r
