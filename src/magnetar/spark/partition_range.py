"""Reading one partition's messages between two positions, in a Spark executor.

A :class:`RangePartition` is what the driver plans and Spark ships to an executor: a
partition name and a range ``(start, end]`` of positions. :func:`read_range` opens a
non-durable reader at ``start`` (inclusive, so it can see whether ``start`` still exists),
drops what is not after ``start``, and stops at the last message covered by ``end`` -- it
never waits for a message past ``end``, since ``end`` came from the broker's last message id
and so is known to exist. The reader, client and event loop live only for the task.

A range the driver planned over an offloaded ledger (``offloaded`` set, see
:mod:`.offload_plan`) is read from the object store instead
(:mod:`.offloaded_range`); its messages go through the same filter and row building.

Errors: :class:`~magnetar.spark.topic_catalog.DataLoss` when the range's first message
or all of it is gone and ``fail_on_data_loss`` is on; :class:`RangeReadTimeout` when no
message arrives for ``read_timeout_ms`` (broker gone, partition deleted) -- Spark then
retries the task up to ``spark.task.maxFailures`` times;
:class:`~magnetar.spark.offloaded_range.OffloadedReadError` when an offloaded ledger's
objects are missing, corrupt or unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from magnetar.client import Client, Message, MessageId, Reader
from magnetar.common.errors import MagnetarError
from magnetar.common.names import partition_index_of, partitioned_topic_name
from magnetar.protocol import SchemaInfo
from magnetar.spark.offload_plan import OffloadedEntries
from magnetar.spark.offloaded_range import OffloadedEntryReader
from magnetar.spark.offsets import Position
from magnetar.spark.options import SourceOptions
from magnetar.spark.rows import ROWS_PER_BATCH_MAX, RowBuilder
from magnetar.spark.schema_values import FetchSchema, PlannedSchema, VersionedValues
from magnetar.spark.topic_catalog import DataLoss, SparkSourceError, make_client

log = logging.getLogger(__name__)

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
    offloaded: OffloadedEntries | None = None
    """Read these entries of an offloaded ledger from the object store, not the broker."""
    open_at: tuple[int, int] | None = None
    """Open the broker's reader at this ``(ledger, entry)`` (inclusive) rather than at
    ``start`` (a range that starts where offloaded ones end, see :mod:`.offload_plan`)."""
    following: tuple[OffloadedEntries | None, ...] = ()
    """With ``offloaded``: the offloaded entries of the partition's next ranges (None: one
    read through the broker), where chunked messages begun in this range are completed."""
    range_end: Position | None = None
    """With ``offloaded``: the end of the whole partition's range this range is part of."""
    after_broker: bool = False
    """With ``offloaded``: the previous range of the partition is read through the broker."""


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
    if part.open_at is not None:
        at = MessageId(index, part.open_at[0], part.open_at[1], -1)
        return await client.create_reader(
            part.partition,
            at,
            receiver_queue_size=RECEIVE_QUEUE_SIZE,
            start_message_id_inclusive=True,
        )
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


class _TaskClient:
    """The task's broker client, made on first use on the task's loop, closed at the end."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.client: Client | None = None

    async def get(self) -> Client:
        if self.client is None:
            self.client = make_client(self.opts)
        return self.client

    async def schema(self, topic: str, version: int) -> SchemaInfo | None:
        return await _schema_fetcher(await self.get())(topic, version)

    async def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(MagnetarError, TimeoutError):
                await asyncio.wait_for(self.client.close(), 5)


async def _broker_messages(
    part: RangePartition, index: int, task: _TaskClient
) -> AsyncGenerator[list[Message]]:
    """Runs of the partition's messages from ``part``'s start on, through a reader; raises
    RangeReadTimeout when none arrives for ``read_timeout_ms``."""
    opts = part.options
    reader = await _open_reader(await task.get(), part, index)
    idle_ms = 0
    while True:
        messages = await reader.read_batch(ROWS_PER_BATCH_MAX, POLL_INTERVAL_MS)
        if messages:
            idle_ms = 0
            yield messages
            continue
        idle_ms += POLL_INTERVAL_MS
        if idle_ms >= opts.read_timeout_ms:
            raise RangeReadTimeout(
                f"no message from {part.partition} for {opts.read_timeout_ms} ms while "
                f"reading ({part.start.encode()}, {part.end.encode()}] "
                f"(broker unreachable, or the data was deleted?)"
            )


def read_range(part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Record batches of the messages in ``part``'s range, in partition order: from the
    object store when the range is an offloaded ledger's, else through the broker."""
    topic, index = _split(part.partition)
    builder = RowBuilder(topic, index, part.value_schema)
    opts = part.options
    times = (opts.starting_time_ms or 0, opts.ending_time_ms)
    state = _RangeState(part.start, part.end, times)
    if state.done:
        return
    loop = asyncio.new_event_loop()
    task = _TaskClient(opts)
    values = None if part.plan is None else VersionedValues(part.plan, task.schema)

    def rows(
        runs: AsyncGenerator[list[Message]], state: _RangeState, check_loss: bool = True
    ) -> Iterator[pa.RecordBatch]:
        try:
            for out in _in_range(loop, runs, state, part, check_loss):
                if values is not None:
                    yield builder.build(out, loop.run_until_complete(values.decode(topic, out)))
                else:
                    yield builder.build(out)
        finally:
            loop.run_until_complete(runs.aclose())

    try:
        if part.offloaded is None:
            yield from rows(_broker_messages(part, index, task), state)
            return
        assert opts.offload is not None
        reader = OffloadedEntryReader(opts.offload, part.partition, index)
        ledger_id = part.offloaded.ledger_id
        yield from rows(reader.messages(part.offloaded), state)
        if reader.decoder.dropped_chunks and part.after_broker:
            raise reader.error(ledger_id, _STRADDLE)
        # A chunked message begun here and completed in later ledgers is this task's.
        rest = _RangeState(part.end, part.range_end or part.end, times)
        for ref in part.following:
            if not reader.decoder.pending_chunked or rest.done:
                break
            if ref is None:
                raise reader.error(ledger_id, _STRADDLE)
            yield from rows(reader.messages(ref, only_pending=True), rest, check_loss=False)
    finally:
        loop.run_until_complete(task.close())
        loop.close()


_STRADDLE = (
    "a chunked message spans offloaded ledgers and ledgers read through the broker; read "
    "this topic with offload.directRead=false"
)


def _in_range(
    loop: asyncio.AbstractEventLoop,
    runs: AsyncIterator[list[Message]],
    state: _RangeState,
    part: RangePartition,
    check_loss: bool = True,
) -> Iterator[list[Message]]:
    """The messages of ``runs`` in ``state``'s range, in runs, until it is done; raises
    DataLoss (``fail_on_data_loss``) when the first message shows the start is gone."""
    checked = not check_loss
    while not state.done:
        messages = loop.run_until_complete(_next(runs))
        if messages is None:
            return
        out: list[Message] = []
        state.take(messages, out)
        if not checked and state.first_seen is not None:
            checked = True
            why = state.lost()
            if why is not None:
                if part.options.fail_on_data_loss:
                    raise DataLoss(
                        f"{part.partition}: {why}. Set fail_on_data_loss=false to go on "
                        f"with what is left."
                    )
                log.warning("%s: %s; going on (fail_on_data_loss=false)", part.partition, why)
        if out:
            yield out


async def _next(runs: AsyncIterator[list[Message]]) -> list[Message] | None:
    return await anext(runs, None)
