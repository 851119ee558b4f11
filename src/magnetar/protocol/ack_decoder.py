"""The hand-written decoder of the usual shape of an ACK command (the bytes of its
``BaseCommand``). Consumers acknowledge often and every acknowledgement is decoded on the
broker's event loop; for an ACK of one message id this takes a third of the time of parsing
with the protobuf runtime and converting the result. :mod:`.frame` tries it first and falls
back to the protobuf runtime when it gives up. Pure Python; imports no protobuf code."""

from __future__ import annotations

from magnetar.protocol.command import Ack, AckType
from magnetar.protocol.fast_constructor import fast_constructor
from magnetar.protocol.message_id import MessageId

_new_ack = fast_constructor(Ack)
_new_message_id = fast_constructor(MessageId)

_U64_LIMIT = 1 << 64
_ACK_TYPES = (AckType.Individual, AckType.Cumulative)  # by wire value
_INT64_MAX = (1 << 63) - 1
_INT32_SIGN = 1 << 31
_UINT32_MASK = 0xFFFFFFFF
_MINUS_ONE_VARINT = b"\xff" * 9 + b"\x01"
"""The varint of an int64 -1 (2**64 - 1): the usual word of an ``ack_set`` of a batch
larger than 64 messages."""
_BEYOND_ANY_END = 1 << 62
"""The position :func:`_long_varint` gives for a varint it refuses (past every buffer's
end, so one ``pos > end`` check covers both overrun and refusal)."""


def _long_varint(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """The varint whose first byte ``first`` (>= 0x80) is at ``pos - 1``, and the position
    after it; that position is :data:`_BEYOND_ANY_END` if the varint is longer than 10
    bytes or beyond 64 bits. It may read past the caller's end, which checks the position
    it gets back, and raises IndexError at the end of ``data``. Unrolled, unlike
    :func:`magnetar.protocol.varint.read_varint`: with that loop (and a check for 64 bits)
    an ACK of five message ids with ack sets decoded a third slower."""
    value = first & 0x7F
    b = data[pos]
    if b < 0x80:
        return value | b << 7, pos + 1
    value |= (b & 0x7F) << 7
    b = data[pos + 1]
    if b < 0x80:
        return value | b << 14, pos + 2
    value |= (b & 0x7F) << 14
    b = data[pos + 2]
    if b < 0x80:
        return value | b << 21, pos + 3
    value |= (b & 0x7F) << 21
    b = data[pos + 3]
    if b < 0x80:
        return value | b << 28, pos + 4
    value |= (b & 0x7F) << 28
    b = data[pos + 4]
    if b < 0x80:
        return value | b << 35, pos + 5
    value |= (b & 0x7F) << 35
    b = data[pos + 5]
    if b < 0x80:
        return value | b << 42, pos + 6
    value |= (b & 0x7F) << 42
    b = data[pos + 6]
    if b < 0x80:
        return value | b << 49, pos + 7
    value |= (b & 0x7F) << 49
    b = data[pos + 7]
    if b < 0x80:
        return value | b << 56, pos + 8
    value |= (b & 0x7F) << 56
    b = data[pos + 8]
    if b < 2:  # the tenth byte holds bit 63 only
        return value | b << 63, pos + 9
    return 0, _BEYOND_ANY_END


def _int32(value: int) -> int:
    """An int32 field's value from its varint: the low 32 bits, signed (a negative int32
    comes as ten bytes)."""
    return ((value & _UINT32_MASK) ^ _INT32_SIGN) - _INT32_SIGN


def ack_from_command_bytes(data: bytes) -> Ack | None:
    """The usual shape of an ACK command, decoded without the protobuf runtime, or None
    (give up).

    Takes ``BaseCommand{type=ACK, ack{...}}`` (the bytes ``08 0a 52 <length>`` and the
    sub-message filling the rest exactly) whose ``ack`` holds, in any order and repeated as
    protobuf allows, only ``consumer_id``, ``ack_type`` (Individual or Cumulative),
    ``message_id`` (each holding only ``ledgerId``, ``entryId``, ``partition``,
    ``batch_index``, ``batch_size`` and ``ack_set``, packed or not), ``txnid_least_bits``,
    ``txnid_most_bits`` and ``request_id``, each field with its own wire type and its number
    in a one-byte key.

    Anything else returns None: ``validation_error``, ``properties``,
    ``first_chunk_message_id``, unknown fields or wire types, a missing required field, an
    unknown ``ack_type``, a varint longer than 10 bytes or beyond 64 bits, a length that
    overruns or falls short of its message. The caller then parses with the protobuf
    runtime, which does the validating; so this never accepts bytes the runtime would
    reject, and for the bytes it accepts gives exactly the :class:`Ack` that
    :func:`~magnetar.protocol._convert.command_from_base` gives (property-tested).
    """
    n = len(data)
    if n < 4 or data[0] != 0x08 or data[1] != 0x0A or data[2] != 0x52:
        return None
    # Reading past the end of data raises IndexError (caught below: give up); a field that
    # overruns its message id is caught by the position checks.
    try:
        size = data[3]
        pos = 4
        if size >= 0x80:
            size, pos = _long_varint(data, pos, size)
        if pos + size != n:
            return None
        consumer_id = ack_type = request_id = None
        txnid_least_bits = txnid_most_bits = 0
        message_ids: list[MessageId] = []
        while pos < n:
            key = data[pos]
            value = data[pos + 1]
            pos += 2
            if value >= 0x80:
                value, pos = _long_varint(data, pos, value)
                if pos > n:
                    return None
            if key == 0x1A:  # a message_id of value bytes
                end = pos + value
                if end > n:
                    return None
                ledger_id = entry_id = batch_size = None
                partition = batch_index = -1
                ack_set: list[int] | None = None
                while pos < end:
                    key = data[pos]
                    value = data[pos + 1]
                    pos += 2
                    if value >= 0x80:
                        if key == 0x28 and data.startswith(_MINUS_ONE_VARINT, pos - 1):
                            value = _U64_LIMIT - 1
                            pos += 9
                        else:
                            value, pos = _long_varint(data, pos, value)
                    if pos > end:
                        return None
                    if key == 0x08:
                        ledger_id = value
                    elif key == 0x10:
                        entry_id = value
                    elif key == 0x28:  # one int64 of ack_set
                        if ack_set is None:
                            ack_set = []
                        ack_set.append(value - _U64_LIMIT if value > _INT64_MAX else value)
                    elif key == 0x30:
                        batch_size = value if value < _INT32_SIGN else _int32(value)
                    elif key == 0x18:
                        partition = value if value < _INT32_SIGN else _int32(value)
                    elif key == 0x20:
                        batch_index = value if value < _INT32_SIGN else _int32(value)
                    elif key == 0x2A:  # ack_set packed: int64s in value bytes
                        packed_end = pos + value
                        if packed_end > end:
                            return None
                        if ack_set is None:
                            ack_set = []
                        while pos < packed_end:
                            word = data[pos]
                            pos += 1
                            if word >= 0x80:
                                word, pos = _long_varint(data, pos, word)
                                if pos > packed_end:
                                    return None
                            ack_set.append(word - _U64_LIMIT if word > _INT64_MAX else word)
                    else:
                        return None
                if ledger_id is None or entry_id is None:
                    return None
                message_ids.append(
                    _new_message_id(
                        ledger_id - _U64_LIMIT if ledger_id > _INT64_MAX else ledger_id,
                        entry_id - _U64_LIMIT if entry_id > _INT64_MAX else entry_id,
                        partition,
                        batch_index,
                        () if ack_set is None else tuple(ack_set),
                        batch_size,
                        None,
                    )
                )
            elif key == 0x08:
                consumer_id = value
            elif key == 0x10:
                if value > 1:
                    return None
                ack_type = value
            elif key == 0x40:
                request_id = value
            elif key == 0x30:
                txnid_least_bits = value
            elif key == 0x38:
                txnid_most_bits = value
            else:
                return None
    except IndexError:
        return None
    if consumer_id is None or ack_type is None:
        return None
    return _new_ack(
        consumer_id,
        _ACK_TYPES[ack_type],
        tuple(message_ids),
        None,
        (),
        txnid_least_bits,
        txnid_most_bits,
        request_id,
    )
