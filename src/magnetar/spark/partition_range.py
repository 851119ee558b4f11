"""Reading one partition's messages between two positions, in a Spark executor.

A :class:`RangePartition` is what the driver plans and Spark ships to an executor: a
partition name and a range ``(start, end]`` of positions. :func:`read_range` opens a
non-durable reader at ``start`` (inclusive, so it can see whether ``start`` still exists),
drops what is not after ``start``, and stops at the last message covered by ``end`` -- it
never waits for a message past ``end``, since ``end`` came from the broker's last message id
and so is known to exist. The reader, client and event loop live only for the task.

Errors: :class:`~magnetar.spark.topic_catalog.DataLoss` when the range's first message
or all of it is gone and ``fail_on_data_loss`` is on; :class:`RangeReadTimeout` when no
message arrives for ``read_timeout_ms`` (broker gone, partition deleted) -- Spark then
retries the task up to ``spark.task.maxFailures`` times.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from magnetar.client import Client, Message, MessageId, Reader
from magnetar.common.errors import MagnetarError
from magnetar.common.names import partition_index_of, partitioned_topic_name
from magnetar.protocol import SchemaInfo
from magnetar.spark.offsets import Position
from magnetar.spark.options import SourceOptions
from magnetar.spark.rows import RowBuilder
from magnetar.spark.schema_values import FetchSchema, PlannedSchema, VersionedValues
from magnetar.spark.topic_catalog import DataLoss, SparkSourceError, make_client

log = logging.getLogger(__name__)

ROWS_PER_BATCH_MAX = 8192
"""Rows per Arrow record batch handed to Spark."""
RECEIVE_QUEUE_SIZE = 5000
POLL_INTERVAL_MS = 200


class RangeReadTimeout(SparkSourceError):
    """No message arrived for ``read_timeout_ms`` while a range was incomplete."""


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task's work: messages of ``partition`` after ``start`` through ``end``."""

    partition: str
    start: Position
    end: Position
    options: SourceOptions
    value_schema: StructType | None
    plan: PlannedSchema | None = None
    """``value_format=schema``: the schema the columns were planned with."""


def _split(name: str) -> tuple[str, int]:
    return partitioned_topic_name(name), partition_index_of(name)


class _RangeState:
    """Sans-IO filter over received messages: what is in range, and when the range is done."""

    def __init__(self, start: Position, end: Position, time_range: tuple[int, int | None]):
        self.start = start
        self.end = end
        self.time_from_ms, self.time_to_ms = time_range
        self.first_seen: Message | None = None
        self.done = end.sort_key() <= start.sort_key() or end.entry_id < 0

    def take(self, messages: list[Message], out: list[Message]) -> None:
        start, end = self.start, self.end
        for m in messages:
            if self.first_seen is None:
                self.first_seen = m
            led, e, b = m.position
            if not start.after(led, e, b):
                continue
            if not end.covers(led, e, b):
                self.done = True
                return
            published_ms = m.publish_timestamp()
            if self.time_from_ms <= published_ms and (
                self.time_to_ms is None or published_ms < self.time_to_ms
            ):
                out.append(m)
            if (led, e) == end.entry and (
                b < 0 or (end.batch_index >= 0 and b >= end.batch_index) or b >= m.batch_size() - 1
            ):
                self.done = True
                return

    def lost(self) -> str | None:
        """Why data in the range may be gone, judged from the first message received."""
        first = self.first_seen
        start = self.start
        if first is None or start.is_earliest() or start.entry_id < 0:
            return None
        led, e, b = first.position
        pos = (led, e)
        if pos == start.entry:
            return None
        if not self.end.covers(led, e, b):
            return f"all of ({start.encode()}, {self.end.encode()}] is gone; first message now at {pos}"
        return (
            f"the last message read before, {start.encode()}, is gone (first message now at "
            f"{pos}); messages after it may have been removed by retention"
        )


async def _open_reader(client: Client, part: RangePartition, index: int) -> Reader:
    start = part.start
    if start.is_earliest() or start.entry_id < 0:
        reader = await client.create_reader(
            part.partition, MessageId.earliest, receiver_queue_size=RECEIVE_QUEUE_SIZE
        )
    else:
        reader = await client.create_reader(
            part.partition,
            MessageId(index, start.ledger_id, start.entry_id, -1),
            receiver_queue_size=RECEIVE_QUEUE_SIZE,
            start_message_id_inclusive=True,
        )
    # Publish-time bounds are applied as a filter, not by seeking: a seek past the range's
    # end would leave nothing to read up to ``end`` and the reader would wait for it.
    return reader


def _schema_fetcher(client: Client) -> FetchSchema:
    async def fetch(topic: str, version: int) -> SchemaInfo | None:
        found = await client.get_schema_info(topic, version)
        return found[0] if found else None

    return fetch


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Record batches of the messages in ``part``'s range, in partition order."""
    topic, index = _split(part.partition)
    builder = RowBuilder(topic, index, part.value_schema)
    opts = part.options
    state = _RangeState(part.start, part.end, (opts.starting_time_ms or 0, opts.ending_time_ms))
    if state.done:
        return
    loop = asyncio.new_event_loop()
    client: Client | None = None
    try:

        async def make() -> Client:
            return make_client(opts)

        client = loop.run_until_complete(make())
        values = None
        if part.plan is not None:
            values = VersionedValues(part.plan, _schema_fetcher(client))
        reader = loop.run_until_complete(_open_reader(client, part, index))
        checked = False
        idle_ms = 0
        while not state.done:
            messages = loop.run_until_complete(
                reader.read_batch(ROWS_PER_BATCH_MAX, POLL_INTERVAL_MS)
            )
            if not messages:
                idle_ms += POLL_INTERVAL_MS
                if idle_ms >= opts.read_timeout_ms:
                    raise RangeReadTimeout(
                        f"no message from {part.partition} for {opts.read_timeout_ms} ms while "
                        f"reading ({part.start.encode()}, {part.end.encode()}] "
                        f"(broker unreachable, or the data was deleted?)"
                    )
                continue
            idle_ms = 0
            out: list[Message] = []
            state.take(messages, out)
            if not checked:
                checked = True
                why = state.lost()
                if why is not None:
                    if opts.fail_on_data_loss:
                        raise DataLoss(
                            f"{part.partition}: {why}. Set fail_on_data_loss=false to go on "
                            f"with what is left."
                        )
                    log.warning("%s: %s; going on (fail_on_data_loss=false)", part.partition, why)
            if out and values is not None:
                decoded = loop.run_until_complete(values.decode(topic, out))
                yield builder.build(out, decoded)
            elif out:
                yield builder.build(out)
    finally:
        if client is not None:
            with contextlib.suppress(MagnetarError, TimeoutError):
                loop.run_until_complete(asyncio.wait_for(client.close(), 5))
        loop.close()
