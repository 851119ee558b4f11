"""``value_format=schema``: values decoded through the topic's schema into Spark columns.

The driver reads each topic's latest schema (GET_SCHEMA) and turns it into the value's
columns: an AVRO or JSON record's fields (Avro types mapped by :func:`spark_type`), or a
single ``value`` STRING column for a STRING topic. Executors decode every message with the
schema of the version in its metadata, fetched once per (topic, version) and task, and
resolve it to the planned schema as Avro does (a field the old version lacks gets its
default, a field the planned schema lacks is dropped). A value that does not decode, or
does not fit the columns, gives nulls in them (Spark's PERMISSIVE mode), as
``value_format=json`` does. A message written without a schema version is read with the
planned schema.
"""

from __future__ import annotations

import io
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.client import Message
from magnetar.protocol import SchemaInfo, SchemaType
from magnetar.spark.topic_catalog import SparkSourceError

DECODED_TYPES = (SchemaType.Avro, SchemaType.Json, SchemaType.String)
VERSIONS_CACHED_MAX = 1000
"""Writer schemas one task keeps (the broker stores at most 1000 versions per topic)."""


class SchemaColumnsError(SparkSourceError):
    """A topic's schema cannot become Spark columns (no schema, a type other than AVRO,
    JSON or STRING, an Avro type Spark has no column for, topics that disagree)."""


@dataclass(frozen=True)
class PlannedSchema:
    """What the driver planned with, shipped to executors: the schema's type and its
    definition (Avro JSON text for AVRO/JSON, empty for STRING)."""

    schema_type: int
    definition: str


_PRIMITIVES: dict[str, DataType] = {
    "null": StringType(),
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


def spark_type(avro: Any, named: dict[str, DataType] | None = None) -> tuple[DataType, bool]:
    """The Spark type of an Avro type and whether it is nullable. Raises
    SchemaColumnsError for a type Spark has no column for (a union of several non-null
    types)."""
    named = {} if named is None else named
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise SchemaColumnsError(f"no Spark column for the Avro union {json.dumps(avro)}")
        return spark_type(branches[0], named)[0], True
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro], avro == "null"
        if avro in named:
            return named[avro], False
        raise SchemaColumnsError(f"unknown Avro type {avro!r}")
    if not isinstance(avro, dict):
        raise SchemaColumnsError(f"not an Avro type: {avro!r}")
    kind = avro.get("type")
    logical = avro.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType(), False
    if logical == "date":
        return DateType(), False
    if logical == "decimal" and kind == "bytes":
        return DecimalType(int(avro["precision"]), int(avro.get("scale", 0))), False
    if kind == "record":
        struct = StructType(
            [StructField(f["name"], *spark_type(f["type"], named)) for f in avro.get("fields", [])]
        )
        named[str(avro.get("name"))] = struct
        return struct, False
    if kind == "enum":
        named[str(avro.get("name"))] = StringType()
        return StringType(), False
    if kind == "fixed":
        named[str(avro.get("name"))] = BinaryType()
        return BinaryType(), False
    if kind == "array":
        items, nullable = spark_type(avro["items"], named)
        return ArrayType(items, nullable), False
    if kind == "map":
        values, nullable = spark_type(avro["values"], named)
        return MapType(StringType(), values, nullable), False
    return spark_type(kind, named)


def value_columns(info: SchemaInfo) -> StructType:
    """The value's Spark columns for a topic's schema. Raises SchemaColumnsError."""
    if info.type == SchemaType.String:
        return StructType([StructField("value", StringType(), True)])
    if info.type not in (SchemaType.Avro, SchemaType.Json):
        raise SchemaColumnsError(
            f"value_format=schema decodes AVRO, JSON and STRING schemas, not {info.type.name}"
        )
    try:
        definition = json.loads(info.schema_data)
    except ValueError as exc:
        raise SchemaColumnsError(f"unreadable {info.type.name} schema: {exc}") from exc
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise SchemaColumnsError(f"the {info.type.name} schema is not a record")
    struct, _ = spark_type(definition)
    assert isinstance(struct, StructType)
    # Every column nullable: a value that does not decode gives nulls.
    return StructType([StructField(f.name, f.dataType, True) for f in struct.fields])


def planned(info: SchemaInfo) -> PlannedSchema:
    return PlannedSchema(int(info.type), bytes(info.schema_data).decode("utf-8", "replace"))


FetchSchema = Callable[[str, int], Awaitable[SchemaInfo | None]]
"""``(topic, version) -> that version's schema`` (None when the broker has none)."""


class _Decoder:
    """Decodes payloads written with one schema into the planned schema's shape."""

    def __init__(self, writer: SchemaInfo | None, plan: PlannedSchema) -> None:
        self.kind = SchemaType(plan.schema_type)
        self._reader_avro: Any = None
        self._writer_avro: Any = None
        self._defaults: dict[str, Any] = {}
        if self.kind == SchemaType.String:
            return
        reader_def = json.loads(plan.definition)
        self._defaults = {
            f["name"]: f["default"] for f in reader_def.get("fields", []) if "default" in f
        }
        if self.kind != SchemaType.Avro:
            return
        self._reader_avro = fastavro.parse_schema(reader_def)
        writer_text = plan.definition
        if writer is not None and writer.type == SchemaType.Avro:
            writer_text = bytes(writer.schema_data).decode()
        self._writer_avro = (
            self._reader_avro
            if writer_text == plan.definition
            else fastavro.parse_schema(json.loads(writer_text))
        )

    def decode(self, data: bytes) -> dict[str, Any] | None:
        try:
            if self.kind == SchemaType.String:
                return {"value": data.decode("utf-8")}
            if self.kind == SchemaType.Json:
                obj = json.loads(data)
                if not isinstance(obj, dict):
                    return None
                for name, default in self._defaults.items():
                    obj.setdefault(name, default)
                return obj
            return self._decode_avro(data)
        except (ValueError, TypeError, EOFError, IndexError, KeyError):
            return None

    def _decode_avro(self, data: bytes) -> dict[str, Any] | None:
        reader = None if self._writer_avro is self._reader_avro else self._reader_avro
        try:
            out = fastavro.schemaless_reader(io.BytesIO(data), self._writer_avro, reader)
        except fastavro.read.SchemaResolutionError:
            # Not resolvable (e.g. record names differ): the writer's own fields, which the
            # columns then pick from; a field the writer lacks is null, not its default.
            out = fastavro.schemaless_reader(io.BytesIO(data), self._writer_avro, None)
            if isinstance(out, dict):
                for name, default in self._defaults.items():
                    out.setdefault(name, default)
        return out if isinstance(out, dict) else None


class VersionedValues:
    """Decodes each message with its own version's schema (one per task)."""

    def __init__(self, plan: PlannedSchema, fetch: FetchSchema) -> None:
        self._plan = plan
        self._fetch = fetch
        self._decoders: OrderedDict[tuple[str, int], _Decoder] = OrderedDict()
        self._planned_decoder = _Decoder(None, plan)

    async def decode(self, topic: str, messages: Sequence[Message]) -> list[dict[str, Any] | None]:
        """The decoded values of ``messages`` of ``topic``, None for those that do not
        decode. Raises what fetching a schema raises (Timeout, ...)."""
        out: list[dict[str, Any] | None] = []
        for m in messages:
            raw = m.schema_version()
            decoder = self._planned_decoder
            if raw:
                decoder = await self._decoder(topic, int.from_bytes(raw, "big", signed=True))
            out.append(decoder.decode(m.data()))
        return out

    async def _decoder(self, topic: str, version: int) -> _Decoder:
        key = (topic, version)
        decoder = self._decoders.get(key)
        if decoder is None:
            writer = await self._fetch(topic, version)
            try:
                decoder = _Decoder(writer, self._plan)
            except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException):
                decoder = self._planned_decoder  # an unreadable old version: try the plan
            self._decoders[key] = decoder
            while len(self._decoders) > VERSIONS_CACHED_MAX:
                self._decoders.popitem(last=False)
        return decoder


__all__ = [
    "DECODED_TYPES",
    "FetchSchema",
    "PlannedSchema",
    "SchemaColumnsError",
    "VersionedValues",
    "planned",
    "spark_type",
    "value_columns",
]
