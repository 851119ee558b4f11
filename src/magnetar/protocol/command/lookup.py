"""Lookup commands: partition metadata and topic ownership.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import CommandType, LookupResult, MetadataResult


@frozen_struct
class PartitionedTopicMetadata:
    TYPE: ClassVar[CommandType] = CommandType.PARTITIONED_METADATA
    topic: str
    request_id: int
    original_principal: str | None = None
    original_auth_data: str | None = None
    original_auth_method: str | None = None


@frozen_struct
class PartitionedTopicMetadataResponse:
    """Always set ``response``: the C++ client treats a missing one as a failure."""

    TYPE: ClassVar[CommandType] = CommandType.PARTITIONED_METADATA_RESPONSE
    request_id: int
    partitions: int | None = None
    response: MetadataResult | None = None
    error: ServerError | None = None
    message: str | None = None


@frozen_struct
class LookupTopic:
    TYPE: ClassVar[CommandType] = CommandType.LOOKUP
    topic: str
    request_id: int
    authoritative: bool = False
    original_principal: str | None = None
    original_auth_data: str | None = None
    original_auth_method: str | None = None
    advertised_listener_name: str | None = None


@frozen_struct
class LookupTopicResponse:
    """Always set ``response``: the C++ client treats a missing one as ConnectError."""

    TYPE: ClassVar[CommandType] = CommandType.LOOKUP_RESPONSE
    request_id: int
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
    response: LookupResult | None = None
    authoritative: bool = False
    error: ServerError | None = None
    message: str | None = None
    proxy_through_service_url: bool = False
