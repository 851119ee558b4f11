"""Schema commands: fetch a topic's schema, or register one.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.protocol.command.enums import CommandType
from magnetar.protocol.command.structures import SchemaInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSchema:
    TYPE: ClassVar[CommandType] = CommandType.GET_SCHEMA
    request_id: int
    topic: str
    schema_version: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSchemaResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_SCHEMA_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    schema: SchemaInfo | None = None
    schema_version: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GetOrCreateSchema:
    TYPE: ClassVar[CommandType] = CommandType.GET_OR_CREATE_SCHEMA
    request_id: int
    topic: str
    schema: SchemaInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class GetOrCreateSchemaResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_OR_CREATE_SCHEMA_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    schema_version: bytes | None = None
