"""Messages -> Spark rows, as Arrow record batches (built column by column).

Row layout (``SCHEMA``): ``key`` string, ``value`` binary, ``topic`` string (without the
``-partition-N`` suffix), ``partition`` int (-1 when not partitioned), ``message_id`` binary
(``MessageIdData`` bytes, as the official clients serialize ids), ``publish_time`` and
``event_time`` timestamps (``event_time`` null when unset), ``properties`` map<string,string>,
``producer_name`` string.

With ``value_format=json`` the value's fields (from the user's Spark schema) replace
``value``: a value that is not a JSON object, or whose fields do not convert to the declared
types, gives nulls in those columns (Spark's PERMISSIVE mode) rather than failing the query.
With ``value_format=schema`` the columns come from the topic's schema and the values are
decoded before they get here (:mod:`.schema_values`); the same PERMISSIVE rule applies.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.client import Message, MessageId
from magnetar.protocol.varint import encode_varint

ROWS_PER_BATCH_MAX = 8192
"""Rows per Arrow record batch handed to Spark (about: a batched entry stays whole)."""

METADATA_FIELDS: tuple[StructField, ...] = (
    StructField("key", StringType(), True),
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("message_id", BinaryType(), True),
    StructField("publish_time", TimestampType(), True),
    StructField("event_time", TimestampType(), True),
    StructField("properties", MapType(StringType(), StringType(), True), True),
    StructField("producer_name", StringType(), True),
)

SCHEMA = StructType(
    [METADATA_FIELDS[0], StructField("value", BinaryType(), True), *METADATA_FIELDS[1:]]
)


METADATA_DDL = (
    "key STRING, topic STRING, partition INT, message_id BINARY, publish_time TIMESTAMP, "
    "event_time TIMESTAMP, properties MAP<STRING, STRING>, producer_name STRING"
)


def json_schema_ddl(value_schema: str) -> str | StructType:
    """The source's schema for ``value_format=json``: the value's fields, then the metadata.

    ``value_schema`` is a Spark DDL string (``"page STRING, views INT"``), returned as DDL
    for Spark to parse (parsing DDL needs a Spark context, which data source workers lack),
    or a StructType JSON document. Raises ValueError for a JSON schema that is not a struct
    or whose fields clash with the metadata columns."""
    text = value_schema.strip()
    if not text.startswith("{"):
        return f"{text}, {METADATA_DDL}"
    parsed = StructType.fromJson(json.loads(text))
    clash = {f.name for f in parsed.fields} & {f.name for f in METADATA_FIELDS}
    if clash:
        raise ValueError(f"value_schema fields clash with metadata columns: {sorted(clash)}")
    return output_schema(parsed)


def value_part(schema: StructType) -> StructType:
    """The value's fields of a ``value_format=json`` source schema."""
    meta = {f.name for f in METADATA_FIELDS}
    return StructType([f for f in schema.fields if f.name not in meta])


def output_schema(value_schema: StructType | None) -> StructType:
    """The data source's schema: ``SCHEMA``, or the value's fields plus the metadata."""
    if value_schema is None:
        return SCHEMA
    return StructType([*value_schema.fields, *METADATA_FIELDS])


_BATCH_INDEX_TAGS = [b"\x20" + encode_varint(i) for i in range(128)]


def message_id_bytes(messages: Sequence[Message]) -> list[bytes]:
    """``m.message_id().serialize()`` of each message. Members of one batch differ only in
    their batch index (protobuf field 4, between the entry's fields and the batch size),
    so the entry's part is serialized once per entry: on a batch of small messages
    serializing every id whole costs a quarter of the row building."""
    out: list[bytes] = []
    entry: tuple[int, int] | None = None
    head = tail = b""
    tags = _BATCH_INDEX_TAGS
    for m in messages:
        led, e, b = m.position
        if b < 0 or b >= len(tags) or m.chunk_ids:
            out.append(m.message_id().serialize())
            continue
        if (led, e) != entry:
            mid = m.message_id()
            whole = mid.serialize()
            head = MessageId(mid.partition(), led, e).serialize()
            assert whole.startswith(head + tags[b])
            entry, tail = (led, e), whole[len(head) + len(tags[b]) :]
            out.append(whole)
            continue
        out.append(head + tags[b] + tail)
    return out


def _millis(values: list[int | None], target: pa.DataType) -> pa.Array:
    return pa.array(values, pa.timestamp("ms", tz="UTC")).cast(target)


class RowBuilder:
    """Turns lists of messages of one partition into record batches of ``schema``."""

    def __init__(self, topic: str, partition: int, value_schema: StructType | None) -> None:
        self.topic = topic
        self.partition = partition
        self.value_schema = value_schema
        self.schema = output_schema(value_schema)
        self.arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        self._value_type: pa.StructType | None = None
        self._timestamp_fields: list[str] = []
        if value_schema is not None:
            value_arrow = to_arrow_schema(value_schema, timezone="UTC")
            self._value_type = pa.struct(list(value_arrow))
            self._timestamp_fields = [
                f.name for f in value_schema.fields if isinstance(f.dataType, TimestampType)
            ]

    def build(
        self, messages: Sequence[Message], values: Sequence[Any] | None = None
    ) -> pa.RecordBatch:
        """A record batch of ``messages``. With a value schema, ``values`` are their values
        already decoded (dicts, None for one that did not decode); without ``values`` the
        payloads are parsed as JSON."""
        n = len(messages)
        fields = self.arrow_schema
        meta: dict[str, pa.Array] = {
            "key": pa.array(
                [m.partition_key() if m.has_partition_key() else None for m in messages],
                pa.string(),
            ),
            "topic": pa.array([self.topic] * n, pa.string()),
            "partition": pa.array([self.partition] * n, pa.int32()),
            "message_id": pa.array(message_id_bytes(messages), pa.binary()),
            "publish_time": _millis(
                [m.publish_timestamp() for m in messages], fields.field("publish_time").type
            ),
            "event_time": _millis(
                [m.event_timestamp() or None for m in messages], fields.field("event_time").type
            ),
            "properties": pa.array(
                [list(m.properties().items()) for m in messages],
                fields.field("properties").type,
            ),
            "producer_name": pa.array([m.producer_name() for m in messages], pa.string()),
        }
        if self._value_type is None:
            meta["value"] = pa.array([m.data() for m in messages], pa.binary())
        else:
            if values is None:
                struct = self._decode_json([m.data() for m in messages])
            else:
                struct = self._to_struct([self._timestamps(v) for v in values])
            # flatten() applies the struct's nulls (an undecodable value) to every field.
            for field, column in zip(self._value_type, struct.flatten(), strict=True):
                meta[field.name] = column
        arrays = [meta[f.name] for f in fields]
        return pa.RecordBatch.from_arrays(arrays, schema=fields)

    def _decode_json(self, values: list[bytes]) -> pa.StructArray:
        assert self._value_type is not None
        rows: list[Any] = []
        for raw in values:
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                obj = None
            rows.append(self._timestamps(obj))
        return self._to_struct(rows)

    def _timestamps(self, obj: Any) -> Any:
        """``obj`` if it is a dict (its timestamp fields converted), else None."""
        if not isinstance(obj, dict):
            return None
        for name in self._timestamp_fields:
            obj[name] = _timestamp(obj.get(name))
        return obj

    def _to_struct(self, rows: list[Any]) -> pa.StructArray:
        assert self._value_type is not None
        try:
            return pa.array(rows, self._value_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pass
        # Some row does not fit the schema: convert one by one, nulls for the misfits.
        fixed: list[Any] = []
        for row in rows:
            try:
                pa.array([row], self._value_type)
                fixed.append(row)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                fixed.append(None)
        return pa.array(fixed, self._value_type)


def _timestamp(value: Any) -> Any:
    """JSON timestamps: ISO-8601 strings or epoch milliseconds (Avro's are datetimes)."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value / 1000, dt.UTC)
    return None
