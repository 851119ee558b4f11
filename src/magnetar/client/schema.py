"""Typed schemas: how values become payload bytes and what the broker is told.

A schema has ``schema_info()`` (the wire ``Schema`` sent in PRODUCER and SUBSCRIBE, or None
for raw bytes, as the C++ client sends none for BYTES), ``encode(value) -> bytes`` and
``decode(bytes) -> value``. Wire behaviour matches the official Python client:

* :class:`BytesSchema` — payload as is; no schema sent.
* :class:`StringSchema` — UTF-8; type STRING, empty definition.
* :class:`JsonSchema` — JSON text; type JSON, definition = the Avro schema of the record.
* :class:`AvroSchema` — Avro binary (schemaless encoding, as the official client writes);
  type AVRO, definition = the Avro schema.

Records are given as a dataclass type (its Avro schema is derived: ``int`` -> long,
``float`` -> double, ``str`` -> string, ``bool`` -> boolean, ``bytes`` -> bytes, ``X | None``
-> ``["null", X]``) or as an Avro schema dict (to match a schema defined elsewhere, e.g. by
an official-client ``Record``); with a dict, values are plain dicts.
"""

from __future__ import annotations

import dataclasses
import io
import json
import types
import typing
from typing import Any, Generic, TypeVar

from magnetar.client.errors import SchemaSerializationError
from magnetar.protocol import SchemaInfo, SchemaType

T = TypeVar("T")


class Schema(Generic[T]):
    """Base class: the BYTES schema's behaviour."""

    def schema_info(self) -> SchemaInfo | None:
        return None

    def encode(self, value: T) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SchemaSerializationError(f"BytesSchema needs bytes, got {type(value).__name__}")
        return bytes(value)

    def decode(self, data: bytes) -> T:
        return data  # type: ignore[return-value]


class BytesSchema(Schema[bytes]):
    pass


class StringSchema(Schema[str]):
    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(name="STRING", schema_data=b"", type=SchemaType.String)

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise SchemaSerializationError(f"StringSchema needs str, got {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return bytes(data).decode("utf-8")


_PRIMITIVES: dict[Any, str] = {
    int: "long",
    float: "double",
    str: "string",
    bool: "boolean",
    bytes: "bytes",
}


def _avro_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        return ["null", _avro_type(args[0])]
    if origin is list:
        return {"type": "array", "items": _avro_type(typing.get_args(tp)[0])}
    if origin is dict:
        return {"type": "map", "values": _avro_type(typing.get_args(tp)[1])}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return record_schema(tp)
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    raise TypeError(f"no Avro type for {tp!r}")


def record_schema(cls: type[Any]) -> dict[str, Any]:
    """The Avro record schema of a dataclass."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        entry: dict[str, Any] = {"name": f.name, "type": _avro_type(hints[f.name])}
        if isinstance(entry["type"], list):
            entry["default"] = None
        fields.append(entry)
    return {"type": "record", "name": cls.__name__, "fields": fields}


class _RecordSchema(Schema[T]):
    _type: SchemaType
    _name: str

    def __init__(self, record: type[T] | dict[str, Any]) -> None:
        if isinstance(record, dict):
            self._cls: type[Any] | None = None
            self._avro = record
        elif dataclasses.is_dataclass(record):
            self._cls = record
            self._avro = record_schema(record)
        else:
            raise TypeError("a record schema needs a dataclass type or an Avro schema dict")
        self._definition = json.dumps(self._avro, separators=(",", ":")).encode()

    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(name=self._name, schema_data=self._definition, type=self._type)

    def _to_dict(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        if self._cls is not None and isinstance(value, self._cls):
            return dataclasses.asdict(value)
        raise SchemaSerializationError(f"cannot encode {type(value).__name__} with {self._name}")

    def _from_dict(self, d: Any) -> T:
        if self._cls is None:
            return typing.cast(T, d)
        try:
            return typing.cast(T, self._cls(**d))
        except TypeError as exc:
            raise SchemaSerializationError(str(exc)) from exc


class JsonSchema(_RecordSchema[T]):
    _type = SchemaType.Json
    _name = "JSON"

    def encode(self, value: T) -> bytes:
        return json.dumps(self._to_dict(value)).encode()

    def decode(self, data: bytes) -> T:
        try:
            return self._from_dict(json.loads(bytes(data)))
        except ValueError as exc:
            raise SchemaSerializationError(f"not JSON: {exc}") from exc


class AvroSchema(_RecordSchema[T]):
    _type = SchemaType.Avro
    _name = "AVRO"

    def __init__(self, record: type[T] | dict[str, Any]) -> None:
        super().__init__(record)
        # imported by the first Avro schema, not with the client library (fastavro brings
        # cramjam and decimal: a few MB a client without Avro schemas does without)
        import fastavro

        self._parsed = fastavro.parse_schema(self._avro)

    def encode(self, value: T) -> bytes:
        import fastavro

        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._parsed, self._to_dict(value))
        except (ValueError, TypeError, KeyError) as exc:
            raise SchemaSerializationError(str(exc)) from exc
        return buf.getvalue()

    def decode(self, data: bytes) -> T:
        import fastavro

        try:
            return self._from_dict(
                fastavro.schemaless_reader(io.BytesIO(bytes(data)), self._parsed, None)
            )
        except (ValueError, EOFError, TypeError) as exc:
            raise SchemaSerializationError(str(exc)) from exc
