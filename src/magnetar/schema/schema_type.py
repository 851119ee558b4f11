"""Pulsar's schema types: wire numbers (``Schema.Type``, :class:`SchemaType`) and the names
the admin REST API uses (Java's ``SchemaType`` enum names).

BYTES is Pulsar's ``NONE`` on the wire (the client sends no schema for it); a REST upload of
type ``BYTES`` is stored as NONE. AUTO_CONSUME / AUTO_PUBLISH are client behaviours, never
stored: a REST upload naming them is refused.
"""

from __future__ import annotations

from magnetar.protocol import SchemaType

_NAMES: dict[SchemaType, str] = {
    SchemaType.None_: "NONE",
    SchemaType.String: "STRING",
    SchemaType.Json: "JSON",
    SchemaType.Protobuf: "PROTOBUF",
    SchemaType.Avro: "AVRO",
    SchemaType.Bool: "BOOLEAN",
    SchemaType.Int8: "INT8",
    SchemaType.Int16: "INT16",
    SchemaType.Int32: "INT32",
    SchemaType.Int64: "INT64",
    SchemaType.Float: "FLOAT",
    SchemaType.Double: "DOUBLE",
    SchemaType.Date: "DATE",
    SchemaType.Time: "TIME",
    SchemaType.Timestamp: "TIMESTAMP",
    SchemaType.KeyValue: "KEY_VALUE",
    SchemaType.Instant: "INSTANT",
    SchemaType.LocalDate: "LOCAL_DATE",
    SchemaType.LocalTime: "LOCAL_TIME",
    SchemaType.LocalDateTime: "LOCAL_DATE_TIME",
    SchemaType.ProtobufNative: "PROTOBUF_NATIVE",
}
_BY_NAME = {name: kind for kind, name in _NAMES.items()} | {"BYTES": SchemaType.None_}

STRUCT_TYPES = frozenset({SchemaType.Avro, SchemaType.Json, SchemaType.Protobuf})
"""Types whose definition is an Avro schema (Pulsar's ``AvroSchemaBasedCompatibilityCheck``)."""


def type_name(kind: SchemaType) -> str:
    """The REST name of a wire type (``AVRO``, ``KEY_VALUE``, ...)."""
    return _NAMES[kind]


def parse_type_name(name: str) -> SchemaType | None:
    """The wire type of a REST name (case-insensitive), None for a name that is not a
    storable schema type."""
    return _BY_NAME.get(name.strip().upper())


def is_primitive(kind: SchemaType) -> bool:
    """Pulsar's ``SchemaType.isPrimitive``: every type but the struct ones, KEY_VALUE and
    PROTOBUF_NATIVE."""
    return kind not in STRUCT_TYPES and kind not in (SchemaType.KeyValue, SchemaType.ProtobufNative)
