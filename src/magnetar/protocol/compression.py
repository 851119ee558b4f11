"""Payload compression codecs, shared by the client and the broker (compaction).

===========  ========================================  =========================
type         format on the wire                        library
===========  ========================================  =========================
``LZ4``      raw LZ4 block, no size prefix             lz4
``ZLIB``     zlib stream (header + deflate + adler)    zlib (stdlib)
``ZSTD``     one zstd frame                            cramjam
``SNAPPY``   raw snappy (no framing)                   cramjam
===========  ========================================  =========================

A batch is compressed as a whole; ``MessageMetadata.uncompressed_size`` carries the size
before compression, which LZ4 and the size check on decompression need. The formats match the
C++ client byte for byte. It lives in the protocol package because the client (producing and
consuming), the broker's compactor and the admin API's peek all use it. The libraries are
imported on first use of their codec: a broker that never compacts or peeks a compressed
payload loads neither.
"""

from __future__ import annotations

import zlib

from magnetar.common.errors import ProtocolError
from magnetar.protocol.command import CompressionType
from magnetar.protocol.message_id import BytesLike

UNCOMPRESSED_SIZE_MAX_BYTES = 64 * 1024 * 1024
"""Refuse to decompress payloads announcing more than this (bounds memory on bad input)."""


class CompressionError(ProtocolError):
    """A payload could not be decompressed or its size does not match ``uncompressed_size``."""


def compress(kind: CompressionType, data: BytesLike) -> bytes:
    """Compress ``data`` with ``kind``; NONE returns the bytes unchanged."""
    if kind == CompressionType.NONE:
        return bytes(data)
    if kind == CompressionType.LZ4:
        import lz4.block  # type: ignore[import-untyped]

        return bytes(lz4.block.compress(data, store_size=False))
    if kind == CompressionType.ZLIB:
        return zlib.compress(data)
    if kind == CompressionType.ZSTD:
        import cramjam

        return bytes(cramjam.zstd.compress(bytes(data)))
    if kind == CompressionType.SNAPPY:
        import cramjam

        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    raise CompressionError(f"unknown compression type {kind}")


def decompress(kind: CompressionType, data: BytesLike, uncompressed_size: int) -> BytesLike:
    """Decompress ``data``; raises :class:`CompressionError` if it is corrupt or its
    decompressed size differs from ``uncompressed_size``. NONE returns ``data`` (no copy)."""
    if kind == CompressionType.NONE:
        return data
    if uncompressed_size < 0 or uncompressed_size > UNCOMPRESSED_SIZE_MAX_BYTES:
        raise CompressionError(f"uncompressed size {uncompressed_size} out of range")
    try:
        out: BytesLike
        if kind == CompressionType.LZ4:
            import lz4.block

            out = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif kind == CompressionType.ZLIB:
            out = zlib.decompress(data)
        elif kind == CompressionType.ZSTD:
            import cramjam

            out = bytes(cramjam.zstd.decompress(bytes(data)))
        elif kind == CompressionType.SNAPPY:
            import cramjam

            out = bytes(cramjam.snappy.decompress_raw(bytes(data)))
        else:
            raise CompressionError(f"unknown compression type {kind}")
    except CompressionError:
        raise
    except Exception as exc:  # each library raises its own error type for corrupt input
        raise CompressionError(f"{kind.name} payload is corrupt: {exc}") from exc
    if len(out) != uncompressed_size:
        raise CompressionError(
            f"{kind.name} payload decompressed to {len(out)} bytes, expected {uncompressed_size}"
        )
    return out
