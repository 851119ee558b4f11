"""Topics: ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}[/{topic}[/…]]``.

Create, delete, list; partitioned topics (create, grow, delete, metadata); terminate,
unload, last message id, message id by publish time; stats, partitioned stats, internal
stats; compaction trigger and status (through the host's compactor when it has one).
A topic "exists" when its managed ledger exists; a partitioned topic when its metadata
node ``/admin/partitioned-topics/…`` exists.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin import partition_owners, topic_stats
from magnetar.admin.context import AdminContext
from magnetar.admin.errors import (
    BadRequest,
    Conflict,
    MethodNotAllowed,
    PreconditionFailed,
    ResourceNotFound,
)
from magnetar.admin.namespaces import namespace_policies
from magnetar.admin.request_body import as_int, as_object, read_json
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.service import PARTITIONED_ROOT, partitioned_path
from magnetar.broker.topic import DEDUP_ROOT, TOPIC_EPOCH_ROOT, Topic
from magnetar.common.errors import TopicNotFound
from magnetar.common.names import NamespaceName, TopicName
from magnetar.managed_ledger.metadata_layout import ledger_path
from magnetar.metadata.store import NodeExists, NotFound
from magnetar.protocol import Entry, PartitionedTopicMetadata, TopicsMode

TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


def topic_name(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    """The name from a URL (400 if invalid, 404 for an unknown domain)."""
    if domain not in ("persistent", "non-persistent"):
        raise ResourceNotFound("not found")
    return TopicName.parse(f"{domain}://{tenant}/{namespace}/{unquote(topic)}")


async def loaded_topic(ctx: AdminContext, name: TopicName) -> Topic:
    """The topic, loaded if needed; 404 if it does not exist (a partitioned topic's base
    name is not a topic)."""
    try:
        return await ctx.service.get_topic(name, create=False)
    except TopicNotFound:
        raise ResourceNotFound(f"Topic {name.full_name} not found") from None


def owner_broker(ctx: AdminContext) -> str:
    return f"{ctx.advertised_host}:{ctx.http_port}"


async def loaded_topic_stats(ctx: AdminContext, name: TopicName) -> dict[str, Any]:
    """The TopicStats JSON object of a topic this broker serves (``GET .../stats``; also read
    in-process by the standalone's functions worker). Raises ResourceNotFound."""
    t = await loaded_topic(ctx, name)
    times = await topic_stats.backlog_publish_times(t)
    return topic_stats.topic_stats(t, owner_broker(ctx), times)


async def _check_namespace(ctx: AdminContext, name: TopicName) -> None:
    await namespace_policies(ctx, name.namespace_name)


async def create_topic(ctx: AdminContext, name: TopicName) -> None:
    await _check_namespace(ctx, name)
    if await ctx.service.topic_exists(name) or await ctx.service.partitions_of(name) > 0:
        raise Conflict("This topic already exists")
    if name.is_partition and await ctx.service.partitions_of(name.partitioned_topic) > 0:
        raise Conflict("This topic is a partition of an existing partitioned topic")
    await ctx.service.get_topic(name, create=True)


def _has_clients(topic: Topic) -> bool:
    return bool(topic.producers) or any(s.consumers for s in topic.subscriptions.values())


async def delete_topic(ctx: AdminContext, name: TopicName, *, force: bool) -> None:
    """Delete a non-partitioned topic (or one partition) and everything stored for it:
    ledgers, cursors, dedup snapshot, topic policies, schema (not a partition's: that is its
    partitioned topic's). 412 while clients are connected,
    unless ``force`` (which disconnects them)."""
    topic = await loaded_topic(ctx, name)
    if _has_clients(topic) and not force:
        raise PreconditionFailed("Topic has active producers/subscriptions")
    await ctx.service.unload_topic(name)
    ml = topic.ml
    for cursor in list(ml.cursors):
        with contextlib.suppress(Exception):
            await ml.delete_cursor(cursor)
    for ledger_id in ml.ledger_ids():
        await ctx.service.storage.delete_ledger(ledger_id)
    with contextlib.suppress(NotFound):
        await ctx.store.delete_recursive(ledger_path(ml.name))
    for state_root in (DEDUP_ROOT, TOPIC_EPOCH_ROOT):
        with contextlib.suppress(NotFound):
            await ctx.store.delete(f"{state_root}/{ml.name}")
    await ctx.policies.delete_topic(name)
    if not name.is_partition:  # partitions share their partitioned topic's schema
        await ctx.service.schemas.registry.delete(name, force=True)


async def delete_partitioned_topic(
    ctx: AdminContext, name: TopicName, *, force: bool, authorization: str | None = None
) -> None:
    """Delete every partition, on whichever broker owns it, then the partitioned topic's
    metadata. Without ``force``, 412 if any partition has producers or consumers (checked
    on every partition before anything is deleted). ``authorization`` goes along to the
    other owners (:mod:`magnetar.admin.partition_owners`)."""
    partitions = await ctx.service.partitions_of(name)
    if partitions == 0:
        raise ResourceNotFound("Partitioned topic does not exist")
    local = []
    remote: list[tuple[TopicName, str]] = []
    for i in range(partitions):
        part = name.partition(i)
        owner_url = await partition_owners.remote_owner_url(ctx, part)
        if owner_url is not None:
            if not force:
                stats = await partition_owners.partition_json(
                    owner_url, part, "stats", authorization
                )
                if stats is not None and partition_owners.has_clients(stats):
                    raise PreconditionFailed("Topic has active producers/subscriptions")
            remote.append((part, owner_url))
        elif await ctx.service.topic_exists(part):
            topic = await loaded_topic(ctx, part)
            if _has_clients(topic) and not force:
                raise PreconditionFailed("Topic has active producers/subscriptions")
            local.append(part)
    for part in local:
        with contextlib.suppress(ResourceNotFound):
            await delete_topic(ctx, part, force=True)
    for part, owner_url in remote:
        await partition_owners.delete_partition(owner_url, part, authorization)
    with contextlib.suppress(NotFound):
        await ctx.store.delete(partitioned_path(name))
    await ctx.policies.delete_topic(name)
    await ctx.service.schemas.registry.delete(name, force=True)


def _message_id(position: tuple[int, int], partition: int) -> dict[str, Any]:
    return {"ledgerId": position[0], "entryId": position[1], "partitionIndex": partition}


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["topics"])
    service = ctx.service

    @r.get("/admin/v2/{domain}/{tenant}/{namespace}", summary="List topics (partitions too)")
    async def list_topics(domain: str, tenant: str, namespace: str) -> Response:
        if domain not in ("persistent", "non-persistent"):
            raise ResourceNotFound("not found")
        ns = NamespaceName.of(tenant, namespace)
        await namespace_policies(ctx, ns)
        mode = TopicsMode.PERSISTENT if domain == "persistent" else TopicsMode.NON_PERSISTENT
        return json_response(await service.topics_of_namespace(ns, mode))

    @r.get("/admin/v2/{domain}/{tenant}/{namespace}/partitioned", summary="List partitioned topics")
    async def list_partitioned(domain: str, tenant: str, namespace: str) -> Response:
        if domain not in ("persistent", "non-persistent"):
            raise ResourceNotFound("not found")
        ns = NamespaceName.of(tenant, namespace)
        await namespace_policies(ctx, ns)
        try:
            locals_ = await ctx.store.children(f"{PARTITIONED_ROOT}/{tenant}/{namespace}/{domain}")
        except NotFound:
            locals_ = []
        return json_response(sorted(f"{domain}://{ns}/{unquote(x)}" for x in locals_))

    @r.put(TOPIC, summary="Create a non-partitioned topic")
    async def create(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        as_object(await read_json(request, {}), "topic properties")
        await create_topic(ctx, name)
        return no_content()

    @r.delete(TOPIC, summary="Delete a non-partitioned topic")
    async def delete(
        domain: str, tenant: str, namespace: str, topic: str, force: bool = False
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        if await service.partitions_of(name) > 0:
            raise Conflict("Topic is a partitioned topic; delete it with …/partitions")
        await delete_topic(ctx, name, force=force)
        return no_content()

    async def _create_partitions(name: TopicName, first: int, end: int) -> None:
        """Create partitions ``first..end-1`` now, as Pulsar's admin does, so every
        partition has stats, subscriptions and a last message id from the start. In a
        cluster only the partitions this broker serves; the others are created by their
        owners on first use."""
        for i in range(first, end):
            part = name.partition(i)
            if service.ownership is None or service.ownership.serves(part):
                await service.get_topic(part, create=True)

    @r.put(TOPIC + "/partitions", summary="Create a partitioned topic")
    async def create_partitioned(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        body = await read_json(request)
        if isinstance(body, dict):
            body = body.get("partitions")
        partitions = as_int(body, "number of partitions", minimum=1)
        await _check_namespace(ctx, name)
        if name.is_partition:
            raise BadRequest("a partition cannot itself be partitioned")
        if await service.topic_exists(name):
            raise Conflict("This topic already exists")
        try:
            await service.create_partitioned_topic(name, partitions)
        except NodeExists:
            raise Conflict("This topic already exists") from None
        await _create_partitions(name, 0, partitions)
        return no_content()

    @r.post(TOPIC + "/partitions", summary="Grow a partitioned topic")
    async def update_partitioned(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        partitions = as_int(await read_json(request), "number of partitions", minimum=1)
        try:
            got = await ctx.store.get(partitioned_path(name))
        except NotFound:
            raise ResourceNotFound("Partitioned topic does not exist") from None
        current = int(json.loads(got.value)["partitions"])
        if partitions <= current:
            raise BadRequest(
                f"Number of partitions can only be increased (from {current}, asked {partitions})"
            )
        body = dict(json.loads(got.value), partitions=partitions)
        await ctx.store.put(partitioned_path(name), json.dumps(body).encode(), got.stat.version)
        await _create_partitions(name, current, partitions)
        return no_content()

    @r.get(TOPIC + "/partitions", summary="Partitioned topic metadata")
    async def get_partitions(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        checkAllowAutoCreation: bool = False,
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        if checkAllowAutoCreation:
            answer = await service.handle_partitioned_metadata(
                PartitionedTopicMetadata(topic=name.full_name, request_id=0)
            )
            return json_response({"partitions": answer.partitions or 0})
        return json_response({"partitions": await service.partitions_of(name)})

    @r.delete(TOPIC + "/partitions", summary="Delete a partitioned topic")
    async def delete_partitioned(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        force: bool = False,
    ) -> Response:
        await delete_partitioned_topic(
            ctx,
            topic_name(domain, tenant, namespace, topic),
            force=force,
            authorization=request.headers.get("authorization"),
        )
        return no_content()

    async def non_partitioned(name: TopicName, what: str) -> Topic:
        if await service.partitions_of(name) > 0:
            raise MethodNotAllowed(f"{what} on a partitioned topic is not allowed")
        return await loaded_topic(ctx, name)

    @r.post(TOPIC + "/terminate", summary="Terminate a topic")
    async def terminate(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        t = await non_partitioned(name, "Termination")
        position = await t.ml.terminate()
        return json_response(_message_id(position, t.partition_index))

    @r.put(TOPIC + "/unload", summary="Unload a topic")
    async def unload(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        parts = await service.partitions_of(name)
        names = [name.partition(i) for i in range(parts)] if parts else [name]
        if not parts and not await service.topic_exists(name):
            raise ResourceNotFound(f"Topic {name.full_name} not found")
        for n in names:
            await service.unload_topic(n)
        return no_content()

    @r.get(TOPIC + "/lastMessageId", summary="Last message id")
    async def last_message_id(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        t = await non_partitioned(
            topic_name(domain, tenant, namespace, topic), "Get last message id"
        )
        mid = t.last_message_id()
        body = _message_id((mid.ledger_id, mid.entry_id), t.partition_index)
        if mid.batch_index is not None and mid.batch_index >= 0:
            body["batchIndex"] = mid.batch_index
        return json_response(body)

    @r.get(TOPIC + "/messageid/{timestamp}", summary="Message id by publish time")
    async def message_id_by_time(
        domain: str, tenant: str, namespace: str, topic: str, timestamp: int
    ) -> Response:
        t = await non_partitioned(
            topic_name(domain, tenant, namespace, topic), "Get message id by timestamp"
        )
        position = await t.ml.find_position_by_publish_time(
            timestamp, lambda data: Entry(data).metadata.publish_time
        )
        if not t.ml.ledgers.exists(position):
            raise ResourceNotFound(f"No message published at or after {timestamp}")
        return json_response(_message_id(position, t.partition_index))

    @r.get(TOPIC + "/stats", summary="Topic stats")
    async def stats(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(await loaded_topic_stats(ctx, name))

    @r.get(TOPIC + "/internalStats", summary="Managed-ledger internal stats")
    async def internal(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        t = await loaded_topic(ctx, topic_name(domain, tenant, namespace, topic))
        return json_response(topic_stats.internal_stats(t))

    async def partitions_json(
        name: TopicName, request: Request, action: str
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        """Every existing partition's ``stats`` or ``internalStats`` JSON, from this broker
        for the partitions it serves and from their owners for the others."""
        partitions = await service.partitions_of(name)
        if partitions == 0:
            raise ResourceNotFound("Partitioned topic does not exist")
        authorization = request.headers.get("authorization")
        owner = owner_broker(ctx)
        answers: dict[str, dict[str, Any]] = {}
        for i in range(partitions):
            part = name.partition(i)
            owner_url = await partition_owners.remote_owner_url(ctx, part)
            if owner_url is not None:
                got = await partition_owners.partition_json(owner_url, part, action, authorization)
                if got is not None:
                    answers[part.full_name] = got
                continue
            try:
                t = await loaded_topic(ctx, part)
            except ResourceNotFound:
                continue
            if action == "stats":
                times = await topic_stats.backlog_publish_times(t)
                answers[part.full_name] = topic_stats.topic_stats(t, owner, times)
            else:
                answers[part.full_name] = topic_stats.internal_stats(t)
        return partitions, answers

    @r.get(TOPIC + "/partitioned-stats", summary="Partitioned topic stats")
    async def partitioned(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        perPartition: bool = True,
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        count, per = await partitions_json(name, request, "stats")
        return json_response(topic_stats.partitioned_stats(per, count, per_partition=perPartition))

    @r.get(TOPIC + "/partitioned-internalStats", summary="Partitioned topic internal stats")
    async def partitioned_internal(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        count, parts = await partitions_json(name, request, "internalStats")
        return json_response({"metadata": {"partitions": count}, "partitions": parts})

    @r.put(TOPIC + "/compaction", summary="Trigger compaction")
    async def compact(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        t = await non_partitioned(name, "Compaction")
        if ctx.compactor is None:
            raise MethodNotAllowed("Compaction is not available on this broker")
        from magnetar.broker.compactor import CompactionInProgress

        try:
            await ctx.compactor.trigger(t)
        except CompactionInProgress as exc:
            raise Conflict(str(exc)) from exc
        return no_content()

    @r.get(TOPIC + "/compaction", summary="Compaction status")
    async def compaction_status(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        t = await non_partitioned(name, "Compaction")
        if ctx.compactor is None:
            return json_response({"status": "NOT_RUN", "lastError": ""})
        return json_response(await ctx.compactor.status(t))

    return r
