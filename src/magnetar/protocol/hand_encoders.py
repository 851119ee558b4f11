"""Protobuf written by hand for the commands sent once per entry: MESSAGE (dispatch) and
SEND_RECEIPT (publish). Building them through the protobuf runtime costs more than the rest
of either path; these produce the same bytes, several times faster, and the C codec
(:mod:`.speedups`) serves the two hottest where it was built.

Every encoder returns what :mod:`.frame`'s generic encoders would for the same fields, and
raises ValueError for ids the wire cannot carry (negative or beyond 64 bits)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Protocol

from magnetar.protocol.command import CommandType, SendReceipt
from magnetar.protocol.entry import MAGIC_BROKER_ENTRY_METADATA
from magnetar.protocol.message_id import BytesLike, MessageId
from magnetar.protocol.metadata import BrokerEntryMetadata
from magnetar.protocol.speedups import CFRAME
from magnetar.protocol.varint import encode_varint
from magnetar.protocol.varint_table import TABLE_LIMIT as _TABLE_LIMIT
from magnetar.protocol.varint_table import build_varint_tables

FRAME_HEADER = struct.Struct(">II")
"""A frame's first eight bytes: total size, command size."""
BROKER_ENTRY_METADATA_HEADER = struct.Struct(">HI")
"""The 0x0e02 magic and size in front of a MESSAGE's broker entry metadata."""


def varint_tables() -> tuple[list[bytes], list[bytes]]:
    """The encoders' two varint tables (:mod:`.varint_table`), built by the first call."""
    global _VARINT_TABLE, _VARINT_LOW14_MORE
    if isinstance(_VARINT_TABLE, list) and isinstance(_VARINT_LOW14_MORE, list):
        return _VARINT_TABLE, _VARINT_LOW14_MORE
    _VARINT_TABLE, _VARINT_LOW14_MORE = tables = build_varint_tables()
    return tables


class _Table(Protocol):
    def __getitem__(self, index: int, /) -> bytes: ...


class _TableUntilUsed:
    """A varint table until first indexed, which builds both in its place: an idle process
    never builds them, and later calls read the real lists (the hot path pays nothing)."""

    __slots__ = ("_which",)

    def __init__(self, which: int) -> None:
        self._which = which

    def __getitem__(self, index: int) -> bytes:
        return varint_tables()[self._which][index]


_VARINT_TABLE: _Table = _TableUntilUsed(0)
_VARINT_LOW14_MORE: _Table = _TableUntilUsed(1)


def _varint(value: int) -> bytes:
    """Protobuf varint; negative values (int32/int64/int64-as-uint64) as 64-bit two's
    complement. Raises ValueError outside the int64/uint64 range."""
    if 0 <= value < _TABLE_LIMIT:
        return _VARINT_TABLE[value]
    if _TABLE_LIMIT <= value < 1 << 28:  # typical ledger and entry ids
        if value < 1 << 21:
            return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
        return bytes(
            (
                (value & 0x7F) | 0x80,
                ((value >> 7) & 0x7F) | 0x80,
                ((value >> 14) & 0x7F) | 0x80,
                value >> 21,
            )
        )
    return encode_varint(value)


def _uvarint(value: int) -> bytes:
    """A uint64 field's varint. Raises ValueError for negative or too large values."""
    if value < 0:
        raise ValueError(f"{value} is negative; the field is a uint64")
    return _varint(value)


def _encode_message_id(mid: MessageId) -> bytes:
    # ledger/entry ids are int64 carried as uint64: _varint's two's complement is exactly that.
    t, limit = _VARINT_TABLE, _TABLE_LIMIT
    ledger, entry, partition = mid.ledger_id, mid.entry_id, mid.partition
    out = (
        b"\x08"
        + (t[ledger] if 0 <= ledger < limit else _varint(ledger))
        + b"\x10"
        + (t[entry] if 0 <= entry < limit else _varint(entry))
    )
    if partition != -1:
        out += b"\x18" + (t[partition] if 0 <= partition < limit else _varint(partition))
    if mid.batch_index != -1:
        out += b"\x20" + _varint(mid.batch_index)
    if mid.ack_set:
        out += b"".join([b"\x28" + _varint(word) for word in mid.ack_set])
    if mid.batch_size is not None:
        out += b"\x30" + _varint(mid.batch_size)
    if mid.first_chunk_message_id is not None:
        first = _encode_message_id(mid.first_chunk_message_id)
        out += b"\x3a" + _varint(len(first)) + first
    return out


def encode_broker_entry_metadata(bem: BrokerEntryMetadata) -> bytes:
    out = b""
    if bem.broker_timestamp is not None:
        out += b"\x08" + _varint(bem.broker_timestamp)
    if bem.index is not None:
        out += b"\x10" + _varint(bem.index)
    return out


# type numbers below 0x80: one-byte varints
_MESSAGE_TYPE = bytes((0x08, CommandType.MESSAGE, 0x4A))
_SEND_RECEIPT_TYPE = bytes((0x08, CommandType.SEND_RECEIPT, 0x3A))


def encode_send_receipt(receipt: SendReceipt) -> bytes:
    """The SEND_RECEIPT frame, written by hand (one per published entry): the same bytes as
    the generic protobuf path of :func:`encode`, several times faster. Raises ValueError
    for ids the wire cannot carry (negative or beyond 64 bits), like :func:`encode`."""
    mid = receipt.message_id
    return _send_receipt(
        receipt.producer_id,
        receipt.sequence_id,
        None if mid is None else _encode_message_id(mid),
        receipt.highest_sequence_id,
    )


def py_encode_send_receipt_at(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int
) -> bytes:
    """The publish path's SEND_RECEIPT, without building a :class:`SendReceipt` or a
    :class:`MessageId`: ``message_id{ledger_id, entry_id}``. Same bytes as
    :func:`encode_send_receipt` for those fields."""
    t, limit = _VARINT_TABLE, _TABLE_LIMIT
    mid = (
        b"\x08"
        + (t[ledger_id] if 0 <= ledger_id < limit else _varint(ledger_id))
        + b"\x10"
        + (t[entry_id] if 0 <= entry_id < limit else _varint(entry_id))
    )
    return _send_receipt(producer_id, sequence_id, mid, highest_sequence_id)


def _send_receipt(
    producer_id: int, sequence_id: int, encoded_mid: bytes | None, highest: int
) -> bytes:
    t, limit = _VARINT_TABLE, _TABLE_LIMIT
    msg = (
        b"\x08"
        + (t[producer_id] if 0 <= producer_id < limit else _uvarint(producer_id))
        + b"\x10"
        + (t[sequence_id] if 0 <= sequence_id < limit else _uvarint(sequence_id))
    )
    if encoded_mid is not None:
        msg += b"\x1a" + t[len(encoded_mid)] + encoded_mid  # far below 16 KiB
    if highest:
        msg += b"\x20" + (t[highest] if 0 <= highest < limit else _uvarint(highest))
    body = _SEND_RECEIPT_TYPE + (t[len(msg)] if len(msg) < limit else _varint(len(msg))) + msg
    return FRAME_HEADER.pack(len(body) + 4, len(body)) + body


def encode_message_at(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    entry: bytes | memoryview,
    redelivery_count: int = 0,
) -> list[bytes | memoryview]:
    """The common MESSAGE of the dispatch path, without building a :class:`MessageId`:
    ``message_id{ledger_id, entry_id, partition}`` (no batch index, ack set or epoch) in
    front of stored ``entry`` bytes (a bytes object or a flat byte memoryview, passed through
    uncopied). Same bytes as :func:`encode_message` for those fields; negative ids take that
    general path."""
    t, limit = _VARINT_TABLE, _TABLE_LIMIT
    if not (
        ledger_id >= 0
        and entry_id >= 0
        and -1 <= partition < limit
        and 0 <= consumer_id < limit
        and 0 <= redelivery_count < limit
    ):
        return encode_message(
            consumer_id, MessageId(ledger_id, entry_id, partition), redelivery_count, entry
        )
    mid = (
        b"\x08"
        + (t[ledger_id] if ledger_id < limit else _varint(ledger_id))
        + b"\x10"
        + (t[entry_id] if entry_id < limit else _varint(entry_id))
    )
    if partition != -1:
        mid += b"\x18" + t[partition]
    msg = b"\x08" + t[consumer_id] + b"\x12" + t[len(mid)] + mid
    if redelivery_count:
        msg += b"\x18" + t[redelivery_count]
    body = _MESSAGE_TYPE + t[len(msg)] + msg
    cmd_size = len(body)
    return [FRAME_HEADER.pack(4 + cmd_size + len(entry), cmd_size) + body, entry]


def py_encode_messages_at(
    consumer_id: int,
    partition: int,
    positions: Sequence[tuple[int, int]],
    entries: Sequence[bytes],
    sizes: Sequence[int],
    redelivery_counts: Sequence[int] | None = None,
) -> list[bytes | memoryview]:
    """The MESSAGE frames of a run of entries, for one ``writelines``: ``[header, entry,
    header, entry, ...]``, each pair the same bytes as :func:`encode_message_at` for
    ``positions[i]``, ``entries[i]`` (of ``sizes[i]`` bytes) and ``redelivery_counts[i]``
    (None: all 0). Entries are passed through uncopied.

    The command bytes before the entry id depend only on the ledger and on how many bytes
    the entry id's varint takes, so they are built once per ledger and varint length, not
    once per entry: per entry this is one ``pack`` and two concatenations."""
    t, limit = _VARINT_TABLE, _TABLE_LIMIT
    if not (-1 <= partition < limit and 0 <= consumer_id < limit):
        return [
            part
            for (ledger_id, entry_id), entry, rc in zip(
                positions, entries, redelivery_counts or repeat(0, len(entries)), strict=True
            )
            for part in encode_message_at(consumer_id, ledger_id, entry_id, partition, entry, rc)
        ]
    pack = FRAME_HEADER.pack
    low14_more = _VARINT_LOW14_MORE
    cid = b"\x08" + t[consumer_id] + b"\x12"
    tail = b"" if partition == -1 else b"\x18" + t[partition]
    out: list[bytes | memoryview] = []
    ledger = lo = hi = -1  # the prefix below is good for entry ids lo <= id < hi of ledger
    head = b""
    cmd_size = 0
    for i, ((ledger_id, entry_id), entry, size) in enumerate(
        zip(positions, entries, sizes, strict=True)
    ):
        if redelivery_counts is not None and redelivery_counts[i]:
            out += encode_message_at(
                consumer_id, ledger_id, entry_id, partition, entry, redelivery_counts[i]
            )
            continue
        if ledger_id != ledger or not lo <= entry_id < hi:
            if ledger_id < 0 or entry_id < 0:
                out += encode_message_at(consumer_id, ledger_id, entry_id, partition, entry)
                continue
            ledger = ledger_id
            if entry_id < 0x80:
                lo, hi = 0, 0x80
            elif entry_id < limit:
                lo, hi = 0x80, limit
            elif entry_id < 1 << 21:
                lo, hi = limit, 1 << 21
            else:
                lo, hi = entry_id, entry_id + 1  # ids of 4 varint bytes or more: rare
            entry_var = t[entry_id] if entry_id < limit else _varint(entry_id)
            mid_head = b"\x08" + (t[ledger_id] if ledger_id < limit else _varint(ledger_id))
            mid_len = len(mid_head) + 1 + len(entry_var) + len(tail)
            msg_len = len(cid) + len(t[mid_len]) + mid_len
            head = _MESSAGE_TYPE + t[msg_len] + cid + t[mid_len] + mid_head + b"\x10"
            cmd_size = len(_MESSAGE_TYPE) + len(t[msg_len]) + msg_len
        if entry_id < limit:
            entry_var = t[entry_id]
        elif entry_id < 1 << 21:
            entry_var = low14_more[entry_id & 0x3FFF] + t[entry_id >> 14]
        else:
            entry_var = _varint(entry_id)
        out += (pack(4 + cmd_size + size, cmd_size) + head + entry_var + tail, entry)
    return out


def _c_encode_messages_at(
    consumer_id: int,
    partition: int,
    positions: Sequence[tuple[int, int]],
    entries: Sequence[bytes],
    sizes: Sequence[int],
    redelivery_counts: Sequence[int] | None = None,
) -> list[bytes | memoryview]:
    """:func:`py_encode_messages_at` through the C function where it applies (no
    redelivery counts, no negative id)."""
    if redelivery_counts is None:
        assert CFRAME is not None
        out: list[bytes | memoryview] | None = CFRAME.messages_at(
            consumer_id, partition, positions, entries, sizes
        )
        if out is not None:
            return out
    return py_encode_messages_at(
        consumer_id, partition, positions, entries, sizes, redelivery_counts
    )


encode_send_receipt_at: Callable[[int, int, int, int, int], bytes] = (
    py_encode_send_receipt_at if CFRAME is None else CFRAME.send_receipt_at
)
"""The publish path's SEND_RECEIPT encoder in use (C where built: :mod:`.speedups`)."""
encode_messages_at = py_encode_messages_at if CFRAME is None else _c_encode_messages_at
"""The dispatch path's MESSAGE encoder in use (C where built: :mod:`.speedups`)."""


def encode_message(
    consumer_id: int,
    message_id: MessageId,
    redelivery_count: int,
    entry: BytesLike,
    ack_set: Sequence[int] | None = None,
    *,
    consumer_epoch: int | None = None,
    broker_entry_metadata: BrokerEntryMetadata | None = None,
) -> list[bytes | memoryview]:
    """A MESSAGE frame (broker side) prepended to stored entry bytes, for ``writelines``.

    Returns ``[header, entry]``: the header holds sizes, command and the optional 0x0e02
    section; ``entry`` is passed through uncopied. The bytes equal those of
    ``encode_payload_command(Message(...), entry, broker_entry_metadata)``.
    """
    t, limit = _VARINT_TABLE, _TABLE_LIMIT
    mid = _encode_message_id(message_id)
    msg = (
        b"\x08"
        + (t[consumer_id] if 0 <= consumer_id < limit else _varint(consumer_id))
        + b"\x12"
        + t[len(mid)]  # a MessageIdData is far below 16 KiB
        + mid
    )
    if redelivery_count:
        msg += b"\x18" + _varint(redelivery_count)
    if ack_set:
        msg += b"".join([b"\x20" + _varint(word) for word in ack_set])
    if consumer_epoch is not None:
        msg += b"\x28" + _varint(consumer_epoch)
    body = _MESSAGE_TYPE + (t[len(msg)] if len(msg) < limit else _varint(len(msg))) + msg
    cmd_size = len(body)
    if isinstance(entry, bytes):
        entry_part: bytes | memoryview = entry
        entry_size = len(entry)
    else:
        entry_part = entry if isinstance(entry, memoryview) else memoryview(entry)
        entry_size = entry_part.nbytes
    if broker_entry_metadata is None:
        return [FRAME_HEADER.pack(4 + cmd_size + entry_size, cmd_size) + body, entry_part]
    bem = encode_broker_entry_metadata(broker_entry_metadata)
    head = (
        FRAME_HEADER.pack(4 + cmd_size + 6 + len(bem) + entry_size, cmd_size)
        + body
        + BROKER_ENTRY_METADATA_HEADER.pack(MAGIC_BROKER_ENTRY_METADATA, len(bem))
        + bem
    )
    return [head, entry_part]
