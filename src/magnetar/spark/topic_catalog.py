"""What the driver asks the broker, over the binary protocol with :mod:`magnetar.client`.

Every call opens a short-lived client and closes it: the driver keeps no broker state
between micro-batches beyond the offsets Spark checkpoints.

* :func:`resolve_partitions` -- the partitions of the configured topics (or of every topic
  matching ``topics_pattern``); an explicitly named topic that does not exist raises
  :class:`UnknownTopic` instead of being created by auto-creation.
* :func:`last_positions` -- GET_LAST_MESSAGE_ID per partition, through non-durable readers.
* :func:`commit_subscription` -- moves an optional durable subscription to committed offsets,
  so ``admin topics stats`` shows the query's backlog and retention keeps unread data.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationToken,
    Client,
    ConsumerType,
    MessageId,
    TopicsMode,
    full_topic_name,
)
from magnetar.client.consumer import Consumer
from magnetar.common.errors import InvalidTopicName, MagnetarError
from magnetar.common.names import (
    PARTITIONED_TOPIC_SUFFIX,
    NamespaceName,
    partition_index_of,
    partitioned_topic_name,
)
from magnetar.protocol import InitialPosition
from magnetar.spark.offsets import Offsets, Position
from magnetar.spark.options import SourceOptions

T = TypeVar("T")

OPERATION_TIMEOUT_S = 30.0


class SparkSourceError(MagnetarError):
    """The data source cannot do what the query asks (the message says why)."""


class UnknownTopic(SparkSourceError):
    """A topic named in the options does not exist."""


class DataLoss(SparkSourceError):
    """Requested messages are gone (removed by retention or deleted with the topic)."""


def client_authentication(opts: SourceOptions) -> Authentication | None:
    """The client authentication the options ask for: a token, basic, or none."""
    if opts.auth_token is not None:
        return AuthenticationToken(opts.auth_token)
    if opts.auth_basic is not None:
        return AuthenticationBasic(*opts.auth_basic)
    return None


def make_client(opts: SourceOptions) -> Client:
    """A client for ``opts`` (authentication included). Must be created on a running loop."""
    return Client(
        opts.service_url,
        authentication=client_authentication(opts),
        operation_timeout_seconds=OPERATION_TIMEOUT_S,
        connection_timeout_ms=10_000,
    )


def run_with_client(opts: SourceOptions, work: Callable[[Client], Awaitable[T]]) -> T:
    """Run ``work(client)`` on a fresh event loop with a fresh client, then close both."""

    async def main() -> T:
        client = make_client(opts)
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(main())


def partition_index(name: str) -> int:
    """N of ``…-partition-N``; -1 for a topic that is not a partition."""
    return partition_index_of(name)


def _namespace_of(full: str) -> str:
    """``tenant/ns`` of a full topic name or of a pattern that starts like one."""
    rest = full.split("://", 1)[1]
    try:
        return str(NamespaceName.of(*rest.split("/")[:2]))
    except (InvalidTopicName, TypeError) as exc:
        raise SparkSourceError(f"invalid topic or pattern {full!r}: {exc}") from None


async def _namespace_topics(client: Client, namespace: str) -> list[str]:
    # Lists existing topics (partitions included) without creating any, unlike a lookup
    # under auto topic creation.
    return await client.get_topics_of_namespace(namespace, TopicsMode.PERSISTENT)


async def resolve_partitions(client: Client, opts: SourceOptions) -> list[str]:
    """Partition names (or non-partitioned topic names) to read, sorted.

    Raises :class:`UnknownTopic` for a named topic that does not exist."""
    out: set[str] = set()
    if opts.topics_pattern is not None:
        text = opts.topics_pattern
        full = text if "://" in text else f"persistent://public/default/{text}"
        pattern = re.compile(full)
        for name in await _namespace_topics(client, _namespace_of(full)):
            base = partitioned_topic_name(name)
            if pattern.fullmatch(base) or pattern.fullmatch(name):
                out.add(name)
        return sorted(out)
    listings: dict[str, set[str]] = {}
    for topic in opts.topics:
        full = full_topic_name(topic)
        ns = _namespace_of(full)
        if ns not in listings:
            listings[ns] = set(await _namespace_topics(client, ns))
        existing = listings[ns]
        parts = {n for n in existing if n.startswith(full + PARTITIONED_TOPIC_SUFFIX)}
        if partition_index_of(full) < 0 and parts:
            out.update(await client.get_topic_partitions(full))
        elif full in existing:
            out.add(full)
        else:
            raise UnknownTopic(f"topic {full} does not exist (create it, or produce to it first)")
    return sorted(out)


async def _last_position(client: Client, partition: str) -> Position:
    reader = await client.create_reader(partition, MessageId.latest, receiver_queue_size=1)
    try:
        last = await reader.get_last_message_id()
    finally:
        await reader.close()
    # An empty partition answers (ledger, -1): "before entry 0 of the current ledger".
    return Position(last.ledger_id(), last.entry_id(), -1)


async def last_positions(client: Client, partitions: list[str]) -> dict[str, Position]:
    """The last stored message of each partition (batch index -1: the whole last entry)."""
    found = await asyncio.gather(*(_last_position(client, p) for p in partitions))
    return dict(zip(partitions, found, strict=True))


async def commit_subscription(client: Client, subscription: str, offsets: Offsets) -> None:
    """Acknowledge, on a durable subscription, everything before each partition's offset.

    The offset message itself stays unacknowledged, so its ledger is never trimmed while the
    next micro-batch may still check that it exists (the data-loss check)."""

    async def one(partition: str, position: Position) -> None:
        if position.is_earliest() or position.entry_id <= 0:
            return
        consumer = await client.subscribe(
            partition,
            subscription,
            consumer_type=ConsumerType.Failover,
            receiver_queue_size=0,
            initial_position=InitialPosition.Earliest,
        )
        assert isinstance(consumer, Consumer)
        try:
            target = MessageId(
                partition_index(partition), position.ledger_id, position.entry_id - 1, -1
            )
            await consumer.acknowledge_cumulative(target)
        finally:
            with contextlib.suppress(MagnetarError):
                await consumer.close()

    await asyncio.gather(*(one(p, pos) for p, pos in offsets.items()))
