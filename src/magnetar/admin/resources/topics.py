"""Topic operations: create, delete (with everything stored for a topic), partitioned
topics (create, grow, delete across owners), unload, terminate, message ids, stats of a
topic and of every partition, compaction; and the topic half of deleting a namespace.

A topic "exists" when its managed ledger exists; a partitioned topic when its metadata node
``/admin/partitioned-topics/…`` exists. In a cluster a partition may be served by another
broker: partitioned stats and deletion reach it through
:mod:`magnetar.admin.partition_owners`, with the caller's ``authorization``.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import unquote

from magnetar.admin import partition_owners, topic_stats
from magnetar.admin.context import AdminContext
from magnetar.admin.errors import (
    BadRequest,
    Conflict,
    MethodNotAllowed,
    PreconditionFailed,
    ResourceNotFound,
)
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.broker.policies import TOPIC_POLICIES_ROOT
from magnetar.broker.service import PARTITIONED_ROOT, partitioned_path
from magnetar.broker.topic import Topic
from magnetar.broker.topic_deletion import delete_topic_storage
from magnetar.common.errors import TopicNotFound
from magnetar.common.names import NamespaceName, TopicName
from magnetar.managed_ledger.metadata_layout import ROOT as ML_ROOT
from magnetar.metadata.store import NodeExists, NotFound
from magnetar.protocol import Entry, PartitionedTopicMetadata, TopicsMode
from magnetar.schema.registry import SCHEMAS_ROOT

DOMAINS = ("persistent", "non-persistent")


async def loaded_topic(ctx: AdminContext, name: TopicName) -> Topic:
    """The topic, loaded if needed. Raises ResourceNotFound if it does not exist (a
    partitioned topic's base name is not a topic)."""
    try:
        return await ctx.service.get_topic(name, create=False)
    except TopicNotFound:
        raise ResourceNotFound(f"Topic {name.full_name} not found") from None


async def non_partitioned_topic(ctx: AdminContext, name: TopicName, what: str) -> Topic:
    """The loaded topic for an operation that does not apply to a partitioned topic
    (MethodNotAllowed naming ``what``). Raises ResourceNotFound."""
    if await ctx.service.partitions_of(name) > 0:
        raise MethodNotAllowed(f"{what} on a partitioned topic is not allowed")
    return await loaded_topic(ctx, name)


def owner_broker(ctx: AdminContext) -> str:
    """``host:http-port`` of this broker, as stats name a topic's owner."""
    return f"{ctx.advertised_host}:{ctx.http_port}"


async def loaded_topic_stats(ctx: AdminContext, name: TopicName) -> dict[str, Any]:
    """The TopicStats JSON object of a topic this broker serves (``GET .../stats``; also read
    in-process by the standalone's functions worker). Raises ResourceNotFound."""
    t = await loaded_topic(ctx, name)
    times = await topic_stats.backlog_publish_times(t)
    return topic_stats.topic_stats(t, owner_broker(ctx), times)


def has_clients(topic: Topic) -> bool:
    """Whether producers or consumers are connected to the topic."""
    return bool(topic.producers) or any(s.consumers for s in topic.subscriptions.values())


async def list_topics(ctx: AdminContext, ns: NamespaceName, mode: TopicsMode) -> list[str]:
    """The namespace's topics (partitions included). Raises ResourceNotFound."""
    await namespace_policies(ctx, ns)
    return await ctx.service.topics_of_namespace(ns, mode)


async def list_partitioned_topics(ctx: AdminContext, ns: NamespaceName, domain: str) -> list[str]:
    """The namespace's partitioned topics of ``domain``, sorted. Raises ResourceNotFound."""
    await namespace_policies(ctx, ns)
    try:
        locals_ = await ctx.store.children(
            f"{PARTITIONED_ROOT}/{ns.tenant}/{ns.namespace}/{domain}"
        )
    except NotFound:
        locals_ = []
    return sorted(f"{domain}://{ns}/{unquote(x)}" for x in locals_)


async def create_topic(ctx: AdminContext, name: TopicName) -> None:
    """Create a non-partitioned topic (or one partition). Raises ResourceNotFound for no
    namespace, Conflict when it (or a partitioned topic of that name) exists."""
    await namespace_policies(ctx, name.namespace_name)
    if await ctx.service.topic_exists(name) or await ctx.service.partitions_of(name) > 0:
        raise Conflict("This topic already exists")
    if name.is_partition and await ctx.service.partitions_of(name.partitioned_topic) > 0:
        raise Conflict("This topic is a partition of an existing partitioned topic")
    await ctx.service.get_topic(name, create=True)


async def delete_topic(ctx: AdminContext, name: TopicName, *, force: bool) -> None:
    """Delete a non-partitioned topic (or one partition) and everything stored for it:
    ledgers, cursors, dedup snapshot, topic policies, schema (not a partition's: that is its
    partitioned topic's). PreconditionFailed while clients are connected, unless ``force``
    (which disconnects them); ResourceNotFound if it does not exist."""
    topic = await loaded_topic(ctx, name)
    if has_clients(topic) and not force:
        raise PreconditionFailed("Topic has active producers/subscriptions")
    await delete_topic_storage(ctx.service, topic)


async def create_partitions(ctx: AdminContext, name: TopicName, first: int, end: int) -> None:
    """Create partitions ``first..end-1`` now, as Pulsar's admin does, so every partition
    has stats, subscriptions and a last message id from the start. In a cluster only the
    partitions this broker serves; the others are created by their owners on first use."""
    service = ctx.service
    for i in range(first, end):
        part = name.partition(i)
        if service.ownership is None or service.ownership.serves(part):
            await service.get_topic(part, create=True)


async def create_partitioned_topic(ctx: AdminContext, name: TopicName, partitions: int) -> None:
    """Create a partitioned topic of ``partitions`` (>= 1) and its partitions. Raises
    ResourceNotFound (no namespace), BadRequest (a partition's name), Conflict."""
    await namespace_policies(ctx, name.namespace_name)
    if name.is_partition:
        raise BadRequest("a partition cannot itself be partitioned")
    if await ctx.service.topic_exists(name):
        raise Conflict("This topic already exists")
    try:
        await ctx.service.create_partitioned_topic(name, partitions)
    except NodeExists:
        raise Conflict("This topic already exists") from None
    await create_partitions(ctx, name, 0, partitions)


async def grow_partitioned_topic(ctx: AdminContext, name: TopicName, partitions: int) -> None:
    """Raise the partition count to ``partitions`` (compare-and-set on the metadata) and
    create the new partitions. Raises ResourceNotFound, BadRequest (not an increase)."""
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
    await create_partitions(ctx, name, current, partitions)


async def partition_count(ctx: AdminContext, name: TopicName, *, allow_auto_creation: bool) -> int:
    """The partitioned topic's partition count (0: not partitioned). With
    ``allow_auto_creation`` answered as a client's partitioned-metadata request is, which
    may create the topic by the namespace's auto-creation policy."""
    if allow_auto_creation:
        answer = await ctx.service.handle_partitioned_metadata(
            PartitionedTopicMetadata(topic=name.full_name, request_id=0)
        )
        return answer.partitions or 0
    return await ctx.service.partitions_of(name)


async def delete_partitioned_topic(
    ctx: AdminContext, name: TopicName, *, force: bool, authorization: str | None = None
) -> None:
    """Delete every partition, on whichever broker owns it, then the partitioned topic's
    metadata. Without ``force``, PreconditionFailed if any partition has producers or
    consumers (checked on every partition before anything is deleted). ``authorization``
    goes along to the other owners (:mod:`magnetar.admin.partition_owners`)."""
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
            if has_clients(topic) and not force:
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


async def delete_namespace_topics(ctx: AdminContext, ns: NamespaceName) -> None:
    """Delete every topic of the namespace (disconnecting clients), then whatever is
    still stored under the namespace for topics: partitioned metadata, topic policies,
    managed-ledger metadata, schemas."""
    for domain in DOMAINS:
        with contextlib.suppress(NotFound):
            for local in await ctx.store.children(
                f"{PARTITIONED_ROOT}/{ns.tenant}/{ns.namespace}/{domain}"
            ):
                base = TopicName.parse(f"{domain}://{ns}/{unquote(local)}")
                await delete_partitioned_topic(ctx, base, force=True)
    for name in await ctx.service.topics_of_namespace(ns, TopicsMode.ALL):
        with contextlib.suppress(ResourceNotFound):
            await delete_topic(ctx, TopicName.parse(name), force=True)
    for root in (PARTITIONED_ROOT, TOPIC_POLICIES_ROOT, ML_ROOT, SCHEMAS_ROOT):
        with contextlib.suppress(NotFound):
            await ctx.store.delete_recursive(f"{root}/{ns.tenant}/{ns.namespace}")


async def unload_topic(ctx: AdminContext, name: TopicName) -> None:
    """Unload the topic, or every partition of a partitioned topic. Raises
    ResourceNotFound."""
    service = ctx.service
    parts = await service.partitions_of(name)
    names = [name.partition(i) for i in range(parts)] if parts else [name]
    if not parts and not await service.topic_exists(name):
        raise ResourceNotFound(f"Topic {name.full_name} not found")
    for n in names:
        await service.unload_topic(n)


def message_id_json(position: tuple[int, int], partition: int) -> dict[str, Any]:
    """Pulsar's MessageId JSON (``ledgerId``, ``entryId``, ``partitionIndex``)."""
    return {"ledgerId": position[0], "entryId": position[1], "partitionIndex": partition}


async def terminate_topic(ctx: AdminContext, name: TopicName) -> dict[str, Any]:
    """Terminate the topic; the id of its last message. Raises MethodNotAllowed for a
    partitioned topic, ResourceNotFound."""
    t = await non_partitioned_topic(ctx, name, "Termination")
    position = await t.ml.terminate()
    return message_id_json(position, t.partition_index)


async def last_message_id(ctx: AdminContext, name: TopicName) -> dict[str, Any]:
    """The id of the topic's last message (``batchIndex`` when in a batch)."""
    t = await non_partitioned_topic(ctx, name, "Get last message id")
    mid = t.last_message_id()
    body = message_id_json((mid.ledger_id, mid.entry_id), t.partition_index)
    if mid.batch_index is not None and mid.batch_index >= 0:
        body["batchIndex"] = mid.batch_index
    return body


async def message_id_by_time(ctx: AdminContext, name: TopicName, timestamp: int) -> dict[str, Any]:
    """The id of the first message published at or after ``timestamp`` (ms). Raises
    ResourceNotFound when there is none."""
    t = await non_partitioned_topic(ctx, name, "Get message id by timestamp")
    position = await t.ml.find_position_by_publish_time(
        timestamp, lambda data: Entry(data).metadata.publish_time
    )
    if not t.ml.ledgers.exists(position):
        raise ResourceNotFound(f"No message published at or after {timestamp}")
    return message_id_json(position, t.partition_index)


async def partitions_json(
    ctx: AdminContext, name: TopicName, action: str, authorization: str | None
) -> tuple[int, dict[str, dict[str, Any]]]:
    """(partition count, every existing partition's ``stats`` or ``internalStats`` JSON by
    partition name): from this broker for the partitions it serves, from their owners for
    the others. Raises ResourceNotFound for no partitioned topic,
    :class:`~magnetar.admin.partition_owners.OwnerCallFailed` when an owner fails."""
    partitions = await ctx.service.partitions_of(name)
    if partitions == 0:
        raise ResourceNotFound("Partitioned topic does not exist")
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


async def trigger_compaction(ctx: AdminContext, name: TopicName) -> None:
    """Start compacting the topic. Raises MethodNotAllowed (partitioned, or no compactor
    on this broker), Conflict (one is running), ResourceNotFound."""
    t = await non_partitioned_topic(ctx, name, "Compaction")
    if ctx.compactor is None:
        raise MethodNotAllowed("Compaction is not available on this broker")
    from magnetar.broker.compactor import CompactionInProgress

    try:
        await ctx.compactor.trigger(t)
    except CompactionInProgress as exc:
        raise Conflict(str(exc)) from exc


async def compaction_status(ctx: AdminContext, name: TopicName) -> dict[str, Any]:
    """Pulsar's LongRunningProcessStatus JSON of the topic's compaction."""
    t = await non_partitioned_topic(ctx, name, "Compaction")
    if ctx.compactor is None:
        return {"status": "NOT_RUN", "lastError": ""}
    result: dict[str, Any] = await ctx.compactor.status(t)
    return result
