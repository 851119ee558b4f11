"""Received messages, and how a MESSAGE frame's entry becomes them (sans I/O).

:func:`decode_entry` checks the checksum, decompresses, splits batches (skipping indexes the
broker marked as already acknowledged in ``ack_set``) and returns :class:`Message` objects
with the official client's accessor names. Per-message metadata of a batch is read by a
hand-written parser: on the consumer's hot path the protobuf runtime would cost more than
the rest of the work together.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from magnetar.client.message_id import MessageId
from magnetar.common.errors import ChecksumMismatch, ProtocolError
from magnetar.protocol import (
    BATCH_MESSAGES_MAX,
    CompressionType,
    Entry,
    EntryMetadata,
    ValidationError,
)
from magnetar.protocol.compression import CompressionError, decompress

_U32 = struct.Struct(">I")


class CorruptMessage(ProtocolError):
    """An entry failed validation; ``validation_error`` says how (the consumer acks it with
    that error, as the C++ client does, and the connection stays up)."""

    def __init__(self, message: str, validation_error: ValidationError) -> None:
        super().__init__(message)
        self.validation_error = validation_error


class Message:
    """A received message. Owned by the application once received; immutable."""

    __slots__ = (
        "_batch_index",
        "_batch_size",
        "_data",
        "_entry_id",
        "_event_time",
        "_id",
        "_ledger_id",
        "_null_value",
        "_ordering_key",
        "_partition",
        "_partition_key",
        "_producer_name",
        "_properties",
        "_publish_time",
        "_redelivery_count",
        "_schema_version",
        "_sequence_id",
        "_topic",
        "_value",
        "chunk_ids",
        "consumer_ref",
        "decoder",
    )

    def __init__(
        self,
        data: bytes,
        *,
        topic: str,
        partition: int,
        ledger_id: int,
        entry_id: int,
        batch_index: int = -1,
        batch_size: int = 0,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | None = None,
        publish_time: int = 0,
        event_time: int = 0,
        redelivery_count: int = 0,
        schema_version: bytes | None = None,
        sequence_id: int = -1,
        producer_name: str = "",
        null_value: bool = False,
    ) -> None:
        self._data = data
        self._topic = topic
        self._partition = partition
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = batch_size
        self._properties = properties
        self._partition_key = partition_key
        self._ordering_key = ordering_key
        self._publish_time = publish_time
        self._event_time = event_time
        self._redelivery_count = redelivery_count
        self._schema_version = schema_version
        self._sequence_id = sequence_id
        self._producer_name = producer_name
        self._null_value = null_value
        self._id: MessageId | None = None
        self._value: Any = _UNSET
        self.chunk_ids: tuple[MessageId, ...] = ()
        """For a reassembled chunked message: the ids of every chunk (all are acked)."""
        self.decoder: Any = None
        """The schema that decodes :meth:`value` (set by the consumer)."""
        self.consumer_ref: Any = None
        """The consumer that received it (multi-topic consumers route acks by it)."""

    def data(self) -> bytes:
        """The raw payload."""
        return self._data

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes themselves without one)."""
        if self._value is _UNSET:
            self._value = self._data if self.decoder is None else self.decoder.decode(self._data)
        return self._value

    def properties(self) -> dict[str, str]:
        return dict(self._properties) if self._properties else {}

    def partition_key(self) -> str:
        """The key, or ``""`` when the message has none (as in the official client)."""
        return self._partition_key or ""

    def has_partition_key(self) -> bool:
        return self._partition_key is not None

    def ordering_key(self) -> bytes | None:
        return self._ordering_key

    def publish_timestamp(self) -> int:
        return self._publish_time

    def event_timestamp(self) -> int:
        return self._event_time

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def topic_name(self) -> str:
        return self._topic

    def schema_version(self) -> bytes | None:
        return self._schema_version

    def sequence_id(self) -> int:
        return self._sequence_id

    def producer_name(self) -> str:
        return self._producer_name

    def is_null_value(self) -> bool:
        return self._null_value

    def message_id(self) -> MessageId:
        mid = self._id
        if mid is None:
            first = self.chunk_ids[0] if self.chunk_ids else None
            mid = self._id = MessageId(
                self._partition,
                self._ledger_id,
                self._entry_id,
                self._batch_index,
                batch_size=self._batch_size,
                first_chunk=first,
            )
        return mid

    def batch_size(self) -> int:
        """Messages in the batch entry this message came from (0: not batched)."""
        return self._batch_size

    @property
    def position(self) -> tuple[int, int, int]:
        """``(ledger_id, entry_id, batch_index)`` without building a MessageId."""
        return (self._ledger_id, self._entry_id, self._batch_index)

    def __repr__(self) -> str:
        return f"Message(topic={self._topic!r}, id={self.message_id()}, {len(self._data)} bytes)"


class _Unset:
    pass


_UNSET: Any = _Unset()


def _read_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ProtocolError("bad varint in SingleMessageMetadata")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _parse_key_value(buf: bytes) -> tuple[str, str]:
    pos = 0
    end = len(buf)
    key = value = ""
    while pos < end:
        tag, pos = _read_varint(buf, pos, end)
        if tag & 7 != 2:
            raise ProtocolError("bad KeyValue in SingleMessageMetadata")
        n, pos = _read_varint(buf, pos, end)
        text = buf[pos : pos + n].decode("utf-8", "replace")
        pos += n
        if tag >> 3 == 1:
            key = text
        elif tag >> 3 == 2:
            value = text
    return key, value


def split_batch_payload(
    payload: bytes, count: int
) -> list[tuple[bytes, dict[str, str] | None, str | None, int, bytes | None, int, bool]]:
    """Split a decompressed batch into ``(payload, properties, partition_key, event_time,
    ordering_key, sequence_id, null_value)`` records. Raises ProtocolError if malformed."""
    if count < 0 or count > BATCH_MESSAGES_MAX:
        raise ProtocolError(f"batch message count {count} out of range")
    out = []
    pos = 0
    n = len(payload)
    unpack = _U32.unpack_from
    for _ in range(count):
        if n - pos < 4:
            raise ProtocolError("batch truncated")
        size = unpack(payload, pos)[0]
        pos += 4
        end = pos + size
        if end > n:
            raise ProtocolError("batch record metadata overruns the payload")
        payload_size = -1
        props: dict[str, str] | None = None
        key: str | None = None
        event_time = 0
        ordering_key: bytes | None = None
        seq = -1
        null_value = False
        while pos < end:
            tag = payload[pos]
            pos += 1
            if tag & 0x80:
                raise ProtocolError("unexpected field number in SingleMessageMetadata")
            wire = tag & 7
            if wire == 0:
                value = payload[pos]
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = _read_varint(payload, pos, end)
                field = tag >> 3
                if field == 3:
                    payload_size = value
                elif field == 8:
                    seq = value
                elif field == 5:
                    event_time = value
                elif field == 9:
                    null_value = bool(value)
            elif wire == 2:
                length, pos = _read_varint(payload, pos, end)
                raw = payload[pos : pos + length]
                pos += length
                field = tag >> 3
                if field == 1:
                    k, v = _parse_key_value(raw)
                    if props is None:
                        props = {}
                    props[k] = v
                elif field == 2:
                    key = raw.decode("utf-8", "replace")
                elif field == 7:
                    ordering_key = raw
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ProtocolError(f"unexpected wire type {wire} in SingleMessageMetadata")
        if pos != end or payload_size < 0 or end + payload_size > n:
            raise ProtocolError("malformed batch record")
        out.append(
            (
                payload[end : end + payload_size],
                props,
                key,
                event_time,
                ordering_key,
                seq,
                null_value,
            )
        )
        pos = end + payload_size
    return out


def entry_payload(entry: Entry, md: EntryMetadata) -> bytes:
    """The entry's payload, checksum-checked and decompressed. Raises CorruptMessage."""
    if not entry.verify_checksum():
        raise CorruptMessage("checksum mismatch", ValidationError.ChecksumMismatch)
    compression = md.compression
    raw = entry.payload
    if compression == CompressionType.NONE:
        return bytes(raw)
    try:
        return bytes(decompress(compression, raw, md.uncompressed_size))
    except CompressionError as exc:
        raise CorruptMessage(str(exc), ValidationError.DecompressionError) from exc


def decode_entry(
    entry: Entry,
    *,
    topic: str,
    partition: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int = 0,
    ack_set: Sequence[int] = (),
) -> tuple[list[Message], int]:
    """The messages of one dispatched entry, and how many batch indexes were skipped because
    ``ack_set`` (bit set = still unacked) marks them acknowledged.

    Raises CorruptMessage for checksum, decompression or batch-format failures.
    """
    try:
        md = entry.metadata
        payload = entry_payload(entry, md)
        properties = md.properties
        num = md.num_messages_in_batch
        publish_time = md.publish_time
        schema_version = md.schema_version
        producer_name = md.producer_name
        if num is None:
            msg = Message(
                payload,
                topic=topic,
                partition=partition,
                ledger_id=ledger_id,
                entry_id=entry_id,
                properties=dict(properties) if properties else None,
                partition_key=md.partition_key,
                ordering_key=md.ordering_key,
                publish_time=publish_time,
                event_time=md.event_time,
                redelivery_count=redelivery_count,
                schema_version=schema_version,
                sequence_id=md.sequence_id,
                producer_name=producer_name,
                null_value=md.null_value,
            )
            return [msg], 0
        records = split_batch_payload(payload, num)
    except ChecksumMismatch as exc:
        raise CorruptMessage(str(exc), ValidationError.ChecksumMismatch) from exc
    except CorruptMessage:
        raise
    except ProtocolError as exc:
        raise CorruptMessage(str(exc), ValidationError.BatchDeSerializeError) from exc
    messages = []
    skipped = 0
    new = Message.__new__
    unset = _UNSET
    for index, (data, props, key, event_time, okey, seq, null_value) in enumerate(records):
        if ack_set:
            word = index >> 6
            if word >= len(ack_set) or not (ack_set[word] >> (index & 63)) & 1:
                skipped += 1
                continue
        # Slot stores instead of a 17-keyword __init__ call: a third of the cost, and this
        # runs once per received message.
        m = new(Message)
        m._data = data
        m._topic = topic
        m._partition = partition
        m._ledger_id = ledger_id
        m._entry_id = entry_id
        m._batch_index = index
        m._batch_size = num
        m._properties = props
        m._partition_key = key
        m._ordering_key = okey
        m._publish_time = publish_time
        m._event_time = event_time
        m._redelivery_count = redelivery_count
        m._schema_version = schema_version
        m._sequence_id = seq
        m._producer_name = producer_name
        m._null_value = null_value
        m._id = None
        m._value = unset
        m.chunk_ids = ()
        m.decoder = None
        m.consumer_ref = None
        messages.append(m)
    return messages, skipped
