"""Structures shared by several commands (``KeyValue``, ``Schema``, ``IntRange``, ...).

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import KeySharedMode, SchemaType

KeyValue = tuple[str, str]
"""A ``KeyValue`` pair."""


KeyLongValue = tuple[str, int]
"""A ``KeyLongValue`` pair."""


@frozen_struct
class IntRange:
    """Hash range, both ends inclusive (hash space 0..65535)."""

    start: int
    end: int


@frozen_struct
class SchemaInfo:
    """``Schema``."""

    name: str
    schema_data: bytes
    type: SchemaType
    properties: tuple[KeyValue, ...] = ()


@frozen_struct
class EncryptionKeys:
    key: str
    value: bytes
    metadata: tuple[KeyValue, ...] = ()


@frozen_struct
class FeatureFlags:
    supports_auth_refresh: bool = False
    supports_broker_entry_metadata: bool = False
    supports_partial_producer: bool = False
    supports_topic_watchers: bool = False
    supports_get_partitioned_metadata_without_auto_creation: bool = False


@frozen_struct
class AuthData:
    auth_method_name: str | None = None
    auth_data: bytes | None = None


@frozen_struct
class KeySharedMeta:
    key_shared_mode: KeySharedMode
    hash_ranges: tuple[IntRange, ...] = ()
    allow_out_of_order_delivery: bool = False


@frozen_struct
class TxnSubscription:
    """``Subscription`` as used by the transaction commands."""

    topic: str
    subscription: str
