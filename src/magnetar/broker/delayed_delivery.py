"""Delayed delivery: entries with ``deliver_at_time`` held back until due (reference §6.6).

Java ``InMemoryDelayedDeliveryTracker`` semantics, for Shared and Key_Shared subscriptions
only (:func:`applies_to`; other types deliver at once and ignore ``deliver_at_time``):

* :meth:`DelayedDeliveryTracker.add` returns False — deliver now — when ``deliver_at_ms``
  is not after the cutoff, which is ``now`` when ``strict`` and ``now + tick_ms`` otherwise
  (Java ``isDelayedDeliveryDeliverAtTimeStrict=false``, ``delayedDeliveryTickTimeMillis=1000``:
  a message due within the next tick is not worth holding);
* :meth:`DelayedDeliveryTracker.pop_due` returns held positions due by the cutoff, earliest
  first (ties by position);
* :attr:`DelayedDeliveryTracker.next_delivery_ms` tells the caller when to look again.

Bounded: ``max_messages`` held positions. When :attr:`DelayedDeliveryTracker.is_full`,
:meth:`DelayedDeliveryTracker.add` raises :class:`DelayedDeliveryFull`; the dispatcher must
stop reading new entries until some are delivered (backpressure, nothing is lost: the
entries stay unacknowledged in the log). The clock is injected.
"""

from __future__ import annotations

import heapq

from magnetar.broker.subscription_rules import INDIVIDUAL_ACK_TYPES, SubType
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError

Position = tuple[int, int]
DEFAULT_TICK_MS = 1000
DEFAULT_MAX_MESSAGES = 1_000_000


class DelayedDeliveryFull(MagnetarError):
    """The tracker holds ``max_messages`` positions; stop reading until some are due."""


def applies_to(sub_type: SubType) -> bool:
    """Whether ``deliver_at_time`` is honoured on a subscription of this type."""
    return sub_type in INDIVIDUAL_ACK_TYPES


class DelayedDeliveryTracker:
    def __init__(
        self,
        clock: Clock,
        tick_ms: int = DEFAULT_TICK_MS,
        strict: bool = False,
        max_messages: int = DEFAULT_MAX_MESSAGES,
    ) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        self._clock = clock
        self._tick_ms = tick_ms
        self._strict = strict
        self._max = max_messages
        self._heap: list[tuple[int, Position]] = []
        self._held: set[Position] = set()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, position: object) -> bool:
        return position in self._held

    @property
    def is_full(self) -> bool:
        return len(self._heap) >= self._max

    def cutoff_ms(self) -> int:
        now_ms = self._clock.now_ms()
        return now_ms if self._strict else now_ms + self._tick_ms

    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """Hold ``position`` until ``deliver_at_ms``; False means "not delayed, deliver now".

        Adding a position already held is a no-op returning True.
        """
        if deliver_at_ms < 0 or deliver_at_ms <= self.cutoff_ms():
            return False
        if position in self._held:
            return True
        if self.is_full:
            raise DelayedDeliveryFull(f"{len(self._heap)} delayed messages held")
        heapq.heappush(self._heap, (deliver_at_ms, position))
        self._held.add(position)
        return True

    def has_due(self) -> bool:
        return bool(self._heap) and self._heap[0][0] <= self.cutoff_ms()

    def pop_due(self, max_messages: int) -> list[Position]:
        """Remove and return up to ``max_messages`` due positions, earliest first."""
        cutoff = self.cutoff_ms()
        due: list[Position] = []
        while self._heap and len(due) < max_messages and self._heap[0][0] <= cutoff:
            _, position = heapq.heappop(self._heap)
            self._held.discard(position)
            due.append(position)
        return due

    @property
    def next_delivery_ms(self) -> int | None:
        """The earliest held deliver-at time, or None when nothing is held."""
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()
        self._held.clear()
