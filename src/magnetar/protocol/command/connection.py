"""Connection commands: the CONNECT handshake, authentication challenges, keep-alive.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import AuthMethod, CommandType
from magnetar.protocol.command.structures import AuthData, FeatureFlags


@frozen_struct
class Connect:
    TYPE: ClassVar[CommandType] = CommandType.CONNECT
    client_version: str
    auth_method: AuthMethod | None = None
    auth_data: bytes | None = None
    protocol_version: int = 0
    auth_method_name: str | None = None
    proxy_to_broker_url: str | None = None
    original_principal: str | None = None
    original_auth_data: str | None = None
    original_auth_method: str | None = None
    feature_flags: FeatureFlags | None = None


@frozen_struct
class Connected:
    TYPE: ClassVar[CommandType] = CommandType.CONNECTED
    server_version: str
    protocol_version: int = 0
    max_message_size: int | None = None
    feature_flags: FeatureFlags | None = None


@frozen_struct
class AuthChallenge:
    TYPE: ClassVar[CommandType] = CommandType.AUTH_CHALLENGE
    server_version: str | None = None
    challenge: AuthData | None = None
    protocol_version: int = 0


@frozen_struct
class AuthResponse:
    TYPE: ClassVar[CommandType] = CommandType.AUTH_RESPONSE
    client_version: str | None = None
    response: AuthData | None = None
    protocol_version: int = 0


@frozen_struct
class Ping:
    TYPE: ClassVar[CommandType] = CommandType.PING


@frozen_struct
class Pong:
    TYPE: ClassVar[CommandType] = CommandType.PONG
