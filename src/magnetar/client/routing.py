"""Choosing the partition of an outgoing message, sans I/O.

Modes follow the official client:

* ``RoundRobinDistribution`` (default): a message with a key goes to ``hash(key) % n``;
  keyless messages rotate over the partitions, switching after ``switch_every`` messages so
  batches stay large (the C++ router switches per batch for the same reason).
* ``UseSinglePartition``: keyed messages by hash; keyless ones all to one partition chosen
  at random when the producer is created.
* ``CustomPartition``: a callable ``router(message, num_partitions) -> int``.

Hashes: ``JavaStringHash`` (Java ``String.hashCode`` masked non-negative, the Java client's
default) or ``Murmur3_32Hash`` (Pulsar's Murmur3 x86_32). Both give the same partition
as a Java or C++ client using the same scheme.
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
    JavaStringHash = 0
    Murmur3_32Hash = 1


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()`` of ``text`` (over UTF-16 code units), masked to
    ``[0, 2**31)`` as the Pulsar clients do."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


def key_hash(scheme: HashingScheme, key: str) -> int:
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
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
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
