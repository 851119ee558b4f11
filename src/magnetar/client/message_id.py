"""Client-facing message ids, with the official client's method names.

A :class:`MessageId` addresses one message: ``(ledger_id, entry_id)`` is the stored entry,
``batch_index`` the message inside a batched entry (-1 when the entry is not a batch) and
``partition`` the partition index (-1 for a non-partitioned topic). As in the C++ client,
equality compares ledger, entry, batch index and partition; ordering compares ledger, entry
and batch index (ids of different partitions are not meaningfully ordered).

``serialize()`` gives the protobuf ``MessageIdData`` bytes the official client produces,
so ids can be stored and exchanged with it; ``deserialize()`` reads them back.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.protocol import INT64_MAX
from magnetar.protocol import MessageId as WireMessageId
from magnetar.protocol.message_id import to_signed64, to_unsigned64
from magnetar.protocol.varint import append_varint, read_varint


def _int32(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


class MessageId:
    """Immutable, hashable id of a message. ``MessageId.earliest`` / ``MessageId.latest``
    are the conventional start positions."""

    __slots__ = (
        "_batch_index",
        "_batch_size",
        "_entry_id",
        "_first_chunk",
        "_ledger_id",
        "_partition",
    )

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(
        self,
        partition: int = -1,
        ledger_id: int = -1,
        entry_id: int = -1,
        batch_index: int = -1,
        *,
        batch_size: int = 0,
        first_chunk: MessageId | None = None,
    ) -> None:
        # The positional order (partition, ledger, entry, batch) is the official client's.
        self._partition = partition
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = batch_size
        self._first_chunk = first_chunk

    def ledger_id(self) -> int:
        return self._ledger_id

    def entry_id(self) -> int:
        return self._entry_id

    def batch_index(self) -> int:
        return self._batch_index

    def partition(self) -> int:
        return self._partition

    def batch_size(self) -> int:
        """Messages in the batch this id belongs to (0 when unknown or not batched)."""
        return self._batch_size

    def first_chunk_message_id(self) -> MessageId | None:
        """For the id of a chunked message: the id of its first chunk (its own id is the last
        chunk's)."""
        return self._first_chunk

    def is_earliest_like(self) -> bool:
        """True for ``earliest`` (and any id before the first entry)."""
        return self._ledger_id < 0 or self._entry_id < 0

    @property
    def position(self) -> tuple[int, int]:
        return (self._ledger_id, self._entry_id)

    def with_partition(self, partition: int) -> MessageId:
        return MessageId(
            partition,
            self._ledger_id,
            self._entry_id,
            self._batch_index,
            batch_size=self._batch_size,
            first_chunk=self._first_chunk,
        )

    # ------------------------------------------------------------ wire

    def to_wire(self, *, with_batch_index: bool = True) -> WireMessageId:
        """The protocol form (for SEEK, ACK, SUBSCRIBE start ids)."""
        return WireMessageId(
            self._ledger_id,
            self._entry_id,
            self._partition,
            self._batch_index if with_batch_index else -1,
        )

    @classmethod
    def from_wire(cls, mid: WireMessageId, partition: int | None = None) -> MessageId:
        return cls(
            mid.partition if partition is None else partition,
            mid.ledger_id,
            mid.entry_id,
            mid.batch_index,
            batch_size=mid.batch_size or 0,
        )

    def serialize(self) -> bytes:
        """``MessageIdData`` protobuf bytes, as the official client writes them."""
        out = bytearray(b"\x08")
        append_varint(to_unsigned64(self._ledger_id), out)
        out.append(0x10)
        append_varint(to_unsigned64(self._entry_id), out)
        if self._partition != -1:
            out.append(0x18)
            append_varint(self._partition, out)
        if self._batch_index != -1:
            out.append(0x20)
            append_varint(self._batch_index, out)
        if self._batch_size:
            out.append(0x30)
            append_varint(self._batch_size, out)
        if self._first_chunk is not None:
            inner = self._first_chunk.serialize()
            out.append(0x3A)
            append_varint(len(inner), out)
            out += inner
        return bytes(out)

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        """Read :meth:`serialize` output (or the official client's). Raises ValueError."""
        ledger = entry = None
        partition = batch_index = -1
        batch_size = 0
        first: MessageId | None = None
        pos = 0
        while pos < len(data):
            key, pos = read_varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if wire_type == 0:
                value, pos = read_varint(data, pos)
                if number == 1:
                    ledger = to_signed64(value)
                elif number == 2:
                    entry = to_signed64(value)
                elif number == 3:
                    partition = _int32(value)
                elif number == 4:
                    batch_index = _int32(value)
                elif number == 6:
                    batch_size = _int32(value)
            elif wire_type == 2:
                length, pos = read_varint(data, pos)
                if pos + length > len(data):
                    raise ValueError("truncated serialized message id")
                if number == 7:
                    first = cls.deserialize(data[pos : pos + length])
                pos += length
            else:
                raise ValueError(f"unexpected wire type {wire_type} in a serialized message id")
        if ledger is None or entry is None:
            raise ValueError("serialized message id lacks ledger or entry id")
        return cls(partition, ledger, entry, batch_index, batch_size=batch_size, first_chunk=first)

    # ------------------------------------------------------------ comparison

    def _key(self) -> tuple[int, int, int]:
        return (self._ledger_id, self._entry_id, self._batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self._partition == other._partition

    def __hash__(self) -> int:
        return hash((self._ledger_id, self._entry_id, self._batch_index, self._partition))

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        return f"({self._ledger_id},{self._entry_id},{self._partition},{self._batch_index})"

    def __repr__(self) -> str:
        return f"MessageId{self}"


MessageId.earliest = MessageId(-1, -1, -1, -1)
MessageId.latest = MessageId(-1, INT64_MAX, INT64_MAX, -1)


def batch_message_ids(
    partition: int, ledger_id: int, entry_id: int, batch_size: int
) -> list[MessageId]:
    """The ids of the ``batch_size`` messages of one batched entry, in batch order (the
    producer's receipt path: slot stores instead of a keyword ``__init__`` per id)."""
    new = MessageId.__new__
    ids = []
    for index in range(batch_size):
        mid = new(MessageId)
        mid._partition = partition
        mid._ledger_id = ledger_id
        mid._entry_id = entry_id
        mid._batch_index = index
        mid._batch_size = batch_size
        mid._first_chunk = None
        ids.append(mid)
    return ids
