"""The ``magnetar`` PySpark data source: streaming and batch reads, streaming and batch writes.

::

    import magnetar.spark
    magnetar.spark.register(spark)
    df = (spark.readStream.format("magnetar")
          .option("service_url", "pulsar://127.0.0.1:6650")
          .option("topic", "clicks").load())

The driver side (:class:`MagnetarStreamReader`, :class:`MagnetarBatchReader`) only plans:
it asks the broker for partitions and last message ids and turns offsets into
:class:`~magnetar.spark.partition_range.RangePartition` s; executors read them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from magnetar.client import Client
from magnetar.common.names import partitioned_topic_name
from magnetar.protocol import SchemaInfo, SchemaType
from magnetar.spark.admin_rest import Ledgers, topic_ledger_infos, topic_ledgers
from magnetar.spark.offload_plan import LedgerInfo, plan_segments
from magnetar.spark.offsets import (
    EARLIEST,
    Offsets,
    Position,
    cap_end,
    crosses_ledgers,
    decode_offsets,
    encode_offsets,
    parse_offset_spec,
)
from magnetar.spark.options import OptionsError, SourceOptions, parse_options
from magnetar.spark.partition_range import RangePartition, read_range
from magnetar.spark.rows import METADATA_FIELDS, json_schema_ddl, output_schema, value_part
from magnetar.spark.schema_values import (
    PlannedSchema,
    SchemaColumnsError,
    planned,
    value_columns,
)
from magnetar.spark.sink import MagnetarBatchWriter, MagnetarStreamWriter
from magnetar.spark.topic_catalog import (
    commit_subscription,
    last_positions,
    resolve_partitions,
    run_with_client,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

LEDGER_LIST_REQUESTS_MAX = 8
"""Admin REST requests for ledger lists in flight at once while planning."""
FOLLOWING_RANGES_MAX = 16
"""Later ranges of its partition an offloaded ledger's task may read on into, to complete a
chunked message begun in it (past that, the task fails and says so)."""
SCHEMA_TOPICS_MAX = 100
"""Topics whose schemas ``value_format=schema`` compares when planning (a pattern may match
more; their values are still decoded, each by its own versions)."""


class MagnetarDataSource(DataSource):
    """``format("magnetar")``. Options are listed in :mod:`magnetar.spark.options`."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.raw_options = dict(options)

    def _source_options(self) -> SourceOptions:
        return parse_options(self.raw_options)

    def schema(self) -> StructType | str:
        opts = {k.lower(): v for k, v in self.raw_options.items()}
        value_format = opts.get("value_format", "binary").lower()
        if value_format == "json" and opts.get("value_schema"):
            return json_schema_ddl(opts["value_schema"])
        if value_format == "schema":
            columns, _ = topic_schema_columns(self._source_options())
            return output_schema(columns)
        return output_schema(None)

    @staticmethod
    def _value_schema(opts: SourceOptions, schema: StructType) -> StructType | None:
        return value_part(schema) if opts.value_format in ("json", "schema") else None

    @staticmethod
    def _planned(opts: SourceOptions) -> PlannedSchema | None:
        # Fetched again here: Spark may call schema() on another instance of the source.
        return topic_schema_columns(opts)[1] if opts.value_format == "schema" else None

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._source_options()
        return MagnetarBatchReader(opts, self._value_schema(opts, schema), self._planned(opts))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = self._source_options()
        return MagnetarStreamReader(opts, self._value_schema(opts, schema), self._planned(opts))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return MagnetarBatchWriter(parse_options(self.raw_options, for_write=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return MagnetarStreamWriter(parse_options(self.raw_options, for_write=True), schema)


def topic_schema_columns(opts: SourceOptions) -> tuple[StructType, PlannedSchema]:
    """``value_format=schema``: the value columns of the topics' latest schema and that
    schema. Every topic read must have a schema, and all must give the same columns.
    Raises SchemaColumnsError."""

    async def work(client: Client) -> list[tuple[str, SchemaInfo | None]]:
        partitions = await resolve_partitions(client, opts)
        topics = sorted({partitioned_topic_name(p) for p in partitions})
        found = []
        for topic in topics[:SCHEMA_TOPICS_MAX]:
            info = await client.get_schema_info(topic)
            found.append((topic, info[0] if info else None))
        return found

    found = run_with_client(opts, work)
    if not found:
        raise SchemaColumnsError("value_format=schema: no topic to read a schema from")
    plan: tuple[StructType, PlannedSchema] | None = None
    for topic, info in found:
        if info is None:
            raise SchemaColumnsError(f"value_format=schema: {topic} has no schema")
        columns = value_columns(info)
        clash = {f.name for f in columns.fields} & {f.name for f in METADATA_FIELDS}
        if clash and info.type != SchemaType.String:
            raise SchemaColumnsError(
                f"value_format=schema: fields of {topic}'s schema clash with the metadata "
                f"columns: {sorted(clash)}"
            )
        if plan is None:
            plan = (columns, planned(info))
        elif plan[0] != columns:
            raise SchemaColumnsError(
                f"value_format=schema: {topic}'s schema gives other columns than {found[0][0]}'s"
            )
    assert plan is not None
    return plan


def _ranges(
    opts: SourceOptions,
    value_schema: StructType | None,
    start: Offsets,
    end: Offsets,
    plan: PlannedSchema | None = None,
    ledgers: dict[str, list[LedgerInfo]] | None = None,
) -> list[RangePartition]:
    """One task per partition's range; with ``ledgers`` (from ``internal-info``), one per
    segment of it (offloaded ledgers read from the object store, see :mod:`.offload_plan`)."""
    out = []
    for name in sorted(end):
        begin = start.get(name, EARLIEST)
        stop = end[name]
        if not (stop.sort_key() > begin.sort_key() and stop.entry_id >= 0):
            continue
        if ledgers is None or name not in ledgers:
            out.append(RangePartition(name, begin, stop, opts, value_schema, plan))
            continue
        segments = plan_segments(begin, stop, ledgers[name], opts.offload_split_bytes)
        for i, seg in enumerate(segments):
            later = [s.offloaded for s in segments[i + 1 :]]
            following = tuple(later[:FOLLOWING_RANGES_MAX])
            if len(later) > FOLLOWING_RANGES_MAX:
                following += (None,)
            out.append(
                RangePartition(
                    name,
                    seg.start,
                    seg.end,
                    opts,
                    value_schema,
                    plan,
                    seg.offloaded,
                    seg.open_at,
                    following if seg.offloaded else (),
                    stop if seg.offloaded else None,
                    i > 0 and segments[i - 1].offloaded is None,
                )
            )
    return out


def _in_parallel(partitions: list[str], ask: Callable[[str], T]) -> dict[str, T]:
    """``ask(partition)`` for each partition, at most LEDGER_LIST_REQUESTS_MAX at once."""
    if not partitions:
        return {}
    with ThreadPoolExecutor(min(len(partitions), LEDGER_LIST_REQUESTS_MAX)) as pool:
        found = list(pool.map(ask, partitions))
    return dict(zip(partitions, found, strict=True))


class MagnetarStreamReader(DataSourceStreamReader):
    """Micro-batches over per-partition message ids. New partitions (of a partitioned topic,
    or new topics matching ``topics_pattern``) join from their earliest message."""

    def __init__(
        self,
        opts: SourceOptions,
        value_schema: StructType | None,
        plan: PlannedSchema | None = None,
    ) -> None:
        self.opts = opts
        self.value_schema = value_schema
        self.plan = plan
        # Validate now so that malformed offsets fail the query at start.
        self.start_spec = parse_offset_spec(opts.starting_offsets, "latest")
        self._committed: Offsets | None = None
        """What the durable subscription was last moved to (saves repeating it)."""

    def _latest(self, processed: Offsets | None = None) -> dict[str, Position]:
        """Each partition's last position; first moves the durable subscription (if any)
        to ``processed`` when that changed since the last time."""
        name = self.opts.subscription_name
        commit = name is not None and processed is not None and processed != self._committed

        async def work(client: Client) -> dict[str, Position]:
            if commit:
                assert name is not None and processed is not None
                await commit_subscription(client, name, processed)
            partitions = await resolve_partitions(client, self.opts)
            return await last_positions(client, partitions)

        return run_with_client(self.opts, work)

    def initialOffset(self) -> dict[str, str]:
        last = self._latest()
        offsets = {name: self.start_spec.resolve(name, pos) for name, pos in last.items()}
        return encode_offsets(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_entries_per_trigger is not None:
            return ReadMaxRows(self.opts.max_entries_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, str] | None = None, limit: Any = None
    ) -> dict[str, str]:
        begin = decode_offsets(start) if start else {}
        # Spark plans the next batch only once the batch ending at ``start`` is done (it
        # calls commit() for it one batch later): acknowledging here keeps the durable
        # subscription's backlog current on an idle query too.
        last = self._latest(begin if start else None)
        if start and self.opts.subscription_name is not None:
            self._committed = begin
        entries_max: int | None = None
        if isinstance(limit, ReadMaxRows):
            entries_max = limit.max_rows
        elif limit is None and self.opts.max_entries_per_trigger is not None:
            entries_max = self.opts.max_entries_per_trigger
        ledgers: dict[str, Ledgers] = {}
        if entries_max is not None:
            # Ranges across ledgers are capped with the ledger lists, fetched after ``last``.
            crossing = [
                name
                for name, pos in last.items()
                if pos.sort_key() > begin.get(name, EARLIEST).sort_key()
                and crosses_ledgers(begin.get(name, EARLIEST), pos)
            ]
            ledgers = self._ledger_lists(crossing)
        end: Offsets = {}
        for name, pos in last.items():
            s = begin.get(name, EARLIEST)
            end[name] = cap_end(s, pos, entries_max, ledgers.get(name))
        # A partition that disappeared (topic deleted) keeps its offset.
        for name, pos in begin.items():
            end.setdefault(name, pos)
        return encode_offsets(end)

    def _ledger_lists(self, partitions: list[str]) -> dict[str, Ledgers]:
        if not partitions:
            return {}
        if self.opts.admin_url is None:
            # parse_options requires admin_url with max_entries_per_trigger; a read limit
            # given some other way cannot be applied across ledgers without it.
            raise OptionsError("admission control across ledgers needs the admin_url option")
        return _in_parallel(partitions, lambda p: topic_ledgers(self.opts, p))

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        return _ranges(
            self.opts, self.value_schema, decode_offsets(start), decode_offsets(end), self.plan
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)

    def commit(self, end: dict[str, str]) -> None:
        name = self.opts.subscription_name
        if name is None:
            return
        offsets = decode_offsets(end)
        if offsets == self._committed:
            return  # latestOffset already moved the subscription there

        async def work(client: Client) -> None:
            await commit_subscription(client, name, offsets)

        run_with_client(self.opts, work)
        self._committed = offsets


class MagnetarBatchReader(DataSourceReader):
    """A topic's history between ``starting_offsets`` (default earliest) and
    ``ending_offsets`` (default latest, fixed when the query is planned), optionally
    restricted to publish times in ``[starting_time, ending_time)``.

    With ``offload.driver`` and ``admin_url`` set (and ``offload.directRead`` not false),
    offloaded ledgers are read by the executors straight from the object store, one task
    per ledger (or per ``offload.splitBytes`` of one), and the rest through the broker."""

    def __init__(
        self,
        opts: SourceOptions,
        value_schema: StructType | None,
        plan: PlannedSchema | None = None,
    ) -> None:
        self.opts = opts
        self.value_schema = value_schema
        self.plan = plan
        self.start_spec = parse_offset_spec(opts.starting_offsets, "earliest")
        self.end_spec = parse_offset_spec(opts.ending_offsets, "latest")

    def partitions(self) -> Sequence[InputPartition]:
        async def work(client: Client) -> dict[str, Position]:
            return await last_positions(client, await resolve_partitions(client, self.opts))

        last = run_with_client(self.opts, work)
        start = {n: self.start_spec.resolve(n, p) for n, p in last.items()}
        end = {n: self.end_spec.resolve(n, p) for n, p in last.items()}
        ledgers = None
        if self.opts.offload is not None and self.opts.admin_url is not None:
            # Asked after the last positions, so each list reaches its partition's end.
            reading = [n for n in end if end[n].sort_key() > start[n].sort_key()]
            ledgers = _in_parallel(reading, lambda p: topic_ledger_infos(self.opts, p))
        ranges = _ranges(self.opts, self.value_schema, start, end, self.plan, ledgers)
        # Spark wants at least one partition; an empty range reads nothing.
        return ranges or [RangePartition("", EARLIEST, EARLIEST, self.opts, self.value_schema)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(partition)


def offsets_json(offsets: dict[str, str]) -> str:
    """Offsets as ``starting_offsets`` accepts them (e.g. from a checkpoint)."""
    return json.dumps(offsets)
