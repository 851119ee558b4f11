"""Tiered storage of one topic over REST, with Pulsar's paths (the topic's owner answers;
others redirect, :mod:`magnetar.admin.owner_redirect`):

* ``PUT …/{topic}/offload`` with a MessageId body ``{"ledgerId": L, "entryId": E}``: offload
  every closed ledger before ledger ``L`` (Pulsar's ``triggerOffload``), in the background;
  405 when the topic has no offload driver, 409 while an offload runs;
* ``GET …/{topic}/offload``: ``{"status": "NOT_RUN|RUNNING|SUCCESS|ERROR", "lastError": …,
  "firstUnoffloadedMessage": {"ledgerId", "entryId"}}`` (Pulsar's ``OffloadProcessStatus``);
* ``GET …/{topic}/internal-info``: the managed ledger's metadata as Pulsar's
  ``ManagedLedgerInfo`` JSON (:func:`internal_info`), which says where each offloaded
  ledger's objects are (the Spark reader reads them straight from the object store).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, Conflict, MethodNotAllowed
from magnetar.admin.request_body import as_int, as_object, read_json
from magnetar.admin.resources.topics import non_partitioned_topic
from magnetar.admin.responses import json_response, no_content
from magnetar.admin.topics import TOPIC, topic_name
from magnetar.managed_ledger.errors import OffloadNotConfigured
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic
    from magnetar.managed_ledger.offload import OffloadContext


def uuid_longs(text: str) -> tuple[int, int]:
    """A uuid as Pulsar's ``uidMsb``/``uidLsb`` (signed 64-bit halves)."""
    value = uuid.UUID(text).int
    msb, lsb = value >> 64, value & ((1 << 64) - 1)
    return _signed(msb), _signed(lsb)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def offload_context_json(context: OffloadContext) -> dict[str, Any]:
    """Pulsar's ``OffloadContext`` (plus ``uuid`` as text)."""
    msb, lsb = uuid_longs(context.uuid)
    return {
        "uidMsb": msb,
        "uidLsb": lsb,
        "uuid": context.uuid,
        "complete": context.complete,
        "bookkeeperDeleted": context.bookkeeper_deleted,
        "timestamp": context.timestamp_ms,
        "driverName": context.driver_name,
        "driverMetadata": [
            {"key": k, "value": v} for k, v in sorted(context.driver_metadata.items())
        ],
    }


def internal_info(topic: Topic) -> dict[str, Any]:
    """Pulsar's ``ManagedLedgerInfo`` JSON of a loaded topic, with its cursors."""
    ml = topic.ml
    ledgers: list[dict[str, Any]] = []
    for seg in ml.ledgers:
        entry: dict[str, Any] = {
            "ledgerId": seg.ledger_id,
            "entries": seg.entries,
            "size": seg.size_bytes,
            "timestamp": seg.closed_ms or seg.created_ms,
        }
        if seg.offload is not None:
            entry["offloadContext"] = offload_context_json(seg.offload)
        ledgers.append(entry)
    info: dict[str, Any] = {
        "ledgerInfo": ledgers,
        "properties": [],
        "cursors": {
            name: {
                "markDelete": _message_id(cursor.state.mark_delete),
                "durable": cursor.durable,
            }
            for name, cursor in sorted(ml.cursors.items())
        },
    }
    if ml.is_terminated:
        info["terminatedPosition"] = _message_id(ml.last_confirmed)
    return info


def offload_status(topic: Topic) -> dict[str, Any]:
    """Pulsar's ``OffloadProcessStatus`` of a loaded topic."""
    offloads = topic.ml.offloads
    return {
        "status": offloads.status.value,
        "lastError": offloads.last_error or "",
        "firstUnoffloadedMessage": _message_id(offloads.first_unoffloaded()),
    }


def _message_id(position: Position) -> dict[str, int]:
    return {"ledgerId": position[0], "entryId": position[1], "partitionIndex": -1}


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["topics"])

    @r.put(TOPIC + "/offload", summary="Offload the closed ledgers before a message id")
    async def trigger(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        body = as_object(await read_json(request), "the message id")
        if "ledgerId" not in body:
            raise BadRequest("the message id needs ledgerId")
        up_to = Position(
            as_int(body["ledgerId"], "ledgerId"), as_int(body.get("entryId", 0), "entryId")
        )
        t = await non_partitioned_topic(ctx, name, "Offload")
        if t.ml.offloads.running:
            raise Conflict("Offload already running")
        try:
            t.ml.offloads.request(up_to)
        except OffloadNotConfigured:
            raise MethodNotAllowed(f"Offload is not configured for {name.full_name}") from None
        return no_content()

    @r.get(TOPIC + "/offload", summary="Offload status")
    async def status(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(offload_status(await non_partitioned_topic(ctx, name, "Offload")))

    @r.get(TOPIC + "/internal-info", summary="Managed-ledger metadata (ManagedLedgerInfo)")
    async def info(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(internal_info(await non_partitioned_topic(ctx, name, "Internal info")))

    return r
