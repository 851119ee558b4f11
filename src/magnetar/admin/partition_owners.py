"""Cluster mode: admin requests about a partitioned topic reach every partition's owner.

A partitioned topic's partitions hash to bundles of their own, so in a cluster they are
served by several brokers, and only a partition's owner has it loaded. As Pulsar's brokers
do, the broker asked about the partitioned topic (any broker: see
:mod:`magnetar.admin.owner_redirect`) answers for the partitions it serves itself and asks
each other partition's owner over its admin HTTP API — ``GET …/<partition>/stats``,
``…/internalStats``, ``DELETE …/<partition>`` — then merges the answers.

The caller's ``Authorization`` header goes along, so the owner authorizes the same role.
Each call is bounded by :data:`OWNER_CALL_TIMEOUT_MS`; an owner that fails or does not
answer makes the whole request fail (503, "try again"), naming the partition and the owner,
rather than answer with partitions silently missing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Forbidden, RestError, Unauthenticated
from magnetar.admin_client import AdminClient, AdminError, topic_path
from magnetar.common.names import TopicName

OWNER_CALL_TIMEOUT_MS = 30_000
"""Bound on one admin call to a partition's owner."""
OWNER_ANSWER_BYTES_MAX = 64 * 1024 * 1024
"""Bound on one owner's answer read into memory (internal stats of a big partition)."""


class OwnerCallFailed(RestError):
    """A partition's owner did not answer an admin call (down, moving, or it failed)."""

    status = 503


@dataclass(frozen=True, slots=True)
class OwnerAnswer:
    status: int
    body: Any
    """The answer's JSON (``None`` when it had no body)."""

    @property
    def reason(self) -> str:
        if isinstance(self.body, dict) and isinstance(self.body.get("reason"), str):
            return str(self.body["reason"])
        return f"HTTP {self.status}"


async def remote_owner_url(ctx: AdminContext, partition: TopicName) -> str | None:
    """The HTTP URL of the broker owning ``partition`` when it is another broker; ``None``
    when this broker serves it (or outside cluster mode). Waits for an owner as lookups do
    (then :class:`~magnetar.common.errors.ServiceNotReady`, a 503)."""
    ownership = ctx.service.ownership
    if ownership is None or ownership.serves(partition):
        return None
    owner = await ownership.owner(partition, ctx.service.config.lookup_owner_wait_ms)
    if owner.broker_id == ownership.broker_id:
        return None
    return owner.http_url


def partition_path(partition: TopicName, action: str = "") -> str:
    """The admin path of one partition (``action`` such as ``stats``, or "" for the topic)."""
    return topic_path(partition, action)


async def call_owner(
    method: str, owner_url: str, path: str, authorization: str | None
) -> OwnerAnswer:
    """One admin call to another broker. Raises :class:`OwnerCallFailed` when it cannot be
    made or answered (refused, timed out, not JSON); any HTTP status is returned."""
    owner = AdminClient(
        owner_url,
        timeout_s=OWNER_CALL_TIMEOUT_MS / 1000,
        authorization=authorization,
        answer_bytes_max=OWNER_ANSWER_BYTES_MAX,
    )
    try:
        answer = await asyncio.to_thread(owner.exchange, method, path)
    except AdminError as exc:
        raise OwnerCallFailed(f"{owner_url}: {exc}") from None
    try:
        body = _json(answer.body)
    except OwnerCallFailed:
        if answer.status < 300:
            raise
        body = None
    return OwnerAnswer(answer.status, body)


def _json(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        raise OwnerCallFailed("the owner's answer is not JSON") from None


async def partition_json(
    owner_url: str, partition: TopicName, action: str, authorization: str | None
) -> dict[str, Any] | None:
    """``GET`` one partition's ``action`` (``stats``, ``internalStats``) from its owner:
    the JSON object, ``None`` if the owner does not have the partition (404: not created
    yet). Raises :class:`OwnerCallFailed` for any other failure, or the owner's own
    :class:`RestError` status when it refused (401/403)."""
    answer = await call_owner("GET", owner_url, partition_path(partition, action), authorization)
    if answer.status == 404:
        return None
    if answer.status in (401, 403):
        raise _refusal(answer)
    if answer.status != 200 or not isinstance(answer.body, dict):
        raise OwnerCallFailed(
            f"{partition.full_name}: its owner {owner_url} answered {answer.reason}; try again"
        )
    return answer.body


async def delete_partition(owner_url: str, partition: TopicName, authorization: str | None) -> None:
    """``DELETE`` one partition (forced: the caller checked for clients) on its owner; a
    partition the owner does not have (404) counts as deleted."""
    answer = await call_owner(
        "DELETE", owner_url, partition_path(partition) + "?force=true", authorization
    )
    if answer.status in (200, 204, 404):
        return
    if answer.status in (401, 403):
        raise _refusal(answer)
    raise OwnerCallFailed(
        f"deleting {partition.full_name}: its owner {owner_url} answered {answer.reason}; try again"
    )


def has_clients(stats: dict[str, Any]) -> bool:
    """Whether a partition's TopicStats show producers or connected consumers."""
    if stats.get("publishers"):
        return True
    subscriptions = stats.get("subscriptions")
    if not isinstance(subscriptions, dict):
        return False
    return any(isinstance(s, dict) and s.get("consumers") for s in subscriptions.values())


def _refusal(answer: OwnerAnswer) -> RestError:
    if answer.status == 401:
        return Unauthenticated(answer.reason)
    return Forbidden(answer.reason)
