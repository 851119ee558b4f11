"""Looking at a topic's stored messages without a subscription moving, as Pulsar's
``PersistentTopics`` REST:

* ``GET T/ledger/{ledgerId}/entry/{entryId}`` — the entry at that position
  (``topics get-message-by-id``);
* ``GET T/examinemessage?initialPosition=earliest|latest&messagePosition=N`` — the N-th entry
  (1-based) from the first or from the last one (``topics examine-message``);
* ``POST T/subscription/{sub}/analyzeBacklog`` — how many entries and messages the
  subscription's backlog holds (``topics analyze-backlog``), from its first unacknowledged
  entry or from the message id of an optional ``{"ledgerId", "entryId"}`` body; Pulsar's
  ``AnalyzeSubscriptionBacklogResult`` JSON. At most :data:`BACKLOG_SCAN_ENTRIES_MAX` entries
  are read (Pulsar's ``subscriptionBacklogScanMaxEntries``); past it ``aborted`` is true.

Entries answer as peek does (payload body, ``X-Pulsar-*`` headers); 404 for a position or
subscription that does not exist, 405 on a partitioned topic's base name (name a partition),
400 for a bad ``initialPosition`` or ``messagePosition``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, MethodNotAllowed, ResourceNotFound
from magnetar.admin.request_body import as_int, as_object, read_json
from magnetar.admin.resources.topics import loaded_topic
from magnetar.admin.responses import json_response
from magnetar.admin.subscriptions import (
    PEEK_POSITION_MAX,
    SUB,
    entry_response,
    subscription_cursor,
)
from magnetar.admin.topics import TOPIC, topic_name
from magnetar.broker.topic import Topic
from magnetar.common.names import TopicName
from magnetar.managed_ledger.position import Position
from magnetar.protocol import Entry, ProtocolError

BACKLOG_SCAN_ENTRIES_MAX = 10_000
BACKLOG_READ_ENTRIES_MAX = 100
"""Entries read from the ledger at once while analysing a backlog."""


def _positions_back(topic: Topic, n: int) -> Position:
    ledgers = topic.ml.ledgers
    pos = ledgers.previous_position(ledgers.end_position)
    for _ in range(n - 1):
        if not ledgers.exists(pos):
            break
        pos = ledgers.previous_position(pos)
    return pos


def _positions_forward(topic: Topic, n: int) -> Position:
    ledgers = topic.ml.ledgers
    pos = ledgers.first_position
    for _ in range(n - 1):
        pos = ledgers.next_position(pos)
    return pos


def _messages_in(data: bytes) -> int:
    try:
        count = Entry(data).metadata.num_messages_in_batch
    except ProtocolError:
        return 1
    return 1 if count is None else count


async def analyze_backlog(
    topic: Topic, subscription: str, start: Position | None
) -> dict[str, Any]:
    """Count the entries and messages of a subscription's backlog (see the module)."""
    state = subscription_cursor(topic, subscription).state
    ledgers = topic.ml.ledgers
    pos = ledgers.normalize(state.first_unacked() if start is None else start)
    end = ledgers.end_position
    entries = messages = scanned = 0
    first: Position | None = None
    last: Position | None = None
    aborted = False
    while pos < end and ledgers.exists(pos):
        if scanned >= BACKLOG_SCAN_ENTRIES_MAX:  # acknowledged entries are read too
            aborted = True
            break
        segment = ledgers.get(pos[0])
        assert segment is not None
        last_entry = min(
            segment.entries - 1,
            pos[1] + BACKLOG_READ_ENTRIES_MAX - 1,
            pos[1] + BACKLOG_SCAN_ENTRIES_MAX - scanned - 1,
        )
        batch = await topic.ml.read_range(pos[0], pos[1], last_entry, read_ahead=False)
        scanned += last_entry - pos[1] + 1
        for offset, data in enumerate(batch):
            here = Position(pos[0], pos[1] + offset)
            if state.is_acked(here):
                continue
            entries += 1
            messages += _messages_in(data)
            first = first or here
            last = here
        pos = ledgers.next_position(Position(pos[0], last_entry))
    return {
        "entries": entries,
        "messages": messages,
        "filterRejectedEntries": 0,
        "filterAcceptedEntries": entries,
        "filterRescheduledEntries": 0,
        "filterRejectedMessages": 0,
        "filterAcceptedMessages": messages,
        "filterRescheduledMessages": 0,
        "aborted": aborted,
        "firstMessageId": None if first is None else str(first),
        "lastMessageId": None if last is None else str(last),
    }


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["topics"])
    service = ctx.service

    async def single(domain: str, tenant: str, namespace: str, topic: str) -> Topic:
        name: TopicName = topic_name(domain, tenant, namespace, topic)
        if await service.partitions_of(name) > 0:
            raise MethodNotAllowed("Not allowed on a partitioned topic: name a partition")
        return await loaded_topic(ctx, name)

    @r.get(TOPIC + "/ledger/{ledgerId}/entry/{entryId}", summary="The message at a position")
    async def message_by_id(
        domain: str, tenant: str, namespace: str, topic: str, ledgerId: int, entryId: int
    ) -> Response:
        t = await single(domain, tenant, namespace, topic)
        pos = Position(ledgerId, entryId)
        if not t.ml.ledgers.exists(pos):
            raise ResourceNotFound(f"Message {ledgerId}:{entryId} not found")
        return await entry_response(t, pos)

    @r.get(TOPIC + "/examinemessage", summary="The n-th message from the first or the last")
    async def examine(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        initialPosition: str = "latest",
        messagePosition: int = 1,
    ) -> Response:
        where = initialPosition.lower()
        if where not in ("latest", "earliest"):
            raise BadRequest("initialPosition must be latest or earliest")
        if not 1 <= messagePosition <= PEEK_POSITION_MAX:
            raise BadRequest(f"messagePosition must be between 1 and {PEEK_POSITION_MAX}")
        t = await single(domain, tenant, namespace, topic)
        pos = (
            _positions_back(t, messagePosition)
            if where == "latest"
            else _positions_forward(t, messagePosition)
        )
        if not t.ml.ledgers.exists(pos):
            raise ResourceNotFound("Could not examine messages due to the position is out of range")
        return await entry_response(t, pos)

    @r.post(SUB + "/analyzeBacklog", summary="Count a subscription's backlog")
    async def analyze(
        domain: str, tenant: str, namespace: str, topic: str, subscription: str, request: Request
    ) -> Response:
        t = await single(domain, tenant, namespace, topic)
        body = await read_json(request, default=None)
        start = None
        if body is not None:
            doc = as_object(body, "the start message id")
            start = Position(
                as_int(doc.get("ledgerId"), "ledgerId"),
                max(as_int(doc.get("entryId"), "entryId"), 0),
            )
        return json_response(await analyze_backlog(t, subscription, start))

    return r
