"""A topic's schemas as the client reads them: GET_SCHEMA, and the AUTO_CONSUME /
AUTO_PUBLISH schemas built on it (Pulsar's ``Schema.AUTO_CONSUME()`` and
``Schema.AUTO_PRODUCE_BYTES()``).

* :class:`AutoConsumeSchema` — a consumer that reads whatever the topic holds. It subscribes
  with the wire type ``AutoConsume`` (so the broker neither checks nor registers anything)
  and decodes each message with the schema of the version in its metadata, fetched once per
  version: AVRO and JSON records become dicts, STRING a str; other types, and messages
  written without a schema version, stay bytes.
* :class:`AutoProduceBytesSchema` — a producer of already-encoded bytes. At creation it
  fetches the topic's latest schema and registers with it (so its messages carry that
  version); each payload is checked against the schema before it is sent. On a topic
  without a schema it sends bytes and no schema.
"""

from __future__ import annotations

import io
import json
from collections import OrderedDict
from typing import Any

from magnetar.client.context import ClientContext
from magnetar.client.errors import SchemaSerializationError
from magnetar.client.schema import AvroSchema, BytesSchema, JsonSchema, Schema, StringSchema
from magnetar.common.errors import ProtocolError, TopicNotFound
from magnetar.protocol import (
    GetOrCreateSchema,
    GetOrCreateSchemaResponse,
    GetSchema,
    GetSchemaResponse,
    SchemaInfo,
    SchemaType,
)

AUTO_CONSUME_INFO = SchemaInfo(name="AutoConsume", schema_data=b"", type=SchemaType.AutoConsume)
"""What an AUTO_CONSUME consumer sends in SUBSCRIBE (as Pulsar's Java client does)."""

DECODERS_MAX = 1000
"""Versions an AUTO_CONSUME consumer remembers (the broker keeps at most 1000 per topic);
the oldest is forgotten first, and fetched again if a message needs it."""


async def fetch_schema(
    ctx: ClientContext, topic: str, version: bytes | None = None
) -> tuple[SchemaInfo, bytes] | None:
    """The schema and version of ``topic`` (its latest live version when ``version`` is
    None), or None when the topic has no such schema. Raises the broker's other errors and
    Timeout after the operation timeout."""
    answer = await ctx.lookup.lookup(topic)
    cnx = await ctx.pool.get(answer.logical_url, answer.physical_url)
    rid = next(ctx.request_ids)
    try:
        resp: GetSchemaResponse = await cnx.request(
            GetSchema(request_id=rid, topic=topic, schema_version=version),
            rid,
            ctx.operation_timeout_s,
        )
    except TopicNotFound:  # Pulsar's answer for "no schema" too
        return None
    if resp.schema is None or resp.schema_version is None:
        return None
    return resp.schema, resp.schema_version


async def get_or_create_schema(ctx: ClientContext, topic: str, schema: SchemaInfo) -> bytes:
    """Register ``schema`` on ``topic`` (GET_OR_CREATE_SCHEMA; a version with the same type
    and data is reused): its version there. Raises the broker's errors (IncompatibleSchema,
    TopicNotFound for a topic that does not exist) and Timeout after the operation timeout."""
    answer = await ctx.lookup.lookup(topic)
    cnx = await ctx.pool.get(answer.logical_url, answer.physical_url)
    rid = next(ctx.request_ids)
    resp: GetOrCreateSchemaResponse = await cnx.request(
        GetOrCreateSchema(request_id=rid, topic=topic, schema=schema),
        rid,
        ctx.operation_timeout_s,
    )
    if resp.schema_version is None:
        raise ProtocolError(f"GET_OR_CREATE_SCHEMA on {topic} answered without a version")
    return resp.schema_version


def schema_for(info: SchemaInfo | None) -> Schema[Any]:
    """The schema that decodes payloads written with ``info``: dicts for AVRO and JSON
    records, str for STRING, bytes otherwise. Raises SchemaSerializationError for an
    AVRO/JSON definition that does not parse."""
    if info is None:
        return BytesSchema()
    if info.type == SchemaType.String:
        return StringSchema()
    if info.type in (SchemaType.Avro, SchemaType.Json):
        import fastavro  # with the first record schema, not with the client library

        try:
            definition = json.loads(info.schema_data)
            if info.type == SchemaType.Avro:
                return AvroSchema(definition)
            return JsonSchema(definition)
        except (ValueError, TypeError, fastavro.schema.SchemaParseException) as exc:
            raise SchemaSerializationError(f"unreadable {info.type.name} schema: {exc}") from exc
    return BytesSchema()


class AutoConsumeSchema(Schema[Any]):
    """Decode each message with the schema of its own version (see the module doc). One
    instance per consumer: it caches the decoders of the versions it has seen."""

    def __init__(self) -> None:
        self._decoders: OrderedDict[bytes, Schema[Any]] = OrderedDict()

    def schema_info(self) -> SchemaInfo:
        return AUTO_CONSUME_INFO

    def decode(self, data: bytes) -> Any:
        # Only reached for a message whose decoder was not resolved (no version): raw bytes.
        return data

    def cached(self, version: bytes) -> Schema[Any] | None:
        """The decoder of ``version`` if it was fetched already."""
        decoder = self._decoders.get(version)
        if decoder is not None:
            self._decoders.move_to_end(version)
        return decoder

    async def decoder_for(self, ctx: ClientContext, topic: str, version: bytes) -> Schema[Any]:
        """The decoder of ``version`` of ``topic``, fetched with GET_SCHEMA the first time.
        A version the broker does not know (deleted by force) decodes as bytes."""
        decoder = self.cached(version)
        if decoder is None:
            found = await fetch_schema(ctx, topic, version)
            decoder = schema_for(found[0] if found else None)
            self._decoders[version] = decoder
            while len(self._decoders) > DECODERS_MAX:
                self._decoders.popitem(last=False)
        return decoder


class AutoProduceBytesSchema(Schema[bytes]):
    """Send bytes already encoded with the topic's schema (see the module doc). Until
    :meth:`bind` it behaves as BYTES; the client binds a copy to each producer's topic."""

    def __init__(self, info: SchemaInfo | None = None) -> None:
        self._info = info
        self._check: Schema[Any] = schema_for(info)
        self._parsed: Any = None
        if info is not None and info.type == SchemaType.Avro:
            import fastavro

            self._parsed = fastavro.parse_schema(json.loads(info.schema_data))

    def bind(self, info: SchemaInfo | None) -> AutoProduceBytesSchema:
        """A copy that registers with ``info`` (the topic's latest schema, None for none)."""
        return AutoProduceBytesSchema(info)

    def schema_info(self) -> SchemaInfo | None:
        return self._info

    def encode(self, value: bytes) -> bytes:
        """``value`` itself, once it decodes with the topic's schema. Raises
        SchemaSerializationError for bytes that do not."""
        data = super().encode(value)
        if self._parsed is not None:
            import fastavro

            buf = io.BytesIO(data)
            try:
                fastavro.schemaless_reader(buf, self._parsed, None)
            except (ValueError, EOFError, TypeError, IndexError) as exc:
                raise SchemaSerializationError(f"not {self._info_name()} data: {exc}") from exc
            if buf.tell() != len(data):
                raise SchemaSerializationError(
                    f"not {self._info_name()} data: {len(data) - buf.tell()} bytes left over"
                )
        elif not isinstance(self._check, BytesSchema):
            try:
                self._check.decode(data)
            except UnicodeDecodeError as exc:
                raise SchemaSerializationError(f"not {self._info_name()} data: {exc}") from exc
        return data

    def _info_name(self) -> str:
        return self._info.type.name if self._info is not None else "BYTES"


__all__ = [
    "AUTO_CONSUME_INFO",
    "AutoConsumeSchema",
    "AutoProduceBytesSchema",
    "fetch_schema",
    "schema_for",
]
