"""Offload policies of a namespace and of a topic, as Pulsar's REST spells them
(``N`` = ``/admin/v2/namespaces/{tenant}/{namespace}``,
``T`` = ``/admin/v2/persistent/{tenant}/{namespace}/{topic}``):

* ``GET|PUT N/offloadThreshold`` — bytes a topic keeps on the bookies before its closed
  ledgers are offloaded (a bare JSON number; -1 unset, 0 offload every closed ledger);
* ``GET|PUT N/offloadThresholdInSeconds`` — age of a closed ledger before it is offloaded;
* ``GET|PUT|DELETE N/offloadDeletionLagMs`` — how long a bookie copy outlives its offload
  (GET 204 while unset: the broker's default applies);
* ``GET|POST N/offloadPolicies``, ``DELETE N/removeOffloadPolicies`` (Pulsar's path;
  ``DELETE N/offloadPolicies`` too) — Pulsar's ``OffloadPolicies`` JSON (driver, bucket,
  region, endpoint, ``fileSystemURI``, thresholds, deletion lag, read priority; see
  :mod:`magnetar.broker.policies.offload`); GET 204 while unset;
* ``GET|POST|DELETE T/offloadPolicies`` — the topic's own ``offloadPolicies``; GET 204
  while unset, ``?applied=true`` the policies in force (topic, namespace, broker, field by
  field).

The namespace's single values and its ``offload_policies`` are kept in step, as Pulsar
does: setting a threshold or the lag also changes the ``offload_policies`` holding one, and
the thresholds and lag an ``offload_policies`` sets are copied to the single values.

Refusals: a malformed body 400; an unsupported driver, an S3 driver without a bucket, a
negative deletion lag, a ``fileSystemURI`` that is not a local path, a filesystem driver
with no ``fileSystemURI`` on a broker without ``--offload-directory`` 412 with the reason;
a missing namespace or topic 404; topic policies of a partition 412.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, PreconditionFailed, ResourceNotFound
from magnetar.admin.request_body import as_int, read_json
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.admin.topic_policies import checked_topic
from magnetar.admin.topics import TOPIC, topic_name
from magnetar.broker.policies import Policies, PolicyError, TopicPolicies
from magnetar.broker.policies.offload import OffloadPolicies, problem
from magnetar.broker.policies.resolution import offload_policies
from magnetar.common.names import NamespaceName, TopicName
from magnetar.metadata.store import NotFound

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"


def checked_offload_policies(ctx: AdminContext, value: Any) -> OffloadPolicies:
    """A request body as :class:`OffloadPolicies`: 400 when malformed, 412 with the reason
    when it cannot work (:func:`~magnetar.broker.policies.offload.problem`, or a
    filesystem driver with no ``fileSystemURI`` here nor ``--offload-directory`` on the
    broker)."""
    try:
        policies = OffloadPolicies.from_json(value)
    except PolicyError as exc:
        raise BadRequest(str(exc)) from exc
    reason = problem(policies)
    if reason is not None:
        raise PreconditionFailed(reason)
    broker_directory = ctx.service.policies.defaults.offload.directory
    if policies.is_filesystem() and policies.directory is None and broker_directory is None:
        raise PreconditionFailed(
            "The filesystem offload driver needs fileSystemURI (the broker has no "
            "--offload-directory)"
        )
    return policies


def with_threshold(p: Policies, threshold_bytes: int) -> Policies:
    held = p.offload_policies
    return p.with_(
        offload_threshold=threshold_bytes,
        offload_policies=None if held is None else held.with_(threshold_bytes=threshold_bytes),
    )


def with_threshold_s(p: Policies, threshold_s: int) -> Policies:
    held = p.offload_policies
    return p.with_(
        offload_threshold_in_seconds=threshold_s,
        offload_policies=None if held is None else held.with_(threshold_s=threshold_s),
    )


def with_deletion_lag(p: Policies, lag_ms: int | None) -> Policies:
    held = p.offload_policies
    return p.with_(
        offload_deletion_lag_ms=lag_ms,
        offload_policies=None if held is None else held.with_(deletion_lag_ms=lag_ms),
    )


def with_offload_policies(p: Policies, policies: OffloadPolicies | None) -> Policies:
    """``p`` holding ``policies``; the thresholds and lag they set become the single
    values too (Pulsar's ``internalSetOffloadPolicies``)."""
    if policies is None:
        return p.with_(offload_policies=None)
    return p.with_(
        offload_policies=policies,
        offload_threshold=_or(policies.threshold_bytes, p.offload_threshold),
        offload_threshold_in_seconds=_or(policies.threshold_s, p.offload_threshold_in_seconds),
        offload_deletion_lag_ms=_or(policies.deletion_lag_ms, p.offload_deletion_lag_ms),
    )


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["offload policies"])

    async def edit(tenant: str, namespace: str, change: Any) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        await namespace_policies(ctx, ns)
        try:
            await ctx.policies.update_namespace(ns, change)
        except NotFound:
            raise ResourceNotFound("Namespace does not exist") from None
        return no_content()

    async def read(tenant: str, namespace: str) -> Policies:
        return await namespace_policies(ctx, NamespaceName.of(tenant, namespace))

    @r.get(NAMESPACE + "/offloadThreshold", summary="Get a namespace's offload threshold")
    async def get_threshold(tenant: str, namespace: str) -> Response:
        return json_response((await read(tenant, namespace)).offload_threshold)

    @r.put(NAMESPACE + "/offloadThreshold", summary="Set a namespace's offload threshold")
    async def set_threshold(tenant: str, namespace: str, request: Request) -> Response:
        value = as_int(await read_json(request), "offloadThreshold")
        return await edit(tenant, namespace, lambda p: with_threshold(p, value))

    @r.get(
        NAMESPACE + "/offloadThresholdInSeconds",
        summary="Get a namespace's offload threshold in seconds",
    )
    async def get_threshold_s(tenant: str, namespace: str) -> Response:
        return json_response((await read(tenant, namespace)).offload_threshold_in_seconds)

    @r.put(
        NAMESPACE + "/offloadThresholdInSeconds",
        summary="Set a namespace's offload threshold in seconds",
    )
    async def set_threshold_s(tenant: str, namespace: str, request: Request) -> Response:
        value = as_int(await read_json(request), "offloadThresholdInSeconds")
        return await edit(tenant, namespace, lambda p: with_threshold_s(p, value))

    @r.get(NAMESPACE + "/offloadDeletionLagMs", summary="Get a namespace's offload deletion lag")
    async def get_lag(tenant: str, namespace: str) -> Response:
        return json_response((await read(tenant, namespace)).offload_deletion_lag_ms)

    @r.put(NAMESPACE + "/offloadDeletionLagMs", summary="Set a namespace's offload deletion lag")
    async def set_lag(tenant: str, namespace: str, request: Request) -> Response:
        value = as_int(await read_json(request), "offloadDeletionLagMs")
        if value < 0:
            raise PreconditionFailed("The offload deletion lag must be 0 or more")
        return await edit(tenant, namespace, lambda p: with_deletion_lag(p, value))

    @r.delete(
        NAMESPACE + "/offloadDeletionLagMs", summary="Clear a namespace's offload deletion lag"
    )
    async def clear_lag(tenant: str, namespace: str) -> Response:
        return await edit(tenant, namespace, lambda p: with_deletion_lag(p, None))

    @r.get(NAMESPACE + "/offloadPolicies", summary="Get a namespace's offload policies")
    async def get_ns_policies(tenant: str, namespace: str) -> Response:
        held = (await read(tenant, namespace)).offload_policies
        return json_response(None if held is None else held.to_json())

    @r.post(NAMESPACE + "/offloadPolicies", summary="Set a namespace's offload policies")
    async def set_ns_policies(tenant: str, namespace: str, request: Request) -> Response:
        await read(tenant, namespace)
        policies = checked_offload_policies(ctx, await read_json(request))
        return await edit(tenant, namespace, lambda p: with_offload_policies(p, policies))

    async def remove_ns_policies(tenant: str, namespace: str) -> Response:
        return await edit(tenant, namespace, lambda p: with_offload_policies(p, None))

    for path in ("/removeOffloadPolicies", "/offloadPolicies"):
        r.add_api_route(
            NAMESPACE + path,
            remove_ns_policies,
            methods=["DELETE"],
            summary="Remove a namespace's offload policies",
        )

    topic_path = f"{TOPIC}/offloadPolicies"

    async def persistent_topic(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
        name = topic_name(domain, tenant, namespace, topic)
        if not name.is_persistent:
            raise PreconditionFailed("Offload policies apply to persistent topics only")
        return await checked_topic(ctx, name)

    @r.get(topic_path, summary="Get a topic's offload policies")
    async def get_topic_policies(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        applied: bool = False,
        isGlobal: bool = False,
    ) -> Response:
        name = await persistent_topic(domain, tenant, namespace, topic)
        own = await ctx.policies.get_topic(name) or TopicPolicies()
        if applied:
            ns = await namespace_policies(ctx, name.namespace_name)
            merged = offload_policies(ctx.service.policies.defaults, ns, own)
            return json_response(None if merged == OffloadPolicies() else merged.to_json())
        held = own.offloadPolicies
        return json_response(None if held is None else held.to_json())

    @r.post(topic_path, summary="Set a topic's offload policies")
    async def set_topic_policies(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        isGlobal: bool = False,
    ) -> Response:
        name = await persistent_topic(domain, tenant, namespace, topic)
        policies = checked_offload_policies(ctx, await read_json(request))
        await ctx.policies.update_topic(name, lambda p: p.with_(offloadPolicies=policies))
        return no_content()

    @r.delete(topic_path, summary="Remove a topic's offload policies")
    async def remove_topic_policies(
        domain: str, tenant: str, namespace: str, topic: str, isGlobal: bool = False
    ) -> Response:
        name = await persistent_topic(domain, tenant, namespace, topic)
        await ctx.policies.update_topic(name, lambda p: p.with_(offloadPolicies=None))
        return no_content()

    return r
