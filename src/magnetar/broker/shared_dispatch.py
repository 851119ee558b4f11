"""Shared-subscription consumer choice: round-robin by permits with priority levels.

Reference §6.6: each entry goes to exactly one consumer that has permits, round-robin,
highest priority (lowest ``priority_level``) first, falling back to lower priorities when
the higher ones have no permits. Permits count *messages*; a whole entry is sent while the
consumer has permits > 0 and costs its message count, so permits may go negative.

The choice follows Java ``AbstractDispatcherMultipleConsumers.getNextConsumer``: consumers
are kept sorted by priority (stable: same priority in arrival order); a round-robin index
remembers the slot after the last served consumer; each call first looks for an available
consumer of a strictly better priority level (from the front of the list), then continues
round-robin within the current level, then falls to the first available consumer of a lower
level. "Available" means permits > 0 and not blocked (e.g. on max unacked messages).

One deliberate generalisation: Java only looks for better levels when the current level is
not 0, which is the same for the non-negative priorities clients send; we compare with the
best level present, so negative levels also behave as the reference states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Java ``dispatcherMaxRoundRobinBatchSize`` default: entries given to one consumer per pick.
DEFAULT_MAX_ROUND_ROBIN_BATCH_ENTRIES = 20


@dataclass(slots=True)
class _Member:
    consumer_id: int
    priority_level: int
    permits: int = 0
    blocked: bool = False

    @property
    def available(self) -> bool:
        return self.permits > 0 and not self.blocked


class SharedConsumerRing:
    """Consumers of one Shared subscription, with their permits."""

    def __init__(
        self, max_round_robin_batch_entries: int = DEFAULT_MAX_ROUND_ROBIN_BATCH_ENTRIES
    ) -> None:
        if max_round_robin_batch_entries < 1:
            raise ValueError("max_round_robin_batch_entries must be >= 1")
        self._batch_max = max_round_robin_batch_entries
        self._members: list[_Member] = []
        self._rr_index = 0

    def __len__(self) -> int:
        return len(self._members)

    @property
    def order(self) -> list[int]:
        """Consumer ids in selection order."""
        return [m.consumer_id for m in self._members]

    def add(self, consumer_id: int, priority_level: int = 0) -> None:
        if any(m.consumer_id == consumer_id for m in self._members):
            raise ValueError(f"consumer {consumer_id} already added")
        self._members.append(_Member(consumer_id, priority_level))
        # Stable sort: same-priority consumers stay in arrival order (Java re-sorts by
        # priority only when the newcomer has a better level than the previous last one).
        self._members.sort(key=lambda m: m.priority_level)

    def remove(self, consumer_id: int) -> None:
        """Remove a consumer (unknown ids are ignored). Its permits vanish with it."""
        self._members = [m for m in self._members if m.consumer_id != consumer_id]

    def add_permits(self, consumer_id: int, permits: int) -> None:
        """A FLOW arrived: add ``permits`` (messages)."""
        self._member(consumer_id).permits += permits

    def consume_permits(self, consumer_id: int, messages: int) -> None:
        """Messages were sent to this consumer; permits may go negative."""
        self._member(consumer_id).permits -= messages

    def permits(self, consumer_id: int) -> int:
        return self._member(consumer_id).permits

    def set_blocked(self, consumer_id: int, blocked: bool) -> None:
        self._member(consumer_id).blocked = blocked

    def has_available(self) -> bool:
        return any(m.available for m in self._members)

    def next_consumer(self) -> int | None:
        """The next consumer to serve, or None if nobody has permits."""
        members = self._members
        if not members:
            return None
        if self._rr_index >= len(members):
            self._rr_index = 0
        current_level = members[self._rr_index].priority_level
        if members[0].priority_level < current_level:
            for i in range(self._rr_index):
                if members[i].priority_level >= current_level:
                    break
                if members[i].available:
                    self._rr_index = i + 1
                    return members[i].consumer_id
        index = self._same_or_lower_level(self._rr_index)
        if index < 0:
            return None
        self._rr_index = index + 1
        return members[index].consumer_id

    def assign(self, message_counts: Sequence[int]) -> list[tuple[int, list[int]]]:
        """Distribute entries (given by their message counts) and charge the permits.

        Returns ``(consumer_id, entry indices)`` groups in dispatch order; indices ascend
        across groups. Entries left over when no consumer has permits are not listed (the
        caller keeps them for the next round). Each pick takes up to
        ``max_round_robin_batch_entries`` entries while the consumer still has permits > 0.
        """
        groups: list[tuple[int, list[int]]] = []
        i = 0
        while i < len(message_counts):
            consumer_id = self.next_consumer()
            if consumer_id is None:
                break
            member = self._member(consumer_id)
            taken: list[int] = []
            while i < len(message_counts) and member.permits > 0 and len(taken) < self._batch_max:
                member.permits -= message_counts[i]
                taken.append(i)
                i += 1
            groups.append((consumer_id, taken))
        return groups

    def _same_or_lower_level(self, start: int) -> int:
        members = self._members
        level = members[start].priority_level
        level_begin = next(i for i, m in enumerate(members) if m.priority_level == level)
        level_end = next(
            (i for i in range(start, len(members)) if members[i].priority_level != level),
            len(members),
        )
        # Round-robin inside the level: start .. level_end, then level_begin .. start.
        scan: list[int] = [*range(start, level_end), *range(level_begin, start)]
        for i in scan:
            if members[i].available:
                return i
        for i in range(level_end, len(members)):
            if members[i].available:
                return i
        return -1

    def _member(self, consumer_id: int) -> _Member:
        for m in self._members:
            if m.consumer_id == consumer_id:
                return m
        raise KeyError(f"unknown consumer {consumer_id}")
