"""Structures shared by several commands (``KeyValue``, ``Schema``, ``IntRange``, ...).

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol.command.enums import KeySharedMode, SchemaType

KeyValue = tuple[str, str]
"""A ``KeyValue`` pair."""


KeyLongValue = tuple[str, int]
"""A ``KeyLongValue`` pair."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IntRange:
    """Hash range, both ends inclusive (hash space 0..65535)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaInfo:
    """``Schema``."""

    name: str
    schema_data: bytes
    type: SchemaType
    properties: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class EncryptionKeys:
    key: str
    value: bytes
    metadata: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureFlags:
    supports_auth_refresh: bool = False
    supports_broker_entry_metadata: bool = False
    supports_partial_producer: bool = False
    supports_topic_watchers: bool = False
    supports_get_partitioned_metadata_without_auto_creation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthData:
    auth_method_name: str | None = None
    auth_data: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class KeySharedMeta:
    key_shared_mode: KeySharedMode
    hash_ranges: tuple[IntRange, ...] = ()
    allow_out_of_order_delivery: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnSubscription:
    """``Subscription`` as used by the transaction commands."""

    topic: str
    subscription: str
