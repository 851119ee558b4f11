"""Schema commands: fetch a topic's schema, or register one.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import CommandType
from magnetar.protocol.command.structures import SchemaInfo


@frozen_struct
class GetSchema:
    TYPE: ClassVar[CommandType] = CommandType.GET_SCHEMA
    request_id: int
    topic: str
    schema_version: bytes | None = None


@frozen_struct
class GetSchemaResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_SCHEMA_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    schema: SchemaInfo | None = None
    schema_version: bytes | None = None


@frozen_struct
class GetOrCreateSchema:
    TYPE: ClassVar[CommandType] = CommandType.GET_OR_CREATE_SCHEMA
    request_id: int
    topic: str
    schema: SchemaInfo


@frozen_struct
class GetOrCreateSchemaResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_OR_CREATE_SCHEMA_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    schema_version: bytes | None = None
