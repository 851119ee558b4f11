"""The shared varint codec against the protobuf runtime's own encoding of the same field."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol.varint import append_varint, encode_varint, read_varint

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UINT64 = st.integers(0, (1 << 64) - 1)


def _protobuf_int64(value: int) -> bytes:
    """The varint protobuf writes for an int64 field (``negative_int_value``, field 5)."""
    option = descriptor_pb2.UninterpretedOption(negative_int_value=value)
    data = option.SerializeToString()
    assert data[0] == 5 << 3  # field 5, varint
    return data[1:]


@given(INT64)
def test_int64_values_encode_as_protobuf_does_and_read_back(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == _protobuf_int64(value)
    out = bytearray(b"x")
    append_varint(value, out)
    assert bytes(out) == b"x" + encoded
    assert read_varint(b"ab" + encoded + b"cd", 2) == (value % (1 << 64), 2 + len(encoded))


@given(UINT64)
def test_uint64_values_read_back(value: int) -> None:
    encoded = encode_varint(value)
    assert read_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value", [-(1 << 63) - 1, 1 << 64])
def test_values_beyond_64_bits_are_refused(value: int) -> None:
    with pytest.raises(ValueError, match="64 bits"):
        encode_varint(value)


@pytest.mark.parametrize(
    ("data", "end"),
    [(b"", None), (b"\x80", None), (b"\x80\x01", 1), (b"\xff" * 10 + b"\x01", None)],
)
def test_truncated_or_overlong_varints_are_refused(data: bytes, end: int | None) -> None:
    with pytest.raises(ValueError, match="truncated or overlong"):
        read_varint(data, 0, end)
