"""The consumer's receive queue and its flow-permit accounting, sans I/O.

The broker may send only as many messages as it was given permits (counted per message,
batch members included). The queue starts by granting ``receiver_queue_size`` permits;
each message the application takes, and each message the client drops itself (already
acked batch indexes, messages before a reader's start id, corrupt entries), earns one
permit back. Earned permits are returned to the broker in one FLOW once they reach half
the queue size, as the C++ client does. After a reconnect or seek the queue is cleared and
the full window is granted again.

``receiver_queue_size == 0`` (zero queue) grants one permit per :meth:`demand` instead.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class ReceiveQueue(Generic[T]):
    def __init__(self, receiver_queue_size: int = 1000) -> None:
        if receiver_queue_size < 0:
            raise ValueError("receiver_queue_size must not be negative")
        self.receiver_queue_size = receiver_queue_size
        self._items: deque[T] = deque()
        self._earned = 0
        self._threshold = max(1, receiver_queue_size // 2)

    def __len__(self) -> int:
        return len(self._items)

    def initial_permits(self) -> int:
        """Permits to grant after (re)subscribing; resets the earned count."""
        self._earned = 0
        return self.receiver_queue_size

    def push(self, item: T) -> None:
        self._items.append(item)

    def push_many(self, items: list[T]) -> None:
        self._items.extend(items)

    def pop(self) -> tuple[T | None, int]:
        """The next item (None if empty) and the permits to send now (0: not yet)."""
        items = self._items
        if not items:
            return None, 0
        item = items.popleft()
        # _earn(1) inlined: this runs once per received message.
        if self.receiver_queue_size:
            earned = self._earned + 1
            if earned >= self._threshold:
                self._earned = 0
                return item, earned
            self._earned = earned
        return item, 0

    def pop_many(self, max_items: int) -> tuple[list[T], int]:
        items = self._items
        n = min(max_items, len(items))
        out = [items.popleft() for _ in range(n)]
        return out, (self._earn(n) if n else 0)

    def dropped(self, count: int) -> int:
        """Messages the client discarded itself; returns permits to send now."""
        return self._earn(count) if count else 0

    def demand(self) -> int:
        """Zero-queue mode: one permit per receive call."""
        return 1 if self.receiver_queue_size == 0 else 0

    def _earn(self, n: int) -> int:
        if self.receiver_queue_size == 0:
            return 0
        self._earned += n
        if self._earned >= self._threshold:
            earned = self._earned
            self._earned = 0
            return earned
        return 0

    def clear(self) -> list[T]:
        """Drop everything queued (reconnect, seek); returns what was dropped."""
        dropped = list(self._items)
        self._items.clear()
        self._earned = 0
        return dropped
