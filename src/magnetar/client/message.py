"""Received messages, and how a MESSAGE frame's entry becomes them (sans I/O).

:func:`decode_entry` checks the checksum, decompresses, splits batches (skipping indexes the
broker marked as already acknowledged in ``ack_set``) and returns :class:`Message` objects
with the official client's accessor names; :func:`decode_entry_lazily` returns a batch as a
:class:`MessageRun` instead, whose messages are built as the application takes them (the
consumer's receive queue holds runs). Per-message metadata of a batch is read by a
hand-written parser, and only when asked for: on the consumer's hot path the protobuf
runtime would cost more than the rest of the work together.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from magnetar.client.message_id import MessageId
from magnetar.client.receive_queue import Run
from magnetar.common.errors import ChecksumMismatch, ProtocolError
from magnetar.protocol import (
    BATCH_MESSAGES_MAX,
    CompressionType,
    Entry,
    EntryMetadata,
    ValidationError,
)
from magnetar.protocol.compression import CompressionError, decompress
from magnetar.protocol.varint import read_varint

_U32 = struct.Struct(">I")


class CorruptMessage(ProtocolError):
    """An entry failed validation; ``validation_error`` says how (the consumer acks it with
    that error, as the C++ client does, and the connection stays up)."""

    def __init__(self, message: str, validation_error: ValidationError) -> None:
        super().__init__(message)
        self.validation_error = validation_error


class _EntryInfo:
    """What every message of one dispatched entry shares: one object per entry, so a batch
    of a thousand messages stores these fields once instead of a thousand times."""

    __slots__ = (
        "batch_size",
        "buf",
        "entry_id",
        "ledger_id",
        "partition",
        "producer_name",
        "publish_time",
        "redelivery_count",
        "schema_version",
        "topic",
    )

    def __init__(
        self,
        buf: bytes,
        topic: str,
        partition: int,
        ledger_id: int,
        entry_id: int,
        batch_size: int,
        publish_time: int,
        redelivery_count: int,
        schema_version: bytes | None,
        producer_name: str,
    ) -> None:
        self.buf = buf
        """The entry's payload (decompressed); batch members are slices of it."""
        self.topic = topic
        self.partition = partition
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.batch_size = batch_size
        self.publish_time = publish_time
        self.redelivery_count = redelivery_count
        self.schema_version = schema_version
        self.producer_name = producer_name


_Fields = tuple[dict[str, str] | None, str | None, int, bytes | None, int, bool]
"""A message's own metadata: ``(properties, partition_key, event_time, ordering_key,
sequence_id, null_value)``."""


class Message:
    """A received message. Owned by the application once received; immutable.

    A member of a batch is a view into its entry's payload: its bytes are sliced out on the
    first :meth:`data` call, and its ``SingleMessageMetadata`` (properties, keys, event time,
    sequence id) is parsed on the first call of an accessor that needs it. So a message
    keeps its whole entry's payload alive (as the Java client's messages keep their batch
    buffer), and an accessor of those fields raises ProtocolError if the producer wrote
    them malformed (the record's framing and payload size were checked on receipt).
    """

    __slots__ = (
        "_batch_index",
        "_data",
        "_end",
        "_fields",
        "_id",
        "_info",
        "_meta",
        "_start",
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
        self._info = _EntryInfo(
            data,
            topic,
            partition,
            ledger_id,
            entry_id,
            batch_size,
            publish_time,
            redelivery_count,
            schema_version,
            producer_name,
        )
        self._batch_index = batch_index
        self._data: bytes | None = data
        self._meta = 0
        self._start = 0
        self._end = len(data)
        self._fields: _Fields | None = (
            properties,
            partition_key,
            event_time,
            ordering_key,
            sequence_id,
            null_value,
        )
        self._id: MessageId | None = None
        self._value: Any = _UNSET
        self.chunk_ids: tuple[MessageId, ...] = ()
        """For a reassembled chunked message: the ids of every chunk (all are acked)."""
        self.decoder: Any = None
        """The schema that decodes :meth:`value` (set by the consumer)."""
        self.consumer_ref: Any = None
        """The consumer that received it (multi-topic consumers route acks by it)."""

    def _own_fields(self) -> _Fields:
        fields = self._fields
        if fields is None:
            _, fields = parse_single_metadata(self._info.buf, self._meta, self._start)
            self._fields = fields
        return fields

    def data(self) -> bytes:
        """The raw payload."""
        data = self._data
        if data is None:
            data = self._data = self._info.buf[self._start : self._end]
        return data

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes themselves without one)."""
        if self._value is _UNSET:
            data = self.data()
            self._value = data if self.decoder is None else self.decoder.decode(data)
        return self._value

    def properties(self) -> dict[str, str]:
        props = self._own_fields()[0]
        return dict(props) if props else {}

    def partition_key(self) -> str:
        """The key, or ``""`` when the message has none (as in the official client)."""
        return self._own_fields()[1] or ""

    def has_partition_key(self) -> bool:
        return self._own_fields()[1] is not None

    def ordering_key(self) -> bytes | None:
        return self._own_fields()[3]

    def publish_timestamp(self) -> int:
        return self._info.publish_time

    def event_timestamp(self) -> int:
        return self._own_fields()[2]

    def redelivery_count(self) -> int:
        return self._info.redelivery_count

    def topic_name(self) -> str:
        return self._info.topic

    def schema_version(self) -> bytes | None:
        return self._info.schema_version

    def sequence_id(self) -> int:
        return self._own_fields()[4]

    def producer_name(self) -> str:
        return self._info.producer_name

    def is_null_value(self) -> bool:
        return self._own_fields()[5]

    def message_id(self) -> MessageId:
        mid = self._id
        if mid is None:
            info = self._info
            first = self.chunk_ids[0] if self.chunk_ids else None
            mid = self._id = MessageId(
                info.partition,
                info.ledger_id,
                info.entry_id,
                self._batch_index,
                batch_size=info.batch_size,
                first_chunk=first,
            )
        return mid

    def batch_size(self) -> int:
        """Messages in the batch entry this message came from (0: not batched)."""
        return self._info.batch_size

    @property
    def position(self) -> tuple[int, int, int]:
        """``(ledger_id, entry_id, batch_index)`` without building a MessageId."""
        info = self._info
        return (info.ledger_id, info.entry_id, self._batch_index)

    def __repr__(self) -> str:
        return (
            f"Message(topic={self._info.topic!r}, id={self.message_id()},"
            f" {self._end - self._start} bytes)"
        )


class _Unset:
    pass


_UNSET: Any = _Unset()


def _read_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    try:
        return read_varint(buf, pos, end)
    except ValueError:
        raise ProtocolError("bad varint in SingleMessageMetadata") from None


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


def parse_single_metadata(buf: bytes, pos: int, end: int) -> tuple[int, _Fields]:
    """Parse the ``SingleMessageMetadata`` in ``buf[pos:end]``: its payload size and the
    message's own fields. Raises ProtocolError if malformed or the payload size is missing."""
    payload_size = -1
    props: dict[str, str] | None = None
    key: str | None = None
    event_time = 0
    ordering_key: bytes | None = None
    seq = -1
    null_value = False
    while pos < end:
        tag = buf[pos]
        pos += 1
        if tag & 0x80:
            raise ProtocolError("unexpected field number in SingleMessageMetadata")
        wire = tag & 7
        if wire == 0:
            value = buf[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = _read_varint(buf, pos, end)
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
            length, pos = _read_varint(buf, pos, end)
            raw = buf[pos : pos + length]
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
    if pos != end or payload_size < 0:
        raise ProtocolError("malformed batch record")
    return payload_size, (props, key, event_time, ordering_key, seq, null_value)


def split_batch_payload(
    payload: bytes, count: int
) -> list[tuple[bytes, dict[str, str] | None, str | None, int, bytes | None, int, bool]]:
    """Split a decompressed batch into ``(payload, properties, partition_key, event_time,
    ordering_key, sequence_id, null_value)`` records, every field parsed. Raises
    ProtocolError if malformed."""
    if count < 0 or count > BATCH_MESSAGES_MAX:
        raise ProtocolError(f"batch message count {count} out of range")
    out = []
    pos = 0
    n = len(payload)
    unpack = _U32.unpack_from
    for _ in range(count):
        if n - pos < 4:
            raise ProtocolError("batch truncated")
        start = pos + 4 + unpack(payload, pos)[0]
        if start > n:
            raise ProtocolError("batch record metadata overruns the payload")
        payload_size, fields = parse_single_metadata(payload, pos + 4, start)
        pos = start + payload_size
        if pos > n:
            raise ProtocolError("malformed batch record")
        out.append((payload[start:pos], *fields))
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


class MessageRun(Run[Message]):
    """The messages of one batched entry not handed out yet: :meth:`take` builds each
    :class:`Message` when the application receives it, so messages waiting in the receive
    queue cost no Python objects (and no garbage-collector work). ``decoder`` and
    ``consumer_ref`` are given to every message built."""

    __slots__ = ("_info", "_next", "_offsets", "_parsed", "consumer_ref", "decoder")

    def __init__(
        self, info: _EntryInfo, offsets: list[int], parsed: dict[int, _Fields] | None
    ) -> None:
        super().__init__(len(offsets) // 4)
        self._info = info
        self._offsets = offsets  # per message: batch index, metadata start, payload start, end
        self._parsed = parsed  # batch index -> fields, for records parsed in full on receipt
        self._next = 0
        self.decoder: Any = None
        self.consumer_ref: Any = None

    @property
    def position(self) -> tuple[int, int, int]:
        """``(ledger_id, entry_id, batch_index)`` of the next message."""
        info = self._info
        return (info.ledger_id, info.entry_id, self._offsets[self._next])

    def take(self) -> Message:
        offsets = self._offsets
        i = self._next
        self._next = i + 4
        self.remaining -= 1
        index = offsets[i]
        parsed = self._parsed
        # Slot stores instead of a keyword __init__ call: this runs once per message.
        m = _new_message(Message)
        m._info = self._info
        m._batch_index = index
        m._meta = offsets[i + 1]
        m._start = offsets[i + 2]
        m._end = offsets[i + 3]
        m._data = None
        m._fields = parsed.get(index) if parsed else None
        m._id = None
        m._value = _UNSET
        m.chunk_ids = ()
        m.decoder = self.decoder
        m.consumer_ref = self.consumer_ref
        return m


_new_message = Message.__new__


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
    decoded, skipped = decode_entry_lazily(
        entry,
        topic=topic,
        partition=partition,
        ledger_id=ledger_id,
        entry_id=entry_id,
        redelivery_count=redelivery_count,
        ack_set=ack_set,
    )
    if decoded is None:
        return [], skipped
    if isinstance(decoded, MessageRun):
        return decoded.take_all(), skipped
    return [decoded], skipped


def decode_entry_lazily(
    entry: Entry,
    *,
    topic: str,
    partition: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int = 0,
    ack_set: Sequence[int] = (),
) -> tuple[Message | MessageRun | None, int]:
    """:func:`decode_entry` for the receive queue: a non-batched entry gives its message, a
    batch a :class:`MessageRun` of the members ``ack_set`` keeps (None if it keeps none).

    Batch members are split by their framing only: each record's metadata is parsed here
    just far enough to find its payload size when that field leads the record (as every
    Pulsar producer writes it when the message has no properties or key), and fully
    otherwise; see :class:`Message` for what is deferred.

    Raises CorruptMessage for checksum, decompression or batch-format failures.
    """
    try:
        md = entry.metadata
        payload = entry_payload(entry, md)
        num = md.num_messages_in_batch
        if num is None:
            properties = md.properties
            msg = Message(
                payload,
                topic=topic,
                partition=partition,
                ledger_id=ledger_id,
                entry_id=entry_id,
                properties=dict(properties) if properties else None,
                partition_key=md.partition_key,
                ordering_key=md.ordering_key,
                publish_time=md.publish_time,
                event_time=md.event_time,
                redelivery_count=redelivery_count,
                schema_version=md.schema_version,
                sequence_id=md.sequence_id,
                producer_name=md.producer_name,
                null_value=md.null_value,
            )
            return msg, 0
        if num < 0 or num > BATCH_MESSAGES_MAX:
            raise ProtocolError(f"batch message count {num} out of range")
        offsets: list[int] = []
        parsed: dict[int, _Fields] | None = None
        skipped = 0
        unpack = _U32.unpack_from
        n = len(payload)
        pos = 0
        for index in range(num):
            if n - pos < 4:
                raise ProtocolError("batch truncated")
            meta = pos + 4
            start = meta + unpack(payload, pos)[0]
            if start > n:
                raise ProtocolError("batch record metadata overruns the payload")
            fields: _Fields | None = None
            if start - meta >= 3 and payload[meta] == 0x18:
                # payload_size (field 3) leads: the rest of the record's metadata waits
                # until an accessor asks for it. Sizes below 16 KiB take one or two bytes.
                low = payload[meta + 1]
                if low < 0x80:
                    pos = start + low
                elif (high := payload[meta + 2]) < 0x80:
                    pos = start + ((low & 0x7F) | (high << 7))
                else:
                    size, fields = parse_single_metadata(payload, meta, start)
                    pos = start + size
            else:
                size, fields = parse_single_metadata(payload, meta, start)
                pos = start + size
            if pos > n:
                raise ProtocolError("malformed batch record")
            if ack_set:
                word = index >> 6
                if word >= len(ack_set) or not (ack_set[word] >> (index & 63)) & 1:
                    skipped += 1
                    continue
            offsets += (index, meta, start, pos)
            if fields is not None:
                if parsed is None:
                    parsed = {}
                parsed[index] = fields
    except ChecksumMismatch as exc:
        raise CorruptMessage(str(exc), ValidationError.ChecksumMismatch) from exc
    except CorruptMessage:
        raise
    except ProtocolError as exc:
        raise CorruptMessage(str(exc), ValidationError.BatchDeSerializeError) from exc
    if not offsets:
        return None, skipped
    info = _EntryInfo(
        payload,
        topic,
        partition,
        ledger_id,
        entry_id,
        num,
        md.publish_time,
        redelivery_count,
        md.schema_version,
        md.producer_name,
    )
    return MessageRun(info, offsets, parsed), skipped
