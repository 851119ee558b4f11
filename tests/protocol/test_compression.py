from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import CompressionType
from magnetar.protocol.compression import CompressionError, compress, decompress


@given(st.binary(max_size=5000), st.sampled_from(list(CompressionType)))
def test_round_trip(data: bytes, kind: CompressionType) -> None:
    assert bytes(decompress(kind, compress(kind, data), len(data))) == data


def test_compressible_data_shrinks_and_zlib_is_a_zlib_stream() -> None:
    data = b"magnetar " * 1000
    for kind in (
        CompressionType.LZ4,
        CompressionType.ZLIB,
        CompressionType.ZSTD,
        CompressionType.SNAPPY,
    ):
        assert len(compress(kind, data)) < len(data) // 5
    assert zlib.decompress(compress(CompressionType.ZLIB, data)) == data
    assert compress(CompressionType.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic


@pytest.mark.parametrize(
    "kind",
    [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY],
)
def test_corrupt_or_wrong_size_raises(kind: CompressionType) -> None:
    data = b"abcdefgh" * 100
    packed = compress(kind, data)
    with pytest.raises(CompressionError):
        decompress(kind, packed, len(data) + 1)
    with pytest.raises(CompressionError):
        decompress(kind, b"\xff" * 7 + packed[7:12], len(data))
    with pytest.raises(CompressionError):
        decompress(kind, packed, 1 << 40)
