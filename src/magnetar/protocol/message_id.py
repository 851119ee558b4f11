"""Message ids: the address of a message in a topic.

``MessageId`` is the shared, typed form of the wire's ``MessageIdData``. A message lives in
entry ``entry_id`` of ledger ``ledger_id``; inside a batched entry it is message
``batch_index``. ``partition`` is the index of the partition the message belongs to (-1 for a
non-partitioned topic).

Ledger and entry ids are uint64 on the wire but int64 everywhere else (the C++ client holds
them as int64): a wire value >= 2**63 is read as negative, and negative values are written
as their two's complement. That gives the two conventional ids:

* :data:`EARLIEST` = ``(-1, -1)`` — before the first entry (wire value 2**64 - 1);
* :data:`LATEST` = ``(INT64_MAX, INT64_MAX)`` — after the last entry.
"""

from __future__ import annotations

from dataclasses import dataclass

BytesLike = bytes | bytearray | memoryview
"""Any contiguous byte buffer the codec accepts."""

INT64_MAX = (1 << 63) - 1
_UINT64_SPAN = 1 << 64
_INT64_MIN = -(1 << 63)


def to_signed64(value: int) -> int:
    """Read a wire uint64 as the int64 clients use (values >= 2**63 become negative)."""
    return value - _UINT64_SPAN if value > INT64_MAX else value


def to_unsigned64(value: int) -> int:
    """Write an int64 as the wire's uint64 (two's complement). Raises ValueError if out of range."""
    if value < 0:
        if value < _INT64_MIN:
            raise ValueError(f"{value} does not fit in int64")
        return value + _UINT64_SPAN
    if value >= _UINT64_SPAN:
        raise ValueError(f"{value} does not fit in uint64")
    return value


@dataclass(frozen=True, slots=True, init=False)
class MessageId:
    """Typed ``MessageIdData``. Immutable and hashable.

    ``ack_set``, ``batch_size`` and ``first_chunk_message_id`` are only meaningful in a few
    commands (batch-index acks, chunked messages); they take part in equality, so compare
    :attr:`position` when only the address matters.
    """

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    # Java BitSet.toLongArray() of the batch: a set bit means "not yet acknowledged".
    ack_set: tuple[int, ...] = ()
    batch_size: int | None = None
    first_chunk_message_id: MessageId | None = None

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        partition: int = -1,
        batch_index: int = -1,
        ack_set: tuple[int, ...] = (),
        batch_size: int | None = None,
        first_chunk_message_id: MessageId | None = None,
    ) -> None:
        # Written through the slot descriptors, as the generated frozen __init__ does, but
        # without its per-field indirection: ids are built for every dispatched message.
        _set_ledger_id(self, ledger_id)
        _set_entry_id(self, entry_id)
        _set_partition(self, partition)
        _set_batch_index(self, batch_index)
        _set_ack_set(self, ack_set)
        _set_batch_size(self, batch_size)
        _set_first_chunk_message_id(self, first_chunk_message_id)

    @property
    def position(self) -> tuple[int, int]:
        """``(ledger_id, entry_id)``: the entry this message is stored in."""
        return (self.ledger_id, self.entry_id)

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id == -1 and self.entry_id == -1

    @property
    def is_latest(self) -> bool:
        return self.ledger_id == INT64_MAX and self.entry_id == INT64_MAX

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.partition}:{self.batch_index}"


_set_ledger_id = MessageId.__dict__["ledger_id"].__set__
_set_entry_id = MessageId.__dict__["entry_id"].__set__
_set_partition = MessageId.__dict__["partition"].__set__
_set_batch_index = MessageId.__dict__["batch_index"].__set__
_set_ack_set = MessageId.__dict__["ack_set"].__set__
_set_batch_size = MessageId.__dict__["batch_size"].__set__
_set_first_chunk_message_id = MessageId.__dict__["first_chunk_message_id"].__set__

EARLIEST = MessageId(-1, -1)
"""Start before the first available entry (``(-1, -1)``)."""

LATEST = MessageId(INT64_MAX, INT64_MAX)
"""Start after the last entry (``(INT64_MAX, INT64_MAX)``)."""
