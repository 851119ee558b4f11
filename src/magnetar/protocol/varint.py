"""Protocol Buffers base-128 varints, for the codecs written by hand outside the generated
classes: the client's batch, single-message metadata and message-id codecs, Spark rows, the
broker's MESSAGE and SEND_RECEIPT encoders (past their tables), and tests.

Negative values are encoded as 64-bit two's complement, as protobuf does for int32 and int64
fields; values outside the int64/uint64 range raise ValueError."""

from __future__ import annotations

from collections.abc import Sequence

_INT64_MIN = -(1 << 63)
_UINT64_LIMIT = 1 << 64


def append_varint(value: int, out: bytearray) -> None:
    """Append ``value``'s varint to ``out``. Raises ValueError beyond 64 bits."""
    if value < 0:
        if value < _INT64_MIN:
            raise ValueError(f"{value} does not fit in 64 bits")
        value += _UINT64_LIMIT
    elif value >= _UINT64_LIMIT:
        raise ValueError(f"{value} does not fit in 64 bits")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_varint(value: int) -> bytes:
    """``value``'s varint. Raises ValueError beyond 64 bits."""
    if 0 <= value < 0x80:
        return bytes((value,))
    out = bytearray()
    append_varint(value, out)
    return bytes(out)


def read_varint(buf: Sequence[int], pos: int, end: int | None = None) -> tuple[int, int]:
    """The varint at ``buf[pos]`` (not reading at or past ``end``, default ``len(buf)``) and
    the position after it. Raises ValueError if it is truncated or longer than 10 bytes."""
    if end is None:
        end = len(buf)
    result = 0
    shift = 0
    while pos < end and shift < 70:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError("truncated or overlong varint")
