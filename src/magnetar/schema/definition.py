"""One schema as the registry keeps it: type, data (the definition) and properties.

What the data holds depends on the type (as in Pulsar):

* AVRO, JSON, PROTOBUF: an Avro schema as JSON text (Pulsar's JSON schemas are Avro record
  definitions; so are the definitions the official client sends for PROTOBUF);
* PROTOBUF_NATIVE: JSON ``{"fileDescriptorSet": <base64 FileDescriptorSet>,
  "rootMessageTypeName": <full name>, "rootFileDescriptorName": <file>}`` (Pulsar's
  ``ProtobufNativeSchemaData``); the root message must be defined in the descriptor set;
* KEY_VALUE: the key's and the value's schema data, each behind its length as a 4-byte
  big-endian int (Pulsar's ``KeyValueSchemaInfo`` encoding); the parts' types are in the
  properties ``key.schema.type`` / ``value.schema.type``;
* every other type: anything (usually empty); it is kept but not interpreted.

:meth:`SchemaDefinition.validate` refuses what Pulsar's broker refuses
(``InvalidSchemaDataException``): struct definitions that are not Avro schemas, protobuf
descriptors that do not parse or lack their root message, KEY_VALUE
data that does not split into two parts, and (our bound) data over ``data_bytes_max``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from magnetar.common.errors import IncompatibleSchema
from magnetar.protocol import SchemaInfo, SchemaType
from magnetar.schema.schema_type import STRUCT_TYPES, parse_type_name, type_name

SCHEMA_DATA_BYTES_MAX = 512 * 1024
"""Largest schema definition accepted (a stored version must fit one metadata node: ZooKeeper
refuses nodes over 1 MiB, and the stored form is base64)."""

_LENGTH = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ParsedAvro:
    """An Avro schema as fastavro parses it: ``schema`` refers to named types by their full
    names, which ``named`` maps to their definitions."""

    schema: Any
    named: dict[str, Any]


class InvalidSchema(IncompatibleSchema):
    """A schema whose data cannot be what its type says (malformed Avro, broken KEY_VALUE
    encoding), of a type that cannot be stored, or too large. Clients get IncompatibleSchema
    (the wire has no closer code); the admin API answers 422."""


@dataclass(frozen=True, slots=True)
class SchemaDefinition:
    """A schema's type, data and properties. Immutable; compare versions by
    :attr:`fingerprint` (type and data, not properties, as Pulsar's ``SchemaHash``)."""

    type: SchemaType
    data: bytes
    properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_wire(cls, info: SchemaInfo) -> SchemaDefinition:
        return cls(
            type=info.type,
            data=bytes(info.schema_data),
            properties=tuple(sorted(info.properties)),
        )

    def to_wire(self, name: str) -> SchemaInfo:
        return SchemaInfo(
            name=name,
            schema_data=self.data,
            type=self.type,
            properties=self.properties,
        )

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(bytes([int(self.type)]) + self.data).hexdigest()

    @property
    def type_name(self) -> str:
        return type_name(self.type)

    def property_map(self) -> dict[str, str]:
        return dict(self.properties)

    def validate(self, data_bytes_max: int = SCHEMA_DATA_BYTES_MAX) -> None:
        """Raises :class:`InvalidSchema` with a one-line reason."""
        if len(self.data) > data_bytes_max:
            raise InvalidSchema(
                f"schema data is {len(self.data)} bytes; at most {data_bytes_max} are accepted"
            )
        if self.type in STRUCT_TYPES:
            self.avro()
        elif self.type is SchemaType.ProtobufNative:
            self.protobuf_root_message()
        elif self.type is SchemaType.KeyValue:
            key, value = self.key_value_parts()
            key.validate(data_bytes_max)
            value.validate(data_bytes_max)

    def avro(self) -> ParsedAvro:
        """The data parsed as an Avro schema by fastavro. Raises :class:`InvalidSchema`."""
        # Imported here, not at module level: fastavro costs the broker's start-up ~20 ms
        # and only topics with Avro-based schemas need it.
        from fastavro.schema import SchemaParseException, UnknownType, parse_schema

        what = f"Invalid schema definition data for {self.type_name} schema"
        try:
            text = self.data.decode("utf-8")
            definition = json.loads(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidSchema(f"{what}: not JSON ({exc})") from None
        named: dict[str, Any] = {}
        try:
            return ParsedAvro(parse_schema(definition, named), named)
        except UnknownType as exc:
            raise InvalidSchema(f"{what}: unknown type {exc.name!r}") from None
        except KeyError as exc:
            raise InvalidSchema(f"{what}: missing attribute {exc}") from None
        except (SchemaParseException, ValueError, TypeError) as exc:
            raise InvalidSchema(f"{what}: {exc}") from None

    def protobuf_root_message(self) -> str:
        """The full name of a PROTOBUF_NATIVE schema's root message. Raises
        :class:`InvalidSchema` unless the data is a descriptor that defines it."""
        from google.protobuf.descriptor_pb2 import DescriptorProto, FileDescriptorSet
        from google.protobuf.message import DecodeError

        what = "Invalid schema definition data for PROTOBUF_NATIVE schema"
        try:
            body = json.loads(self.data.decode("utf-8"))
            root = body["rootMessageTypeName"]
            encoded = body["fileDescriptorSet"]
            if not isinstance(root, str) or not isinstance(encoded, str):
                raise TypeError("rootMessageTypeName and fileDescriptorSet must be strings")
            files = FileDescriptorSet.FromString(base64.b64decode(encoded, validate=True))
        except KeyError as exc:
            raise InvalidSchema(f"{what}: missing {exc}") from None
        except (UnicodeDecodeError, ValueError, TypeError, DecodeError) as exc:
            raise InvalidSchema(f"{what}: {exc}") from None

        def names(prefix: str, messages: Iterable[DescriptorProto]) -> Iterator[str]:
            for message in messages:
                full = f"{prefix}{message.name}"
                yield full
                yield from names(f"{full}.", message.nested_type)

        for file in files.file:
            prefix = f"{file.package}." if file.package else ""
            if root in names(prefix, file.message_type):
                return root
        raise InvalidSchema(f"{what}: root message {root!r} is not in the descriptor set")

    def key_value_parts(self) -> tuple[SchemaDefinition, SchemaDefinition]:
        """The key's and the value's schemas of a KEY_VALUE schema. Raises
        :class:`InvalidSchema` when the data does not split or a part's type is unknown."""
        props = self.property_map()
        parts: list[bytes] = []
        offset = 0
        data = self.data
        for _ in range(2):
            if len(data) < offset + 4:
                raise InvalidSchema("KEY_VALUE schema data is truncated")
            (length,) = _LENGTH.unpack_from(data, offset)
            offset += 4
            length = max(length, 0)
            if len(data) < offset + length:
                raise InvalidSchema("KEY_VALUE schema data is truncated")
            parts.append(bytes(data[offset : offset + length]))
            offset += length
        if offset != len(data):
            raise InvalidSchema("KEY_VALUE schema data has trailing bytes")
        result: list[SchemaDefinition] = []
        for side, part in zip(("key", "value"), parts, strict=True):
            name = props.get(f"{side}.schema.type", "BYTES")
            kind = parse_type_name(name)
            if kind is None or kind is SchemaType.KeyValue:
                raise InvalidSchema(f"KEY_VALUE {side} schema has an unknown type {name!r}")
            result.append(SchemaDefinition(kind, part))
        return result[0], result[1]


def encode_key_value(key: bytes, value: bytes) -> bytes:
    """Pulsar's KEY_VALUE schema data for two parts."""
    return _LENGTH.pack(len(key)) + key + _LENGTH.pack(len(value)) + value
