"""Stored entries: the bytes a SEND carries after its command, kept verbatim by the broker.

An entry is what the broker writes to storage and later prepends, unchanged, to MESSAGE
frames::

    [0x0e01:u16][checksum:u32]  [metadataSize:u32][MessageMetadata][payload ...]
    '--- optional magic+CRC --'  '------------- covered by the CRC32C ------------'

The checksum is CRC-32C (Castagnoli) over every byte after the checksum field. It is
optional in the protocol (the C++ client always sends it to v6+ brokers); without it the
entry starts at ``metadataSize``. The payload is opaque to the broker: for a batch it is
the (possibly compressed) concatenation described in :mod:`magnetar.protocol.batch`.

* :class:`Entry` — a validated view over entry bytes: checksum check, the payload, and
  :class:`EntryMetadata`, parsed lazily on first use.
* :class:`EntryMetadata` — the ``MessageMetadata`` fields the broker needs, read straight
  from the parsed protobuf without building a full typed copy.
* :func:`build_entry` — what a producer writes: computes the checksum, copies no payload.
* :func:`encode_metadata` / :func:`decode_metadata` — typed ``MessageMetadata`` <-> bytes.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from magnetar.common import crc32c
from magnetar.common.errors import ChecksumMismatch, ProtocolError
from magnetar.common.lazy_module import lazy_module
from magnetar.protocol.command import CompressionType, KeyValue
from magnetar.protocol.message_id import BytesLike
from magnetar.protocol.metadata import MessageMetadata

if TYPE_CHECKING:
    from magnetar.protocol import _convert
    from magnetar.protocol.generated import PulsarApi_pb2 as pb
else:  # imported at the first frame: an idle process holds no protobuf classes
    _convert = lazy_module("magnetar.protocol._convert")
    pb = lazy_module("magnetar.protocol.generated.PulsarApi_pb2")

MAGIC_CRC32C = 0x0E01
"""Marks the checksum section of an entry."""

MAGIC_BROKER_ENTRY_METADATA = 0x0E02
"""Marks the broker-entry-metadata section of a MESSAGE frame."""

_U32 = struct.Struct(">I")
_MAGIC_AND_CRC = struct.Struct(">HI")
_CRC_MAGIC_BYTES = b"\x0e\x01"


def crc32c_of(*buffers: BytesLike) -> int:
    """CRC-32C of the concatenation of ``buffers`` (hardware-accelerated where available)."""
    value = 0
    for buf in buffers:
        value = crc32c.crc32c(buf, value=value)
    return value


def _parse_metadata_pb(data: BytesLike) -> pb.MessageMetadata:
    m = pb.MessageMetadata()
    _convert.parse_into(m, data, "MessageMetadata")
    return m


class EntryMetadata:
    """Read-only view of an entry's ``MessageMetadata`` (cheap: no typed copy is built).

    Presence-sensitive fields read ``None`` when absent. :meth:`to_message_metadata` gives
    the full typed form when needed (slower).
    """

    __slots__ = ("_m",)

    def __init__(self, data: BytesLike) -> None:
        """Parse ``data``. Raises ProtocolError if malformed or a required field is missing."""
        self._m = _parse_metadata_pb(data)

    @property
    def producer_name(self) -> str:
        return self._m.producer_name

    @property
    def sequence_id(self) -> int:
        """For a batch, the sequence id of its first message."""
        return self._m.sequence_id

    @property
    def highest_sequence_id(self) -> int:
        return self._m.highest_sequence_id

    @property
    def publish_time(self) -> int:
        return self._m.publish_time

    @property
    def event_time(self) -> int:
        return self._m.event_time

    @property
    def num_messages_in_batch(self) -> int | None:
        """``None`` for a non-batched message (the field's presence marks a batch)."""
        m = self._m
        return m.num_messages_in_batch if m.HasField("num_messages_in_batch") else None

    @property
    def num_messages(self) -> int:
        """Messages in the entry: ``num_messages_in_batch`` for a batch, otherwise 1."""
        return self._m.num_messages_in_batch

    @property
    def partition_key(self) -> str | None:
        m = self._m
        return m.partition_key if m.HasField("partition_key") else None

    @property
    def partition_key_b64_encoded(self) -> bool:
        return self._m.partition_key_b64_encoded

    @property
    def ordering_key(self) -> bytes | None:
        m = self._m
        return m.ordering_key if m.HasField("ordering_key") else None

    @property
    def deliver_at_time(self) -> int | None:
        m = self._m
        return m.deliver_at_time if m.HasField("deliver_at_time") else None

    @property
    def properties(self) -> tuple[KeyValue, ...]:
        return tuple([(kv.key, kv.value) for kv in self._m.properties])

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self._m.compression)

    @property
    def uncompressed_size(self) -> int:
        return self._m.uncompressed_size

    @property
    def schema_version(self) -> bytes | None:
        m = self._m
        return m.schema_version if m.HasField("schema_version") else None

    @property
    def replicated_from(self) -> str | None:
        m = self._m
        return m.replicated_from if m.HasField("replicated_from") else None

    @property
    def replicate_to(self) -> tuple[str, ...]:
        return tuple(self._m.replicate_to)

    @property
    def marker_type(self) -> int | None:
        m = self._m
        return m.marker_type if m.HasField("marker_type") else None

    @property
    def txnid(self) -> tuple[int, int] | None:
        """``(most_bits, least_bits)`` of the transaction, or None."""
        m = self._m
        if not m.HasField("txnid_most_bits") and not m.HasField("txnid_least_bits"):
            return None
        return (m.txnid_most_bits, m.txnid_least_bits)

    @property
    def null_value(self) -> bool:
        return self._m.null_value

    @property
    def uuid(self) -> str | None:
        m = self._m
        return m.uuid if m.HasField("uuid") else None

    @property
    def chunk_id(self) -> int | None:
        m = self._m
        return m.chunk_id if m.HasField("chunk_id") else None

    @property
    def num_chunks_from_msg(self) -> int | None:
        m = self._m
        return m.num_chunks_from_msg if m.HasField("num_chunks_from_msg") else None

    @property
    def total_chunk_msg_size(self) -> int | None:
        m = self._m
        return m.total_chunk_msg_size if m.HasField("total_chunk_msg_size") else None

    @property
    def is_chunk(self) -> bool:
        return self._m.HasField("chunk_id")

    @property
    def is_last_chunk(self) -> bool:
        """True for a non-chunked message too (dedup checks only last chunks)."""
        m = self._m
        if not m.HasField("chunk_id"):
            return True
        return m.chunk_id == m.num_chunks_from_msg - 1

    def to_message_metadata(self) -> MessageMetadata:
        return _convert.struct_from_pb(MessageMetadata, self._m)


class Entry:
    """A validated view over stored entry bytes (see the module docstring for the layout).

    Holds a memoryview of the given buffer (no copy); the buffer must not change while the
    entry is in use. Construction checks the structure and raises ProtocolError if the
    bytes are truncated or inconsistent; metadata is parsed on first access.
    """

    __slots__ = ("_metadata", "_metadata_end", "_metadata_start", "checksum", "data")

    def __init__(self, data: BytesLike) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        n = len(view)
        if n >= 2 and view[0] == 0x0E and view[1] == 0x01:
            if n < 6:
                raise ProtocolError("entry truncated inside its checksum")
            checksum: int | None = _U32.unpack_from(view, 2)[0]
            pos = 6
        else:
            checksum = None
            pos = 0
        if n - pos < 4:
            raise ProtocolError("entry truncated before its metadata size")
        size = _U32.unpack_from(view, pos)[0]
        pos += 4
        if size > n - pos:
            raise ProtocolError(f"entry metadata size {size} exceeds the {n - pos} bytes left")
        self.data = view
        """The whole entry, from the magic (or metadataSize) to the end of the payload."""
        self.checksum = checksum
        """The CRC32C carried by the entry, or None if it carries none."""
        self._metadata_start = pos
        self._metadata_end = pos + size
        self._metadata: EntryMetadata | None = None

    @property
    def has_checksum(self) -> bool:
        return self.checksum is not None

    def verify_checksum(self) -> bool:
        """True if the CRC32C matches, or if the entry carries no checksum."""
        if self.checksum is None:
            return True
        return crc32c.crc32c(self.data[6:]) == self.checksum

    def check_checksum(self) -> None:
        """Raise :class:`~magnetar.common.errors.ChecksumMismatch` if the CRC does not match."""
        if not self.verify_checksum():
            raise ChecksumMismatch("entry checksum mismatch")

    @property
    def metadata_bytes(self) -> memoryview:
        return self.data[self._metadata_start : self._metadata_end]

    @property
    def payload(self) -> memoryview:
        """Everything after the metadata: the (possibly compressed, possibly batched) payload."""
        return self.data[self._metadata_end :]

    @property
    def metadata(self) -> EntryMetadata:
        """The entry's metadata, parsed on first access. Raises ProtocolError if malformed."""
        md = self._metadata
        if md is None:
            md = self._metadata = EntryMetadata(
                self.data[self._metadata_start : self._metadata_end]
            )
        return md

    def __len__(self) -> int:
        return len(self.data)


def entry_publish_time_ms(data: bytes) -> int:
    """The publish time (ms since the epoch) in a stored entry's metadata. Raises
    ProtocolError if the entry is malformed."""
    return Entry(data).metadata.publish_time


def entry_message_count(data: bytes) -> int:
    """The number of messages in a stored entry (a batch's ``num_messages_in_batch``, else
    1). Raises ProtocolError if the entry is malformed."""
    return Entry(data).metadata.num_messages


def encode_metadata(metadata: MessageMetadata) -> bytes:
    """Serialize typed metadata. Raises ValueError/TypeError for invalid field values."""
    return _convert.struct_to_pb(metadata).SerializeToString()


def decode_metadata(data: BytesLike) -> MessageMetadata:
    """Parse typed metadata. Raises ProtocolError if malformed."""
    return _convert.struct_from_pb(MessageMetadata, _parse_metadata_pb(data))


def build_entry(
    metadata: MessageMetadata | bytes, payload: BytesLike, *, checksum: bool = True
) -> list[bytes | memoryview]:
    """The stored-entry bytes for ``metadata`` and ``payload``, as buffers to write in order.

    The first buffer holds magic, checksum, metadata size and metadata; the payload follows
    as given (not copied). ``metadata`` may be already serialized. ``b"".join(...)`` gives
    contiguous bytes. ``checksum=False`` omits the magic and CRC (pre-v6 peers only).
    """
    meta = metadata if isinstance(metadata, bytes) else encode_metadata(metadata)
    size = _U32.pack(len(meta))
    pay = payload if isinstance(payload, bytes) else memoryview(payload)
    if not checksum:
        return [size + meta, pay]
    crc = crc32c.crc32c(pay, value=crc32c.crc32c(meta, value=crc32c.crc32c(size)))
    return [_MAGIC_AND_CRC.pack(MAGIC_CRC32C, crc) + size + meta, pay]
