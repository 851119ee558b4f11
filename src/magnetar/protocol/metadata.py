"""Typed message metadata: ``MessageMetadata``, ``SingleMessageMetadata``, ``BrokerEntryMetadata``.

These describe stored entries rather than commands. Field rules are those of
:mod:`magnetar.protocol.command`, with one deliberate exception:
``MessageMetadata.num_messages_in_batch`` is ``int | None`` although the protobuf default is
1, because its *presence* is what tells a consumer "this entry is a batch" — a batch of one
carries it, a plain message does not, and it must never be added or stripped.

The broker does not need these classes on its hot path: it reads the few metadata fields it
needs lazily through :class:`magnetar.protocol.entry.EntryMetadata`. Producers build
:class:`MessageMetadata` and pass it to :func:`magnetar.protocol.entry.build_entry`.
"""

from __future__ import annotations

from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command import CompressionType, EncryptionKeys, KeyValue


@frozen_struct
class MessageMetadata:
    producer_name: str
    # For a batch: the sequence id of the first message.
    sequence_id: int
    publish_time: int
    properties: tuple[KeyValue, ...] = ()
    replicated_from: str | None = None
    partition_key: str | None = None
    replicate_to: tuple[str, ...] = ()
    compression: CompressionType = CompressionType.NONE
    uncompressed_size: int = 0
    # Presence means "batch" (see the module docstring).
    num_messages_in_batch: int | None = None
    event_time: int = 0
    encryption_keys: tuple[EncryptionKeys, ...] = ()
    encryption_algo: str | None = None
    encryption_param: bytes | None = None
    schema_version: bytes | None = None
    partition_key_b64_encoded: bool = False
    ordering_key: bytes | None = None
    deliver_at_time: int | None = None
    marker_type: int | None = None
    txnid_least_bits: int | None = None
    txnid_most_bits: int | None = None
    highest_sequence_id: int = 0
    null_value: bool = False
    uuid: str | None = None
    num_chunks_from_msg: int | None = None
    total_chunk_msg_size: int | None = None
    chunk_id: int | None = None
    null_partition_key: bool = False


@frozen_struct
class SingleMessageMetadata:
    """Metadata of one message inside a batch. ``payload_size`` is filled in by
    :func:`magnetar.protocol.batch.build_batch` from the payload, so it may be left at 0."""

    payload_size: int = 0
    properties: tuple[KeyValue, ...] = ()
    partition_key: str | None = None
    compacted_out: bool = False
    event_time: int = 0
    partition_key_b64_encoded: bool = False
    ordering_key: bytes | None = None
    sequence_id: int | None = None
    null_value: bool = False
    null_partition_key: bool = False


@frozen_struct
class BrokerEntryMetadata:
    """Added by the broker in front of an entry (the 0x0e02 section of a frame)."""

    broker_timestamp: int | None = None
    index: int | None = None
