"""MurmurHash3 x86_32 exactly as Pulsar uses it.

Pulsar hashes with ``org.apache.pulsar.common.util.Murmur3_32Hash``: the standard
MurmurHash3 x86_32 function with seed 0 over the raw bytes, little-endian blocks, whose
``makeHash`` then clears the sign bit (``& Integer.MAX_VALUE``), so every hash Pulsar
compares is a non-negative Java ``int`` in ``[0, 2**31)``. The client-side
``Murmur3Hash32.makeHash(String)`` hashes ``s.getBytes(UTF_8)`` and masks the same way.

The hashing itself is done by the ``mmh3`` C extension; this module only fixes the
seed, the byte encoding and the mask, so every caller hashes the way the Java broker does
(key-shared slot choice, failover consistent-hash ring).
"""

from __future__ import annotations

import mmh3

#: Pulsar masks every hash to a non-negative Java int.
JAVA_INT_MAX = 0x7FFFFFFF


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """The raw MurmurHash3 x86_32 of ``data`` as an unsigned 32-bit integer."""
    return mmh3.hash(data, seed, signed=False)


def pulsar_hash(data: bytes) -> int:
    """Pulsar's ``Murmur3_32Hash.getInstance().makeHash(data)``: in ``[0, 2**31)``."""
    return mmh3.hash(data, 0, signed=False) & JAVA_INT_MAX


def pulsar_hash_str(text: str) -> int:
    """Pulsar's ``Murmur3Hash32.makeHash(String)``: the UTF-8 bytes, hashed and masked.

    Unpaired surrogates (which a protobuf string never carries) become ``?`` as Java's
    encoder does.
    """
    return pulsar_hash(text.encode("utf-8", "replace"))
