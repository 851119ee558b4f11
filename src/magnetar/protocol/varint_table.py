"""The MESSAGE and receipt encoders' varint tables (:mod:`magnetar.protocol.hand_encoders` builds them
with its first encoding): varints looked up inline, because on the dispatch path a list
lookup is far cheaper than a call."""

from __future__ import annotations

TABLE_LIMIT = 1 << 14
"""The tables hold the values below this."""


def _two_byte_varints(high_bits: int) -> bytes:
    """Byte pairs ``(i & 0x7F) | 0x80, (i >> 7) | high_bits`` for i below 2**14, end to end:
    built by slice assignment, as slicing them out is, several times cheaper than 16 384
    ``bytes([...])`` calls."""
    pairs = bytearray(2 * TABLE_LIMIT)
    pairs[0::2] = bytes(range(0x80, 0x100)) * (TABLE_LIMIT >> 7)
    pairs[1::2] = b"".join([bytes((h | high_bits,)) * 0x80 for h in range(TABLE_LIMIT >> 7)])
    return bytes(pairs)


def build_varint_tables() -> tuple[list[bytes], list[bytes]]:
    """Two new tables (1.4 MB, several ms to build): every varint below 2**14 (one or two
    bytes) by value, and the first two bytes of a three-byte varint by its low 14 bits (entry
    ids of 2**14 up to 2**21 are then two lookups, not a call)."""
    pairs = _two_byte_varints(0)
    table = [bytes((i,)) for i in range(0x80)]
    table += [pairs[j : j + 2] for j in range(0x100, 2 * TABLE_LIMIT, 2)]
    pairs = _two_byte_varints(0x80)
    low14_more = [pairs[j : j + 2] for j in range(0, 2 * TABLE_LIMIT, 2)]
    return table, low14_more
