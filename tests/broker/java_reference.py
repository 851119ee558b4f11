"""Slow, direct transcriptions of Java behaviour used as oracles by the broker tests."""

from __future__ import annotations

import functools

MASK32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & MASK32


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & MASK32
    k1 = _rotl(k1, 15)
    return (k1 * 0x1B873593) & MASK32


def java_murmur3_make_hash0(data: bytes) -> int:
    """Pulsar's Murmur3_32Hash.makeHash0 step by step, as an unsigned 32-bit value."""
    h1 = 0
    n_blocks = len(data) // 4
    for i in range(n_blocks):
        k1 = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        h1 ^= _mix_k1(k1)
        h1 = _rotl(h1, 13)
        h1 = (h1 * 5 + 0xE6546B64) & MASK32
    k1 = 0
    for i, byte in enumerate(data[4 * n_blocks :]):
        k1 ^= byte << (i * 8)
    # Java applies mixK1 to the tail even when it is empty (mixK1(0) == 0).
    h1 ^= _mix_k1(k1)
    h1 ^= len(data) & MASK32
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & MASK32
    h1 ^= h1 >> 16
    return h1


def java_make_hash(data: bytes) -> int:
    return java_murmur3_make_hash0(data) & 0x7FFFFFFF


def java_string_compare(a: str, b: str) -> int:
    """Java String.compareTo over UTF-16 code units."""
    ua = a.encode("utf-16-le", "surrogatepass")
    ub = b.encode("utf-16-le", "surrogatepass")
    ca = [ua[i] | (ua[i + 1] << 8) for i in range(0, len(ua), 2)]
    cb = [ub[i] | (ub[i + 1] << 8) for i in range(0, len(ub), 2)]
    for x, y in zip(ca, cb, strict=False):
        if x != y:
            return x - y
    return len(ca) - len(cb)


java_string_key = functools.cmp_to_key(java_string_compare)
