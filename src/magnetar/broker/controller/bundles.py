"""Namespace bundles: the hash ranges of topic names that the controller assigns to brokers.

Facts carried over from Pulsar (``NamespaceBundles``, ``NamespaceBundleFactory``):

* A topic's position is the CRC-32 (the standard zlib/IEEE polynomial, Guava's
  ``Hashing.crc32()``) of the UTF-8 bytes of its full name, ``persistent://t/n/topic``
  (a partition hashes by its own name, ``...-partition-3``), read as an unsigned 32-bit
  number.
* A namespace's bundles are given by sorted boundaries ``b0 < b1 < ... < bn`` with
  ``b0 = 0x00000000`` and ``bn = 0xffffffff``; bundle ``i`` is ``[b_i, b_{i+1})``, except the
  last, which also holds ``0xffffffff`` (closed at both ends).
* ``n`` default bundles (Pulsar's ``defaultNumberOfNamespaceBundles`` is 4) start at
  multiples of ``2**32 // n``: for 4, ``0x00000000 0x40000000 0x80000000 0xc0000000
  0xffffffff``.
* A bundle is named by its range, ``0x%08x_0x%08x`` (``0x40000000_0x80000000``), and
  splits in two at ``lower + (upper - lower) // 2`` (Pulsar's default
  ``range_equally_divide``); a bundle whose range spans 1 or less cannot be split.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.common.errors import MagnetarError
from magnetar.common.names import NamespaceName, TopicName

FULL_LOWER_BOUND = 0x00000000
FULL_UPPER_BOUND = 0xFFFFFFFF
DEFAULT_BUNDLE_COUNT = 4
"""Pulsar's ``defaultNumberOfNamespaceBundles``."""
BUNDLE_COUNT_MAX = 1 << 16
"""Bound on the bundles of one namespace (each is a node in the metadata store)."""


class InvalidBundle(MagnetarError):
    """A bundle range or boundary list that is malformed, or a bundle not in its namespace."""


def topic_hash(topic: str) -> int:
    """The bundle hash of a full topic name: unsigned CRC-32 of its UTF-8 bytes."""
    return zlib.crc32(topic.encode("utf-8", "replace"))


@dataclass(frozen=True, slots=True, order=True)
class BundleRange:
    """``[lower, upper)``, or ``[lower, upper]`` when ``upper`` is ``0xffffffff``."""

    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not FULL_LOWER_BOUND <= self.lower < self.upper <= FULL_UPPER_BOUND:
            raise InvalidBundle(f"invalid bundle range 0x{self.lower:08x}_0x{self.upper:08x}")

    @classmethod
    def parse(cls, name: str) -> BundleRange:
        """Parse ``0x00000000_0x40000000``; raises :class:`InvalidBundle`."""
        parts = name.split("_")
        if len(parts) != 2:
            raise InvalidBundle(f"invalid bundle range {name!r}: expected 0x<lower>_0x<upper>")
        try:
            lower, upper = (int(p, 16) for p in parts if p.lower().startswith("0x"))
        except ValueError:
            raise InvalidBundle(
                f"invalid bundle range {name!r}: expected 0x<lower>_0x<upper>"
            ) from None
        return cls(lower, upper)

    @property
    def name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def contains(self, hash_value: int) -> bool:
        if self.upper == FULL_UPPER_BOUND:
            return self.lower <= hash_value <= self.upper
        return self.lower <= hash_value < self.upper

    @property
    def can_split(self) -> bool:
        return self.upper - self.lower > 1

    def split(self) -> tuple[BundleRange, BundleRange]:
        """The two halves; raises :class:`InvalidBundle` if too small to split."""
        if not self.can_split:
            raise InvalidBundle(f"bundle {self.name} is too small to split")
        middle = self.lower + (self.upper - self.lower) // 2
        return BundleRange(self.lower, middle), BundleRange(middle, self.upper)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True, order=True)
class BundleId:
    """One bundle of one namespace: ``tenant/namespace/0x..._0x...``."""

    namespace: str
    """``tenant/namespace``."""
    range: BundleRange

    @classmethod
    def parse(cls, name: str) -> BundleId:
        """Parse ``tenant/namespace/0x..._0x...``; raises :class:`InvalidBundle` (or
        ``InvalidTopicName`` for a bad namespace)."""
        namespace, sep, range_name = name.rpartition("/")
        if not sep:
            raise InvalidBundle(f"invalid bundle {name!r}: expected <tenant>/<namespace>/<range>")
        return cls(str(NamespaceName.parse(namespace)), BundleRange.parse(range_name))

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.range.name}"

    def __str__(self) -> str:
        return self.name


def default_boundaries(count: int = DEFAULT_BUNDLE_COUNT) -> tuple[int, ...]:
    """Boundaries of ``count`` equal bundles over the whole hash space (as Pulsar makes them
    for a new namespace). Raises :class:`InvalidBundle` outside ``1..BUNDLE_COUNT_MAX``."""
    if not 1 <= count <= BUNDLE_COUNT_MAX:
        raise InvalidBundle(f"a namespace has 1 to {BUNDLE_COUNT_MAX} bundles, not {count}")
    step = (1 << 32) // count
    return (*(i * step for i in range(count)), FULL_UPPER_BOUND)


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """The bundles of one namespace, as its sorted boundaries. Immutable: a split returns a
    new object."""

    namespace: str
    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if (
            len(b) < 2
            or len(b) > BUNDLE_COUNT_MAX + 1
            or b[0] != FULL_LOWER_BOUND
            or b[-1] != FULL_UPPER_BOUND
            or any(x >= y for x, y in itertools.pairwise(b))
        ):
            raise InvalidBundle(
                f"invalid bundle boundaries for {self.namespace}: they must rise strictly "
                f"from 0x00000000 to 0xffffffff, at most {BUNDLE_COUNT_MAX} bundles"
            )

    @classmethod
    def default(cls, namespace: str, count: int = DEFAULT_BUNDLE_COUNT) -> NamespaceBundles:
        return cls(namespace, default_boundaries(count))

    @property
    def bundles(self) -> list[BundleId]:
        b = self.boundaries
        return [BundleId(self.namespace, BundleRange(lo, hi)) for lo, hi in itertools.pairwise(b)]

    def bundle_for_hash(self, hash_value: int) -> BundleId:
        if not FULL_LOWER_BOUND <= hash_value <= FULL_UPPER_BOUND:
            raise ValueError(f"hash {hash_value} outside the 32-bit space")
        b = self.boundaries
        index = min(bisect.bisect_right(b, hash_value) - 1, len(b) - 2)
        return BundleId(self.namespace, BundleRange(b[index], b[index + 1]))

    def bundle_for_topic(self, topic: TopicName | str) -> BundleId:
        """The bundle holding ``topic`` (a full name or :class:`TopicName`); raises
        :class:`InvalidBundle` when the topic is in another namespace."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        if str(name.namespace_name) != self.namespace:
            raise InvalidBundle(f"topic {name} is not in namespace {self.namespace}")
        return self.bundle_for_hash(topic_hash(name.full_name))

    def contains(self, bundle: BundleId) -> bool:
        b = self.boundaries
        i = bisect.bisect_left(b, bundle.range.lower)
        return (
            bundle.namespace == self.namespace
            and i < len(b) - 1
            and b[i] == bundle.range.lower
            and b[i + 1] == bundle.range.upper
        )

    def split(self, bundle: BundleId) -> tuple[NamespaceBundles, tuple[BundleId, BundleId]]:
        """Split ``bundle`` in two; returns the new bundles of the namespace and the halves.
        Raises :class:`InvalidBundle` if it is not one of these bundles or cannot split."""
        if not self.contains(bundle):
            raise InvalidBundle(f"bundle {bundle} is not a bundle of {self.namespace}")
        if len(self.boundaries) > BUNDLE_COUNT_MAX:
            raise InvalidBundle(f"{self.namespace} already has {BUNDLE_COUNT_MAX} bundles")
        low, high = bundle.range.split()
        boundaries = tuple(sorted((*self.boundaries, low.upper)))
        return (
            NamespaceBundles(self.namespace, boundaries),
            (BundleId(self.namespace, low), BundleId(self.namespace, high)),
        )

    def to_names(self) -> list[str]:
        """Boundaries as Pulsar's ``BundlesData.boundaries`` spells them (``0x%08x``)."""
        return [f"0x{x:08x}" for x in self.boundaries]

    @classmethod
    def from_names(cls, namespace: str, names: Sequence[str]) -> NamespaceBundles:
        try:
            return cls(namespace, tuple(int(n, 16) for n in names))
        except (ValueError, TypeError):
            raise InvalidBundle(f"invalid bundle boundaries for {namespace}: {names!r}") from None
