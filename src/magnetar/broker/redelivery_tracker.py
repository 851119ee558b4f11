"""Redelivery counts per entry (reference §6.7, §6.9; Java ``InMemoryRedeliveryTracker``).

Only Shared and Key_Shared subscriptions track counts; Exclusive and Failover dispatchers
always send ``redelivery_count = 0`` (:class:`DisabledRedeliveryTracker`).

* explicit redelivery (REDELIVER_UNACKNOWLEDGED_MESSAGES with message ids, i.e. nack or ack
  timeout): :meth:`RedeliveryTracker.increment` for each entry;
* replay after a consumer disconnect: :meth:`RedeliveryTracker.add_if_absent` — the count
  is *not* incremented;
* ack: :meth:`RedeliveryTracker.remove` / :meth:`RedeliveryTracker.remove_up_to` (mark-delete);
* no consumers left: :meth:`RedeliveryTracker.clear`.

MESSAGE frames carry :meth:`RedeliveryTracker.count` (0 if untracked; omit the field at 0).

Bounded: at most ``max_tracked_entries`` entries; past that the lowest positions (the
oldest, most likely already acknowledged by a mark-delete the shell has not reported) are
forgotten first, which only ever lowers a count to 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.broker.subscription_rules import INDIVIDUAL_ACK_TYPES, SubType

Position = tuple[int, int]
DEFAULT_MAX_TRACKED_ENTRIES = 1_000_000


class RedeliveryTracker:
    def __init__(self, max_tracked_entries: int = DEFAULT_MAX_TRACKED_ENTRIES) -> None:
        if max_tracked_entries < 1:
            raise ValueError("max_tracked_entries must be >= 1")
        self._max = max_tracked_entries
        self._counts: dict[Position, int] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def increment(self, position: Position) -> int:
        """Count one more explicit redelivery of ``position``; returns the new count."""
        count = self._counts.get(position, 0) + 1
        self._store(position, count)
        return count

    def add_if_absent(self, position: Position) -> None:
        """Track ``position`` with count 0 if untracked (disconnect replay)."""
        if position not in self._counts:
            self._store(position, 0)

    def count(self, position: Position) -> int:
        return self._counts.get(position, 0)

    def remove(self, position: Position) -> None:
        self._counts.pop(position, None)

    def remove_many(self, positions: Iterable[Position]) -> None:
        for position in positions:
            self._counts.pop(position, None)

    def remove_up_to(self, mark_delete: Position) -> None:
        """Forget every position ``<= mark_delete``."""
        self._counts = {p: c for p, c in self._counts.items() if p > mark_delete}

    def clear(self) -> None:
        self._counts.clear()

    def _store(self, position: Position, count: int) -> None:
        if position not in self._counts and len(self._counts) >= self._max:
            del self._counts[min(self._counts)]
        self._counts[position] = count


class DisabledRedeliveryTracker(RedeliveryTracker):
    """Exclusive/Failover: tracks nothing, every count is 0. Holds no state, so every such
    subscription shares one (:data:`_DISABLED`)."""

    def increment(self, position: Position) -> int:
        return 0

    def add_if_absent(self, position: Position) -> None:
        return None

    def remove_up_to(self, mark_delete: Position) -> None:
        return None


_DISABLED = DisabledRedeliveryTracker()


def redelivery_tracker_for(sub_type: SubType) -> RedeliveryTracker:
    """The tracker a subscription of ``sub_type`` uses."""
    if sub_type in INDIVIDUAL_ACK_TYPES:
        return RedeliveryTracker()
    return _DISABLED
