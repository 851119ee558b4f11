"""Producer batches, sans I/O: messages in, whole SEND payloads out.

A batch is one entry (one SEND): ``MessageMetadata`` with ``num_messages_in_batch`` plus a
payload that is, before compression, the concatenation of::

    [singleMetaSize:u32][SingleMessageMetadata][payload]    (one per message)

Per-message work is a few byte concatenations: ``SingleMessageMetadata`` is written by hand
(fields in number order, exactly as protobuf would) because building it through the
protobuf runtime would cost more than everything else a message needs. No callback, future
or lock is created here; the caller passes an opaque ``handle`` per message (a future, a
callback, anything) and gets the handles back with the finished batch, in order.

Metadata of a batch follows the C++ client: ``sequence_id`` is the first message's,
``partition_key`` / ``ordering_key`` are the first message's, ``num_messages_in_batch`` is
always present (also for a batch of one), ``uncompressed_size`` is set when compressed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.protocol import CompressionType, MessageMetadata, encode_metadata
from magnetar.protocol.compression import compress
from magnetar.protocol.varint import encode_varint

_U32 = struct.Struct(">I")

KeyValuePairs = Sequence[tuple[str, str]]


_PLAIN_HEADS: dict[int, tuple[bytes, ...]] = {}
"""payload size -> for each length L of the sequence id's varint (index L, 1 to 10), the
record's start up to that varint: its u32 metadata size, then ``SingleMessageMetadata``
tag 3 (payload_size) and tag 8's key. Bounded to small sizes, where the per-message cost
shows."""
_PLAIN_HEADS_MAX_SIZE = 64 * 1024


def _plain_heads(n: int) -> tuple[bytes, ...]:
    heads = _PLAIN_HEADS.get(n)
    if heads is None:
        prefix = b"\x18" + encode_varint(n) + b"\x40"
        heads = (b"", *(_U32.pack(len(prefix) + length) + prefix for length in range(1, 11)))
        if n < _PLAIN_HEADS_MAX_SIZE:
            _PLAIN_HEADS[n] = heads
    return heads


def _len_delimited(tag: int, data: bytes) -> bytes:
    return bytes((tag,)) + encode_varint(len(data)) + data


def encode_single_metadata(
    payload_size: int,
    sequence_id: int,
    properties: KeyValuePairs = (),
    partition_key: str | None = None,
    event_time: int = 0,
    ordering_key: bytes | None = None,
    null_value: bool = False,
) -> bytes:
    """``SingleMessageMetadata`` protobuf bytes (hand-written, fields in number order)."""
    out = b""
    for key, value in properties:
        kv = _len_delimited(0x0A, key.encode()) + _len_delimited(0x12, value.encode())
        out += _len_delimited(0x0A, kv)
    if partition_key is not None:
        out += _len_delimited(0x12, partition_key.encode())
    out += b"\x18" + encode_varint(payload_size)
    if event_time:
        out += b"\x28" + encode_varint(event_time)
    if ordering_key is not None:
        out += _len_delimited(0x3A, ordering_key)
    out += b"\x40" + encode_varint(sequence_id)
    if null_value:
        out += b"\x48\x01"
    return out


@dataclass(slots=True)
class OpSend:
    """One SEND to write: a batch, a single message, or one chunk of a large message.

    ``handles`` are the callers' per-message handles in sequence order (for a chunk, only
    the last chunk carries the message's handle). Owned by the producer until its receipt.
    """

    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    metadata: bytes
    payload: bytes
    handles: list[Any]
    batched: bool
    is_chunk: bool = False
    chunk_id: int = -1
    num_chunks: int = 0
    payload_bytes_total: int = 0  # uncompressed user bytes, for memory accounting
    created_s: float = 0.0  # monotonic time the first message was added (send timeout)

    @property
    def is_last_chunk(self) -> bool:
        return not self.is_chunk or self.chunk_id == self.num_chunks - 1


class BatchBuilder:
    """Collects messages into one batch until a limit is reached.

    Limits: ``max_messages`` and ``max_bytes`` (uncompressed payload plus per-message
    metadata). :meth:`add` reports whether the batch is now full; a message that does not fit
    in a non-empty batch must be preceded by :meth:`build` (see :meth:`fits`).
    """

    __slots__ = (
        "_bytes",
        "_first_ordering_key",
        "_first_partition_key",
        "_first_seq",
        "_handles",
        "_last_seq",
        "_parts",
        "compression",
        "max_bytes",
        "max_messages",
        "producer_name",
        "schema_version",
    )

    def __init__(
        self,
        *,
        producer_name: str,
        max_messages: int = 1000,
        max_bytes: int = 128 * 1024,
        compression: CompressionType = CompressionType.NONE,
        schema_version: bytes | None = None,
    ) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("batch limits must be positive")
        self.producer_name = producer_name
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.compression = compression
        self.schema_version = schema_version
        self._parts: list[bytes] = []
        self._handles: list[Any] = []
        self._bytes = 0
        self._first_seq = -1
        self._last_seq = -1
        self._first_partition_key: str | None = None
        self._first_ordering_key: bytes | None = None

    def __len__(self) -> int:
        return len(self._handles)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def fits(self, payload_size: int) -> bool:
        """Whether a message of ``payload_size`` bytes may join (an empty batch takes any)."""
        return not self._handles or (
            len(self._handles) < self.max_messages and self._bytes + payload_size <= self.max_bytes
        )

    def add_plain(self, payload: bytes, sequence_id: int, handle: Any) -> bool:
        """Fast path: a message without key, properties or event time, which must fit (see
        :meth:`fits`; ValueError otherwise). Returns True when the batch is full and should
        be built now."""
        full = self.try_add_plain(payload, sequence_id, handle)
        if full is None:
            raise ValueError("the message does not fit: build the batch first")
        return full

    def try_add_plain(self, payload: bytes, sequence_id: int, handle: Any) -> bool | None:
        """:meth:`add_plain` with the :meth:`fits` check folded in (the producer's hot path):
        None when the message does not fit (nothing added: build, then add it to the empty
        batch), else whether the batch is now full."""
        n = len(payload)
        handles = self._handles
        if handles and self._bytes + n > self.max_bytes:
            return None
        heads = _PLAIN_HEADS.get(n) or _plain_heads(n)
        if 0x4000 <= sequence_id < 0x200000:
            seq = bytes(
                ((sequence_id & 0x7F) | 0x80, ((sequence_id >> 7) & 0x7F) | 0x80, sequence_id >> 14)
            )
        elif 0x80 <= sequence_id < 0x4000:
            seq = bytes(((sequence_id & 0x7F) | 0x80, sequence_id >> 7))
        else:
            seq = encode_varint(sequence_id)
        # Pieces are joined once, in build(); the record's size and metadata up to the
        # sequence id's varint come from one cached bytes object.
        self._parts += (heads[len(seq)], seq, payload)
        handles.append(handle)
        if self._first_seq < 0:
            self._first_seq = sequence_id
        self._last_seq = sequence_id
        self._bytes += n + 12
        return len(handles) >= self.max_messages or self._bytes >= self.max_bytes

    def add(
        self,
        payload: bytes,
        sequence_id: int,
        handle: Any,
        *,
        properties: KeyValuePairs = (),
        partition_key: str | None = None,
        ordering_key: bytes | None = None,
        event_time: int = 0,
        null_value: bool = False,
    ) -> bool:
        """Add one message. Returns True when the batch is full and should be built now."""
        meta = encode_single_metadata(
            len(payload),
            sequence_id,
            properties,
            partition_key,
            event_time,
            ordering_key,
            null_value,
        )
        if not self._handles:
            self._first_partition_key = partition_key
            self._first_ordering_key = ordering_key
        self._parts.append(_U32.pack(len(meta)) + meta + payload)
        self._handles.append(handle)
        if self._first_seq < 0:
            self._first_seq = sequence_id
        self._last_seq = sequence_id
        self._bytes += len(payload) + len(meta) + 4
        return len(self._handles) >= self.max_messages or self._bytes >= self.max_bytes

    def build(self, publish_time_ms: int) -> OpSend | None:
        """The finished batch (None if empty); the builder is empty afterwards."""
        if not self._handles:
            return None
        raw = b"".join(self._parts)
        compression = self.compression
        payload = compress(compression, raw) if compression != CompressionType.NONE else raw
        metadata = MessageMetadata(
            producer_name=self.producer_name,
            sequence_id=self._first_seq,
            publish_time=publish_time_ms,
            partition_key=self._first_partition_key,
            ordering_key=self._first_ordering_key,
            compression=compression,
            uncompressed_size=len(raw) if compression != CompressionType.NONE else 0,
            num_messages_in_batch=len(self._handles),
            schema_version=self.schema_version,
        )
        op = OpSend(
            sequence_id=self._first_seq,
            highest_sequence_id=self._last_seq,
            num_messages=len(self._handles),
            metadata=encode_metadata(metadata),
            payload=payload,
            handles=self._handles,
            batched=True,
            payload_bytes_total=self._bytes,
        )
        self._parts = []
        self._handles = []
        self._bytes = 0
        self._first_seq = self._last_seq = -1
        self._first_partition_key = None
        self._first_ordering_key = None
        return op

    def discard(self) -> list[Any]:
        """Drop the pending messages and return their handles (to fail them)."""
        handles = self._handles
        self._parts = []
        self._handles = []
        self._bytes = 0
        self._first_seq = self._last_seq = -1
        return handles
