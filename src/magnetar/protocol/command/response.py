"""Generic answers to a request (SUCCESS, ERROR) and TOPIC_MIGRATED.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.protocol.command.enums import CommandType, ResourceType
from magnetar.protocol.command.structures import SchemaInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class Success:
    TYPE: ClassVar[CommandType] = CommandType.SUCCESS
    request_id: int
    schema: SchemaInfo | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """``CommandError``: a request failed (see :func:`magnetar.common.errors.error_for_code`)."""

    TYPE: ClassVar[CommandType] = CommandType.ERROR
    request_id: int
    error: ServerError
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMigrated:
    TYPE: ClassVar[CommandType] = CommandType.TOPIC_MIGRATED
    resource_id: int
    resource_type: ResourceType
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
