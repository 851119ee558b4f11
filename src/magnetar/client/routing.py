"""Choosing the partition of an outgoing message, sans I/O.

Modes follow the official client:

* ``RoundRobinDistribution`` (default): a message with a key goes to ``hash(key) % n``;
  keyless messages rotate over the partitions, switching after ``switch_every`` messages so
  batches stay large (the C++ router switches per batch for the same reason).
* ``UseSinglePartition``: keyed messages by hash; keyless ones all to one partition chosen
  at random when the producer is created.
* ``CustomPartition``: a callable ``router(message, num_partitions) -> int``.

Hashes: ``BoostHash`` (the C++ and Python clients' default: ``boost::hash<std::string>`` of
Boost >= 1.81 on 64-bit, masked to 31 bits — checked against the official wheel, which
does not let users choose), ``JavaStringHash`` (Java ``String.hashCode`` masked
non-negative, the Java client's default) or ``Murmur3_32Hash`` (Pulsar's Murmur3 x86_32).
Each gives the same partition as an official client using the same scheme.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from typing import Any

from magnetar.common.murmur3 import pulsar_hash_str


class PartitionsRoutingMode(enum.IntEnum):
    RoundRobinDistribution = 0
    UseSinglePartition = 1
    CustomPartition = 2


class HashingScheme(enum.IntEnum):
    """Numbered as the C++ client's ``ProducerConfiguration::HashingScheme``."""

    Murmur3_32Hash = 0
    BoostHash = 1
    JavaStringHash = 2


_U64 = (1 << 64) - 1
_BOOST_Q = 0x9E3779B97F4A7C15
_BOOST_K = 0xDF442D22CE4859B9  # _BOOST_Q * _BOOST_K == 1 (mod 2**64)


def _mulx(x: int, y: int) -> int:
    r = x * y
    return (r & _U64) ^ (r >> 64)


def boost_hash(text: str) -> int:
    """``boost::hash<std::string>`` (Boost >= 1.81, 64-bit ``size_t``) of the UTF-8 bytes,
    masked to ``[0, 2**31)`` as the C++ client's ``BoostHash::makeHash`` does."""
    p = text.encode()
    n = len(p)
    w = _mulx(_BOOST_Q, _BOOST_K)  # seed 0
    h = w ^ n
    i = 0
    while n >= 8:
        w = (w + _BOOST_Q) & _U64
        h ^= _mulx((int.from_bytes(p[i : i + 8], "little") + w) & _U64, _BOOST_K)
        i += 8
        n -= 8
    v = 0
    if n >= 4:
        v = int.from_bytes(p[i + n - 4 : i + n], "little") << ((n - 4) * 8) | int.from_bytes(
            p[i : i + 4], "little"
        )
    elif n >= 1:
        x1 = (n - 1) & 2
        x2 = n >> 1
        v = p[i + x1] << (x1 * 8) | p[i + x2] << (x2 * 8) | p[i]
    w = (w + _BOOST_Q) & _U64
    h ^= _mulx((v + w) & _U64, _BOOST_K)
    return _mulx((h + w) & _U64, _BOOST_K) & 0x7FFFFFFF


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()`` of ``text`` (over UTF-16 code units), masked to
    ``[0, 2**31)`` as the Pulsar clients do."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def key_hash(scheme: HashingScheme, key: str) -> int:
    if scheme == HashingScheme.BoostHash:
        return boost_hash(key)
    if scheme == HashingScheme.Murmur3_32Hash:
        return pulsar_hash_str(key)
    return java_string_hash(key)


CustomRouter = Callable[[Any, int], int]


class PartitionRouter:
    """Picks a partition index for each message."""

    def __init__(
        self,
        mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        *,
        hashing_scheme: HashingScheme = HashingScheme.BoostHash,
        switch_every: int = 1000,
        custom: CustomRouter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if mode == PartitionsRoutingMode.CustomPartition and custom is None:
            raise ValueError("CustomPartition needs a message_router callable")
        self.mode = mode
        self.hashing_scheme = hashing_scheme
        self.switch_every = max(1, switch_every)
        self.custom = custom
        rng = rng if rng is not None else random.Random()
        self._seed = rng.randrange(1 << 30)
        self._count = 0

    def choose(self, num_partitions: int, partition_key: str | None, message: Any = None) -> int:
        """Partition index in ``[0, num_partitions)``. Raises ValueError if a custom router
        returns an index out of range."""
        if self.mode == PartitionsRoutingMode.CustomPartition:
            assert self.custom is not None
            index = self.custom(message, num_partitions)
            if not 0 <= index < num_partitions:
                raise ValueError(f"custom router returned {index} for {num_partitions} partitions")
            return index
        if partition_key:
            return key_hash(self.hashing_scheme, partition_key) % num_partitions
        if self.mode == PartitionsRoutingMode.UseSinglePartition:
            return self._seed % num_partitions
        index = (self._seed + self._count // self.switch_every) % num_partitions
        self._count += 1
        return index
