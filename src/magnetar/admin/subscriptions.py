"""Subscriptions of a topic: list, create at a position, delete, skip, clear backlog,
expire, reset cursor, peek, replication on or off (``T/subscription/{sub}/…``, ``T/subscriptions``,
``T/all_subscription/…``). On a partitioned topic's base name, list/create/delete/skip/
expire/reset apply to every partition (as Pulsar's admin does); peek is refused (405).

A subscription is either a live :class:`~magnetar.broker.subscription.Subscription`
(consumers attached since the topic was loaded) or a stored durable cursor without one;
both are handled. Operations that move a live subscription's cursor under its consumers
(reset) go through :meth:`Subscription.seek`, which disconnects them so they restart from
the new position, as Pulsar does.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import (
    BadRequest,
    Conflict,
    MethodNotAllowed,
    PreconditionFailed,
    ResourceNotFound,
)
from magnetar.admin.request_body import as_int, as_object, read_json
from magnetar.admin.resources.topics import loaded_topic
from magnetar.admin.responses import json_response, no_content
from magnetar.admin.topic_stats import iso_time, subscription_names
from magnetar.admin.topics import TOPIC, topic_name
from magnetar.broker.replicated_subscription import set_replicated
from magnetar.broker.topic import Topic
from magnetar.common.names import TopicName
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.position import Position
from magnetar.protocol import Entry, MessageId, ProtocolError, Seek
from magnetar.protocol.compression import CompressionError, decompress

SUB = TOPIC + "/subscription/{subscription}"
PEEK_POSITION_MAX = 1_000_000


def _publish_time_of(data: bytes) -> int:
    return Entry(data).metadata.publish_time


async def _topics(ctx: AdminContext, name: TopicName) -> list[Topic]:
    """The topic, or every existing partition of a partitioned topic."""
    partitions = await ctx.service.partitions_of(name)
    if partitions == 0:
        return [await loaded_topic(ctx, name)]
    topics = []
    for i in range(partitions):
        part = name.partition(i)
        if await ctx.service.topic_exists(part):
            topics.append(await loaded_topic(ctx, part))
    return topics


def subscription_cursor(topic: Topic, subscription: str) -> ManagedCursor:
    sub = topic.subscriptions.get(subscription)
    if sub is not None:
        return sub.cursor
    cursor = topic.ml.cursors.get(subscription)
    if cursor is None:
        raise ResourceNotFound("Subscription not found")
    return cursor


def _position(body: Any, topic: Topic) -> Position | None:
    """A MessageId body ``{"ledgerId", "entryId", ...}`` as the next position to read;
    ``None`` for latest (Long.MAX ids, as Pulsar's ``MessageId.latest``)."""
    mid = as_object(body, "message id")
    ledger_id = as_int(mid.get("ledgerId"), "ledgerId")
    entry_id = as_int(mid.get("entryId"), "entryId")
    ledgers = topic.ml.ledgers
    if ledger_id < 0:
        return ledgers.first_position
    if ledger_id >= 2**63 - 1:
        return None
    return min(Position(ledger_id, max(entry_id, 0)), ledgers.end_position)


async def expire(topic: Topic, subscription: str, seconds: int) -> int:
    """Mark-delete every message published more than ``seconds`` ago; returns how many."""
    cursor = subscription_cursor(topic, subscription)
    clock = topic.service.clock
    now_ms = clock.now_ms()
    ml = topic.ml
    first_kept = await ml.find_position_by_publish_time(now_ms - seconds * 1000, _publish_time_of)
    target = ml.ledgers.previous_position(first_kept)
    before = cursor.backlog_messages
    if target > cursor.state.mark_delete:
        cursor.state.ack_cumulative(target)
    expired = max(before - cursor.backlog_messages, 0)
    topic.count_expired(subscription, expired)
    return expired


async def delete_subscription(topic: Topic, subscription: str, *, force: bool) -> None:
    sub = topic.subscriptions.get(subscription)
    if sub is None:
        subscription_cursor(topic, subscription)
        await topic.ml.delete_cursor(subscription)
        return
    if sub.consumers and not force:
        raise PreconditionFailed("Subscription has active connected consumers")
    sub.keep_when_empty = True
    for consumer in list(sub.consumers.values()):
        consumer.connection.consumer_closed_by_broker(consumer)
        await sub.remove_consumer(consumer)
    await topic.delete_subscription(sub)


async def reset(topic: Topic, subscription: str, seek: Seek) -> None:
    sub = topic.subscriptions.get(subscription)
    if sub is not None:
        await sub.seek(seek)
        return
    cursor = subscription_cursor(topic, subscription)
    if seek.message_publish_time is not None:
        await cursor.reset_to_publish_time(seek.message_publish_time, _publish_time_of)
        return
    mid = seek.message_id
    assert mid is not None
    ledgers = topic.ml.ledgers
    target = (
        ledgers.end_position
        if mid.ledger_id >= 2**63 - 1
        else min(Position(mid.ledger_id, max(mid.entry_id, 0)), ledgers.end_position)
        if mid.ledger_id >= 0
        else ledgers.first_position
    )
    await cursor.reset(target)


def _peek_headers(entry: Entry, position: Position) -> dict[str, str]:
    md = entry.metadata
    headers = {"X-Pulsar-Message-ID": f"{position[0]}:{position[1]}"}
    props = dict(md.properties)
    for key, value in props.items():
        headers[f"X-Pulsar-PROPERTY-{key}"] = value
    headers["X-Pulsar-Property"] = json.dumps(props)
    headers["X-Pulsar-publish-time"] = iso_time(md.publish_time)
    if md.event_time:
        headers["X-Pulsar-event-time"] = iso_time(md.event_time)
    headers["X-Pulsar-producer-name"] = md.producer_name
    headers["X-Pulsar-sequence-id"] = str(md.sequence_id)
    if md.highest_sequence_id:
        headers["X-Pulsar-highest-sequence-id"] = str(md.highest_sequence_id)
    if md.partition_key is not None:
        headers["X-Pulsar-partition-key"] = md.partition_key
    batch = md.num_messages_in_batch
    if batch is not None:
        headers["X-Pulsar-num-batch-message"] = str(batch)
        headers["X-Pulsar-batch-size"] = str(len(entry.payload))
    headers["X-Pulsar-compression"] = md.compression.name
    headers["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    if md.uuid is not None:
        headers["X-Pulsar-uuid"] = md.uuid
    if md.num_chunks_from_msg is not None:
        headers["X-Pulsar-num-chunks-from-msg"] = str(md.num_chunks_from_msg)
        headers["X-Pulsar-chunk-id"] = str(md.chunk_id)
        headers["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
    if md.null_value:
        headers["X-Pulsar-null-value"] = "true"
    return headers


async def peek(topic: Topic, subscription: str, n: int) -> Response:
    """The ``n``-th (1-based) unacknowledged entry of the subscription, as raw payload."""
    if n < 1 or n > PEEK_POSITION_MAX:
        raise BadRequest(f"position must be between 1 and {PEEK_POSITION_MAX}")
    state = subscription_cursor(topic, subscription).state
    ledgers = topic.ml.ledgers
    pos = state.first_unacked()
    seen = 0
    while True:
        if not ledgers.exists(pos):
            pos = ledgers.normalize(pos)
            if not ledgers.exists(pos):
                raise ResourceNotFound("Message not found")
        if not state.is_acked(pos):
            seen += 1
            if seen == n:
                break
        pos = ledgers.next_position(pos)
    return await entry_response(topic, pos)


async def entry_response(topic: Topic, pos: Position) -> Response:
    """The entry at ``pos`` (which exists) as its payload, with Pulsar's ``X-Pulsar-*``
    headers (peek, examine-message, get-message-by-id)."""
    data = await topic.ml.read_range(pos[0], pos[1], pos[1], read_ahead=False)
    try:
        entry = Entry(data[0])
        md = entry.metadata
        payload = bytes(decompress(md.compression, entry.payload, md.uncompressed_size))
        headers = _peek_headers(entry, pos)
    except (ProtocolError, CompressionError) as exc:
        raise ResourceNotFound(f"Message at {pos[0]}:{pos[1]} is unreadable: {exc}") from exc
    return Response(payload, media_type="application/octet-stream", headers=headers)


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["subscriptions"])
    service = ctx.service

    async def each(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        action: Callable[[Topic], Awaitable[None]],
    ) -> Response:
        for t in await _topics(ctx, topic_name(domain, tenant, namespace, topic)):
            await action(t)
        return no_content()

    @r.get(TOPIC + "/subscriptions", summary="List subscriptions")
    async def list_subscriptions(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        names: set[str] = set()
        for t in await _topics(ctx, topic_name(domain, tenant, namespace, topic)):
            names.update(subscription_names(t))
        return json_response(sorted(names))

    @r.put(SUB, summary="Create a subscription at a position")
    async def create(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        subscription: str,
        request: Request,
        replicated: bool = False,
    ) -> Response:
        body = await read_json(request, None)
        topics = await _topics(ctx, topic_name(domain, tenant, namespace, topic))
        for t in topics:
            if subscription in t.subscriptions or subscription in t.ml.cursors:
                raise Conflict("Subscription already exists for topic")
        for t in topics:
            position = None if body is None else _position(body, t)
            if position is None:
                await t.ml.open_cursor(subscription)
            else:
                await t.ml.open_cursor(subscription, start=position)
        return no_content()

    @r.delete(SUB, summary="Delete a subscription")
    async def delete(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, force: bool = False
    ) -> Response:
        topics = await _topics(ctx, topic_name(domain, tenant, namespace, topic))
        for t in topics:
            subscription_cursor(t, subscription)
            sub = t.subscriptions.get(subscription)
            if sub is not None and sub.consumers and not force:
                raise PreconditionFailed("Subscription has active connected consumers")
        for t in topics:
            await delete_subscription(t, subscription, force=force)
        return no_content()

    @r.post(SUB + "/skip/{count}", summary="Skip messages")
    async def skip(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, count: int
    ) -> Response:
        if count < 0:
            raise BadRequest("the number of messages to skip must be >= 0")

        async def act(t: Topic) -> None:
            subscription_cursor(t, subscription).skip(count)

        return await each(domain, tenant, namespace, topic, act)

    @r.post(SUB + "/skip_all", summary="Clear a subscription's backlog")
    async def skip_all(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str
    ) -> Response:
        async def act(t: Topic) -> None:
            subscription_cursor(t, subscription).clear_backlog()

        return await each(domain, tenant, namespace, topic, act)

    @r.post(SUB + "/expireMessages/{seconds}", summary="Expire messages older than N seconds")
    async def expire_messages(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, seconds: int
    ) -> Response:
        async def act(t: Topic) -> None:
            await expire(t, subscription, seconds)

        return await each(domain, tenant, namespace, topic, act)

    @r.post(
        TOPIC + "/all_subscription/expireMessages/{seconds}",
        summary="Expire messages of every subscription",
    )
    async def expire_all(
        domain: str, tenant: str, namespace: str, topic: str, seconds: int
    ) -> Response:
        async def act(t: Topic) -> None:
            for name in subscription_names(t):
                await expire(t, name, seconds)

        return await each(domain, tenant, namespace, topic, act)

    @r.post(SUB + "/resetcursor/{timestamp}", summary="Reset a cursor to a publish time")
    async def reset_to_time(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, timestamp: int
    ) -> Response:
        async def act(t: Topic) -> None:
            await reset(
                t, subscription, Seek(consumer_id=0, request_id=0, message_publish_time=timestamp)
            )

        return await each(domain, tenant, namespace, topic, act)

    @r.post(SUB + "/resetcursor", summary="Reset a cursor to a message id")
    async def reset_to_id(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        subscription: str,
        request: Request,
        isExcluded: bool = False,
    ) -> Response:
        body = as_object(await read_json(request), "message id")
        ledger_id = as_int(body.get("ledgerId"), "ledgerId")
        entry_id = as_int(body.get("entryId"), "entryId")
        if isExcluded and ledger_id >= 0:
            entry_id += 1

        async def act(t: Topic) -> None:
            await reset(
                t,
                subscription,
                Seek(consumer_id=0, request_id=0, message_id=MessageId(ledger_id, entry_id)),
            )

        return await each(domain, tenant, namespace, topic, act)

    @r.post(
        SUB + "/replicatedSubscriptionStatus",
        summary="Enable or disable a subscription's replication (body true or false)",
    )
    async def replicated_status(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        subscription: str,
        request: Request,
    ) -> Response:
        enabled = await read_json(request)
        if not isinstance(enabled, bool):
            raise BadRequest("the body must be true or false")
        topics = await _topics(ctx, topic_name(domain, tenant, namespace, topic))
        for t in topics:
            subscription_cursor(t, subscription)
        for t in topics:
            await set_replicated(subscription_cursor(t, subscription), enabled)
        return no_content()

    @r.get(SUB + "/position/{n}", summary="Peek the n-th message of a subscription")
    async def peek_nth(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, n: int
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        if await service.partitions_of(name) > 0:
            raise MethodNotAllowed("Peek messages on a partitioned topic is not allowed")
        return await peek(await loaded_topic(ctx, name), subscription, n)

    return r
