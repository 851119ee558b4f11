"""The consumer's receive queue and its flow-permit accounting, sans I/O.

The broker may send only as many messages as it was given permits (counted per message,
batch members included). The queue starts by granting ``receiver_queue_size`` permits;
each message the application takes, and each message the client drops itself (already
acked batch indexes, messages before a reader's start id, corrupt entries), earns one
permit back. Earned permits are returned to the broker in one FLOW once they reach half
the queue size, as the C++ client does. After a reconnect or seek the queue is cleared and
the full window is granted again.

``receiver_queue_size == 0`` (zero queue) grants one permit per :meth:`demand` instead.

A :class:`Run` pushed with :meth:`push_run` stands for several items (the messages of one
batched entry) that are built one at a time as they are popped: queued messages then cost
no objects, so the garbage collector has nothing to scan while they wait.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Run(Generic[T]):
    """Items queued as one, built on demand. ``remaining`` (> 0 when pushed) counts the
    items not taken yet; :meth:`take` builds the next one and decrements it."""

    __slots__ = ("remaining",)

    def __init__(self, remaining: int) -> None:
        self.remaining = remaining

    def take(self) -> T:
        """The next item (only while ``remaining`` > 0). Subclasses build it."""
        raise NotImplementedError

    def take_all(self) -> list[T]:
        """Every remaining item, in order."""
        return [self.take() for _ in range(self.remaining)]


class ReceiveQueue(Generic[T]):
    def __init__(self, receiver_queue_size: int = 1000) -> None:
        if receiver_queue_size < 0:
            raise ValueError("receiver_queue_size must not be negative")
        self.receiver_queue_size = receiver_queue_size
        self._items: deque[T | Run[T]] = deque()
        self._count = 0  # items queued, a run counting as its remaining items
        self._earned = 0
        self._threshold = max(1, receiver_queue_size // 2)

    def __len__(self) -> int:
        return self._count

    def initial_permits(self) -> int:
        """Permits to grant after (re)subscribing; resets the earned count."""
        self._earned = 0
        return self.receiver_queue_size

    def push(self, item: T) -> None:
        self._items.append(item)
        self._count += 1

    def push_many(self, items: list[T]) -> None:
        self._items.extend(items)
        self._count += len(items)

    def push_run(self, run: Run[T]) -> None:
        """Queue ``run.remaining`` items, built as they are popped."""
        if run.remaining > 0:
            self._items.append(run)
            self._count += run.remaining

    def pop(self) -> tuple[T | None, int]:
        """The next item (None if empty) and the permits to send now (0: not yet)."""
        items = self._items
        if not items:
            return None, 0
        item = items[0]
        if isinstance(item, Run):  # a plain class: a cheap check, once per message
            run = item
            item = run.take()
            if not run.remaining:
                items.popleft()
        else:
            items.popleft()
        self._count -= 1
        # _earn(1) inlined: this runs once per received message.
        if self.receiver_queue_size:
            earned = self._earned + 1
            if earned >= self._threshold:
                self._earned = 0
                return item, earned
            self._earned = earned
        return item, 0

    def pop_many(self, max_items: int) -> tuple[list[T], int]:
        out: list[T] = []
        permits = 0
        for _ in range(min(max_items, self._count)):
            item, earned = self.pop()
            assert item is not None
            out.append(item)
            permits += earned
        return out, permits

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

    def clear(self) -> list[T | Run[T]]:
        """Drop everything queued (reconnect, seek); returns what was dropped (items, and
        runs with the items they had not built yet)."""
        dropped = list(self._items)
        self._items.clear()
        self._count = 0
        self._earned = 0
        return dropped
