"""Writing DataFrames to topics, exactly once with broker deduplication.

Each Spark task produces with a producer name that is the same on every attempt of the same
work -- ``spark-<query id>-<batch id>-<partition id>`` for streaming writes,
``spark-<write id>-<partition id>`` for batch writes -- and gives each row its index in the
task as sequence id. With deduplication enabled on the broker (or namespace/topic), a
retried task or a restarted query's replayed micro-batch re-sends the same (name, sequence
id) pairs and the broker stores none of them twice.

That holds when a task sees the same rows in the same order on every attempt, which Spark
gives for a replayable source and narrow transformations (and for streaming aggregations'
output); rows coming out of a shuffle without an ordering do not have that guarantee.

Rows: ``value`` (binary or string, required), optional ``key`` (string), ``properties``
(map<string,string>), ``event_time`` (timestamp) and ``topic`` (string: routes the row;
null or absent uses the ``topic`` option). Keyed rows go to the partition the Java client's
hash of the key picks; unkeyed rows go round-robin by row index.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from magnetar.client import Client, MessageId, Producer, full_topic_name
from magnetar.client.routing import java_string_hash
from magnetar.common.errors import MagnetarError, ProducerBusy
from magnetar.common.names import TopicName
from magnetar.spark.admin_rest import deduplication_enabled
from magnetar.spark.options import OptionsError, SourceOptions
from magnetar.spark.topic_catalog import SparkSourceError, make_client

log = logging.getLogger(__name__)

IN_FLIGHT_MAX = 8000
"""Unconfirmed sends per task before waiting for receipts (below the producer's queue)."""
PRODUCER_BUSY_RETRY_S = 30.0
"""How long to retry a producer name still held by a previous, dying attempt."""

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    producer_name: str
    rows: int


def _check_schema(schema: StructType, opts: SourceOptions) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise OptionsError("rows written to magnetar need a value column")
    if opts.write_topic is None and "topic" not in names:
        raise OptionsError("give the topic option or a topic column")


def check_deduplication(opts: SourceOptions) -> None:
    """With ``admin_url`` and a ``topic`` option: fail (on the driver, before any write)
    when the broker does not deduplicate that topic, since writes would then not be
    exactly once. A topic that does not exist yet cannot be checked (logged)."""
    if opts.admin_url is None or opts.write_topic is None:
        return
    topic = full_topic_name(opts.write_topic)
    enabled = deduplication_enabled(opts, topic)
    if enabled is None:
        log.warning("%s does not exist yet: cannot check that deduplication is on", topic)
    elif not enabled:
        namespace = TopicName.parse(topic).namespace_name
        raise SparkSourceError(
            f"deduplication is off for {topic}, so retried writes would be stored twice: "
            f"enable it with POST {opts.admin_url.rstrip('/')}/admin/v2/namespaces/"
            f"{namespace}/deduplication (body true), or drop admin_url to write "
            f"without this check"
        )


class _TaskWriter:
    """The producers of one task; created and used on one event loop."""

    def __init__(self, client: Client, producer_name: str, default_topic: str | None) -> None:
        self.client = client
        self.producer_name = producer_name
        self.default_topic = full_topic_name(default_topic) if default_topic else None
        self.producers: dict[str, list[Producer]] = {}
        self.in_flight: deque[asyncio.Future[MessageId]] = deque()
        self.rows = 0

    async def _create(self, partition: str) -> Producer:
        deadline = asyncio.get_running_loop().time() + PRODUCER_BUSY_RETRY_S
        delay_s = 0.1
        while True:
            try:
                producer = await self.client.create_producer(
                    partition,
                    producer_name=self.producer_name,
                    max_pending_messages=IN_FLIGHT_MAX + 1000,
                    batching_max_messages=1000,
                    batching_max_publish_delay_ms=5,
                )
            except ProducerBusy:
                # A failed attempt's producer is still registered until its connection goes.
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 2.0)
                continue
            assert isinstance(producer, Producer)
            return producer

    async def _producers_of(self, topic: str) -> list[Producer]:
        found = self.producers.get(topic)
        if found is None:
            names = await self.client.get_topic_partitions(topic)
            found = list(await asyncio.gather(*(self._create(n) for n in names)))
            self.producers[topic] = found
        return found

    async def write(self, batch: pa.RecordBatch) -> None:
        cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        values = cols["value"]
        keys = cols.get("key")
        props = cols.get("properties")
        events = cols.get("event_time")
        topics = cols.get("topic")
        for i, value in enumerate(values):
            topic = topics[i] if topics is not None and topics[i] else self.default_topic
            if topic is None:
                raise SparkSourceError("a row has no topic and the topic option is not set")
            producers = await self._producers_of(full_topic_name(topic))
            key = keys[i] if keys is not None else None
            seq = self.rows
            self.rows += 1
            n = len(producers)
            index = 0 if n == 1 else (java_string_hash(key) if key is not None else seq) % n
            payload = b"" if value is None else value.encode() if isinstance(value, str) else value
            prop = props[i] if props is not None else None
            event = events[i] if events is not None else None
            fut = producers[index].send_async(
                bytes(payload),
                properties=dict(prop) if prop else None,
                partition_key=key,
                sequence_id=seq,
                event_timestamp=int(event.timestamp() * 1000) if event is not None else None,
            )
            self.in_flight.append(fut)
            if len(self.in_flight) >= IN_FLIGHT_MAX:
                while len(self.in_flight) > IN_FLIGHT_MAX // 2:
                    await self.in_flight.popleft()

    async def finish(self) -> None:
        for producers in self.producers.values():
            for p in producers:
                await p.flush()
        while self.in_flight:
            await self.in_flight.popleft()

    async def close(self) -> None:
        for producers in self.producers.values():
            for p in producers:
                with contextlib.suppress(MagnetarError):
                    await p.close()


def write_batches(
    opts: SourceOptions, producer_name: str, batches: Iterator[pa.RecordBatch]
) -> WriteResult:
    """Produce every row of ``batches``; returns once the broker stored all of them.
    Raises the client's error if a send fails (Spark then retries the task)."""
    loop = asyncio.new_event_loop()
    try:

        async def make() -> tuple[Client, _TaskWriter]:
            client = make_client(opts)
            return client, _TaskWriter(client, producer_name, opts.write_topic)

        client, writer = loop.run_until_complete(make())
        try:
            for batch in batches:
                loop.run_until_complete(writer.write(batch))
            loop.run_until_complete(writer.finish())
        finally:
            with contextlib.suppress(MagnetarError, TimeoutError):
                loop.run_until_complete(asyncio.wait_for(writer.close(), 10))
            with contextlib.suppress(MagnetarError, TimeoutError):
                loop.run_until_complete(asyncio.wait_for(client.close(), 5))
        return WriteResult(producer_name, writer.rows)
    finally:
        loop.close()


def _task() -> Any:
    ctx = TaskContext.get()
    if ctx is None:
        raise SparkSourceError("magnetar writers run inside Spark tasks")
    return ctx


class MagnetarStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink; producer names ``spark-<query id>-<batch id>-<partition>``."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        _check_schema(schema, opts)
        check_deduplication(opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        ctx = _task()
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if query_id is None or batch_id is None:
            raise SparkSourceError("streaming write without a query id / batch id in the task")
        name = f"spark-{query_id}-{batch_id}-{ctx.partitionId()}"
        return write_batches(self.opts, name, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class MagnetarBatchWriter(DataSourceArrowWriter):
    """Batch sink; producer names ``spark-<write id>-<partition>``. Re-running a job with
    the same ``write_id`` option writes nothing that the earlier run stored."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        _check_schema(schema, opts)
        check_deduplication(opts)
        self.opts = opts
        self.write_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        name = f"spark-{self.write_id}-{_task().partitionId()}"
        return write_batches(self.opts, name, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass
