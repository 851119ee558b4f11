"""Key_Shared routing: sticky keys, key hashes, hash-range selectors, ordering rule.

Reference §6.6 (Key_Shared routing) and §6.5 (STICKY overlap → ConsumerAssignError).

* :func:`sticky_key` — Java ``Commands.peekStickyKey``: ``ordering_key`` if present, else
  ``partition_key`` (base64-decoded when ``partition_key_b64_encoded``), else ``b"NONE_KEY"``.
  A batch entry carries its first message's key in its ``MessageMetadata``.
* :func:`sticky_key_hash` — Pulsar 4 ``StickyKeyConsumerSelectorUtils.makeStickyKeyHash``:
  ``(murmur3(key) & 0x7fffffff) % 65536``, with 0 replaced by 1 (0 means "no hash" in the
  Java dispatchers). Because every AUTO_SPLIT boundary is >= 1, slot 0 and slot 1 always
  route alike, so this equals the Pulsar 3 routing too.
* :class:`AutoSplitSelector` — Java ``HashRangeAutoSplitStickyKeyConsumerSelector``.
* :class:`StickySelector` — Java ``HashRangeExclusiveStickyKeyConsumerSelector``.
* :class:`RecentlyJoinedConsumers` and :class:`KeySharedRouter` — the "classic" (Pulsar
  < 4.0, ``PersistentStickyKeyDispatcherMultipleConsumersClassic``) per-key ordering rule:
  a consumer that joins while older messages are still unacked may only receive messages
  at positions *before* the subscription's read position at the time it joined, until the
  mark-delete position moves past that point. Pulsar 4's default dispatcher replaced this
  with "draining hashes" (PIP-379); we implement the classic rule, which gives the same
  guarantee (no key is delivered out of order across consumer changes) and is simpler.

Positions are ``(ledger_id, entry_id)`` tuples, compared lexicographically.
"""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from magnetar.common.errors import ConsumerAssignError
from magnetar.common.murmur3 import pulsar_hash

NONE_KEY = b"NONE_KEY"
#: Java ``StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE`` (``2 << 15``).
DEFAULT_RANGE_SIZE = 2 << 15
#: The "no hash" marker of Pulsar 4's dispatchers, never produced by :func:`sticky_key_hash`.
STICKY_KEY_HASH_NOT_SET = 0

Position = tuple[int, int]


def sticky_key(
    ordering_key: bytes | None,
    partition_key: str | None,
    partition_key_b64_encoded: bool = False,
) -> bytes:
    """The bytes Key_Shared routes by. Pass ``None`` for absent fields.

    A ``partition_key`` flagged as base64 that does not decode is used as its UTF-8 bytes
    (Java would fail that entry's dispatch; routing it consistently is kinder).
    """
    if ordering_key is not None:
        return ordering_key
    if partition_key is not None:
        if partition_key_b64_encoded:
            try:
                return base64.b64decode(partition_key, validate=True)
            except (binascii.Error, ValueError):
                pass
        return partition_key.encode("utf-8", "replace")
    return NONE_KEY


def sticky_key_hash(key: bytes, range_size: int = DEFAULT_RANGE_SIZE) -> int:
    """Slot of ``key`` in ``[1, range_size)`` (0 is mapped to 1, as Pulsar 4 does)."""
    slot = pulsar_hash(key) % range_size
    return 1 if slot == STICKY_KEY_HASH_NOT_SET else slot


class AutoSplitSelector:
    """AUTO_SPLIT hash ranges (Java ``HashRangeAutoSplitStickyKeyConsumerSelector``).

    State: sorted boundary keys ``k``, each owned by one consumer that serves the slots
    ``(previous_k, k]`` (the first serves ``[0, k]``). The first consumer takes
    ``range_size`` (everything). Each new consumer splits the *largest* range (the first
    one found in key order on ties, sizes measured as ``k - previous_k`` with 0 before the
    first): it takes the lower half, boundary ``k - (k - previous_k) // 2``. Removing a
    consumer drops its boundary so its slots go to the next boundary up, except that the
    owner of the top boundary (``range_size``) is replaced by the owner of the boundary just
    below, which moves up to ``range_size``.

    Raises :class:`ConsumerAssignError` when no range can be split any more.
    """

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        if range_size < 2 or range_size & (range_size - 1):
            raise ValueError("range size must be a power of two >= 2")
        self._range_size = range_size
        self._keys: list[int] = []
        self._owner: dict[int, int] = {}
        self._key_of: dict[int, int] = {}

    @property
    def range_size(self) -> int:
        return self._range_size

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, consumer_id: object) -> bool:
        return consumer_id in self._key_of

    def add(self, consumer_id: int) -> None:
        if consumer_id in self._key_of:
            raise ValueError(f"consumer {consumer_id} already added")
        if not self._keys:
            self._put(self._range_size, consumer_id)
            return
        biggest, size, lower = self._range_size, 0, 0
        for key in self._keys:
            if key - lower > size:
                size, biggest = key - lower, key
            lower = key
        lower_of_biggest = self._lower_key(biggest)
        if biggest - lower_of_biggest <= 1:
            raise ConsumerAssignError(
                f"No more range can assigned to new consumer, assigned consumers {len(self._keys)}"
            )
        self._put(biggest - ((biggest - lower_of_biggest) >> 1), consumer_id)

    def remove(self, consumer_id: int) -> None:
        """Remove a consumer; unknown ids are ignored (as Java does)."""
        key = self._key_of.pop(consumer_id, None)
        if key is None:
            return
        if key == self._range_size and len(self._keys) > 1:
            lower = self._keys[-2]
            heir = self._owner.pop(lower)
            self._keys.pop(-2)
            self._owner[key] = heir
            self._key_of[heir] = key
        else:
            self._keys.remove(key)
            del self._owner[key]

    def select(self, key_hash: int) -> int | None:
        """Consumer owning ``key_hash`` (already in ``[0, range_size)``), or None if empty."""
        if not self._keys:
            return None
        return self._owner[self._keys[bisect.bisect_left(self._keys, key_hash)]]

    def ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Inclusive ranges per consumer as Java reports them: ``[prev + 1, k]`` (first: ``[0, k]``)."""
        result: dict[int, list[tuple[int, int]]] = {}
        start = 0
        for key in self._keys:
            result.setdefault(self._owner[key], []).append((start, key))
            start = key + 1
        return result

    def _lower_key(self, key: int) -> int:
        i = bisect.bisect_left(self._keys, key)
        return self._keys[i - 1] if i > 0 else 0

    def _put(self, key: int, consumer_id: int) -> None:
        bisect.insort(self._keys, key)
        self._owner[key] = consumer_id
        self._key_of[consumer_id] = key


@dataclass(frozen=True, slots=True, order=True)
class HashRange:
    """An inclusive slot range ``[start, end]`` (wire ``IntRange``)."""

    start: int
    end: int

    def overlaps(self, other: HashRange) -> bool:
        return max(self.start, other.start) <= min(self.end, other.end)


class StickySelector:
    """STICKY (client-given) ranges (Java ``HashRangeExclusiveStickyKeyConsumerSelector``).

    A slot no consumer claims routes to nobody (the entry waits for replay). Admission
    raises :class:`ConsumerAssignError` when the ranges are empty, a range has
    ``start > end``, the consumer's own ranges overlap, or a range overlaps another
    consumer's range (reference §6.5).
    """

    def __init__(self, range_size: int = DEFAULT_RANGE_SIZE) -> None:
        if range_size < 1:
            raise ValueError("range size must be > 0")
        self._range_size = range_size
        self._starts: list[int] = []
        self._by_start: dict[int, tuple[HashRange, int]] = {}

    def __len__(self) -> int:
        return len({owner for _, owner in self._by_start.values()})

    def validate(self, ranges: Sequence[HashRange]) -> None:
        """Check ``ranges`` for admission without adding; raises :class:`ConsumerAssignError`."""
        if not ranges:
            raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
        ordered = sorted(ranges, key=lambda r: r.start)
        for i, current in enumerate(ordered):
            if current.start > current.end:
                raise ConsumerAssignError(
                    f"Fixed hash range start > end for range: [{current.start},{current.end}]"
                )
            if i + 1 < len(ordered) and current.overlaps(ordered[i + 1]):
                nxt = ordered[i + 1]
                raise ConsumerAssignError(
                    f"Consumer's own ranges conflict: [{current.start},{current.end}] "
                    f"overlaps with [{nxt.start},{nxt.end}]"
                )
        conflicting = self.conflicting_consumer(ranges)
        if conflicting is not None:
            raise ConsumerAssignError(f"Range conflict with consumer {conflicting}")

    def conflicting_consumer(self, ranges: Iterable[HashRange]) -> int | None:
        """The first existing consumer whose ranges overlap ``ranges``, if any."""
        for new in ranges:
            i = bisect.bisect_right(self._starts, new.start)
            # The range starting at or before new.start, then the one starting after it:
            # existing ranges never overlap each other, so no other can overlap `new`
            # without also overlapping one of these two.
            for j in (i - 1, i):
                if 0 <= j < len(self._starts):
                    existing, owner = self._by_start[self._starts[j]]
                    if existing.overlaps(new):
                        return owner
        return None

    def add(self, consumer_id: int, ranges: Sequence[HashRange]) -> None:
        self.validate(ranges)
        for r in ranges:
            bisect.insort(self._starts, r.start)
            self._by_start[r.start] = (r, consumer_id)

    def remove(self, consumer_id: int) -> None:
        doomed = [s for s, (_, owner) in self._by_start.items() if owner == consumer_id]
        for s in doomed:
            del self._by_start[s]
            self._starts.remove(s)

    def select(self, key_hash: int) -> int | None:
        slot = key_hash % self._range_size
        i = bisect.bisect_right(self._starts, slot) - 1
        if i < 0:
            return None
        r, owner = self._by_start[self._starts[i]]
        return owner if r.start <= slot <= r.end else None

    def ranges(self) -> dict[int, list[tuple[int, int]]]:
        result: dict[int, list[tuple[int, int]]] = {}
        for s in self._starts:
            r, owner = self._by_start[s]
            result.setdefault(owner, []).append((r.start, r.end))
        return result


class RecentlyJoinedConsumers:
    """The classic Key_Shared ordering rule (see module docstring).

    A joining consumer is recorded with the cursor read position at join time, unless out
    of order delivery is allowed, it is the only consumer, or at most one entry is unacked
    (Java: ``getNumberOfEntriesSinceFirstNotAckedMessage() > 1``). A recorded consumer may
    receive only positions ``< its join position`` (for replays: ``<`` the smallest join
    position of all recorded consumers), and is released once its join position is
    ``<=`` the first position after the mark-delete position.
    """

    def __init__(self) -> None:
        # Insertion order == join order; join positions never decrease with it because the
        # read position only moves forward between joins (rewinds happen only with no
        # consumers, when this map is cleared).
        self._joined: dict[int, Position] = {}

    def __contains__(self, consumer_id: object) -> bool:
        return consumer_id in self._joined

    def __len__(self) -> int:
        return len(self._joined)

    def join_position(self, consumer_id: int) -> Position | None:
        return self._joined.get(consumer_id)

    def on_consumer_added(
        self,
        consumer_id: int,
        read_position: Position,
        consumer_count: int,
        entries_since_first_unacked: int,
    ) -> None:
        """Record a join. ``consumer_count`` includes the newcomer."""
        if consumer_count > 1 and entries_since_first_unacked > 1:
            self._joined[consumer_id] = read_position

    def on_consumer_removed(self, consumer_id: int, remaining_consumers: int) -> None:
        self._joined.pop(consumer_id, None)
        if remaining_consumers <= 1:
            self._joined.clear()

    def release(self, first_position_after_mark_delete: Position) -> list[int]:
        """Release consumers whose join position is ``<=`` the given position, in join order.

        Call whenever the mark-delete position moves; returns the released ids (a non-empty
        result means the dispatcher should try reading again).
        """
        released: list[int] = []
        for consumer_id, joined_at in list(self._joined.items()):
            if joined_at > first_position_after_mark_delete:
                break
            del self._joined[consumer_id]
            released.append(consumer_id)
        return released

    def max_entries(
        self, consumer_id: int, positions: Sequence[Position], permits: int, replay: bool
    ) -> int:
        """How many of ``positions`` (ascending) may go to ``consumer_id`` now, given ``permits``."""
        limit = min(len(positions), permits)
        if limit <= 0:
            return 0
        bound = self._joined.get(consumer_id)
        if bound is None:
            return limit
        if replay and self._joined:
            # Replays could carry messages held by other consumers; never give a newer
            # consumer anything beyond the earliest join point.
            bound = min(bound, next(iter(self._joined.values())))
        for i in range(limit):
            if positions[i] >= bound:
                return i
        return limit


@dataclass(slots=True)
class RoutedEntries:
    """Result of :meth:`KeySharedRouter.route`: entries per consumer (in input order) and
    entries that must wait for a later replay (in input order)."""

    by_consumer: dict[int, list[Position]] = field(default_factory=dict)
    deferred: list[Position] = field(default_factory=list)


class KeySharedRouter:
    """Routes read entries of a Key_Shared subscription to consumers.

    Combines a selector (AUTO_SPLIT or STICKY) with the ordering rule (skipped when
    ``allow_out_of_order``). Mirrors Java's classic ``trySendMessagesToConsumers``: entries
    are grouped by selected consumer; each consumer receives the longest admissible prefix
    of its group; the rest, and entries no consumer owns, are deferred for replay.
    """

    def __init__(self, sticky: bool, allow_out_of_order: bool = False) -> None:
        self.sticky = sticky
        self.allow_out_of_order = allow_out_of_order
        self.selector: AutoSplitSelector | StickySelector = (
            StickySelector() if sticky else AutoSplitSelector()
        )
        self.recently_joined = RecentlyJoinedConsumers()
        self._consumers: set[int] = set()

    def add_consumer(
        self,
        consumer_id: int,
        read_position: Position,
        entries_since_first_unacked: int,
        ranges: Sequence[HashRange] = (),
    ) -> None:
        """Admit a consumer; raises :class:`ConsumerAssignError` (state unchanged on error)."""
        if isinstance(self.selector, StickySelector):
            self.selector.add(consumer_id, ranges)
        else:
            self.selector.add(consumer_id)
        self._consumers.add(consumer_id)
        if not self.allow_out_of_order:
            self.recently_joined.on_consumer_added(
                consumer_id, read_position, len(self._consumers), entries_since_first_unacked
            )

    def remove_consumer(self, consumer_id: int) -> None:
        self.selector.remove(consumer_id)
        self._consumers.discard(consumer_id)
        self.recently_joined.on_consumer_removed(consumer_id, len(self._consumers))

    def route(
        self,
        entries: Sequence[tuple[Position, int]],
        permits: Mapping[int, int],
        replay: bool,
        hashes_pending_replay: Collection[int] = (),
    ) -> RoutedEntries:
        """Split ``(position, key_hash)`` entries (ascending positions) among consumers.

        ``permits`` gives each consumer's available permits (missing = 0). For a normal
        (non-replay) read, a consumer any of whose key hashes still has entries waiting for
        replay (``hashes_pending_replay``) receives nothing, so a key never overtakes its own
        earlier messages.
        """
        groups: dict[int, list[tuple[Position, int]]] = {}
        result = RoutedEntries()
        for position, key_hash in entries:
            owner = self.selector.select(key_hash)
            if owner is None:
                result.deferred.append(position)
            else:
                groups.setdefault(owner, []).append((position, key_hash))
        for consumer_id, group in groups.items():
            positions = [p for p, _ in group]
            allowed = max(0, permits.get(consumer_id, 0))
            if not replay and hashes_pending_replay:
                pending = set(hashes_pending_replay)
                if any(h in pending for _, h in group):
                    allowed = 0
            count = self.recently_joined.max_entries(consumer_id, positions, allowed, replay)
            if count > 0:
                result.by_consumer[consumer_id] = positions[:count]
            result.deferred.extend(positions[count:])
        result.deferred.sort()
        return result
