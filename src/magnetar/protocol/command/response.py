"""Generic answers to a request (SUCCESS, ERROR) and TOPIC_MIGRATED.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import CommandType, ResourceType
from magnetar.protocol.command.structures import SchemaInfo


@frozen_struct
class Success:
    TYPE: ClassVar[CommandType] = CommandType.SUCCESS
    request_id: int
    schema: SchemaInfo | None = None


@frozen_struct
class Error:
    """``CommandError``: a request failed (see :func:`magnetar.common.errors.error_for_code`)."""

    TYPE: ClassVar[CommandType] = CommandType.ERROR
    request_id: int
    error: ServerError
    message: str


@frozen_struct
class TopicMigrated:
    TYPE: ClassVar[CommandType] = CommandType.TOPIC_MIGRATED
    resource_id: int
    resource_type: ResourceType
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
