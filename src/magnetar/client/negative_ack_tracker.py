"""Negative acks, sans I/O: positions to redeliver after a delay.

A nack schedules its entry for redelivery ``delay_ms`` later (the consumer's
``negative_ack_redelivery_delay_ms`` or a per-call delay). Re-nacking moves the deadline.
:meth:`tick` returns the due positions in deadline order.
"""

from __future__ import annotations

import heapq

Position = tuple[int, int]


class NegativeAckTracker:
    def __init__(self, delay_ms: int = 60_000, *, max_tracked: int = 1_000_000) -> None:
        if delay_ms < 0:
            raise ValueError("delay_ms must not be negative")
        self.delay_ms = delay_ms
        self.max_tracked = max_tracked
        self.deadline_ms: dict[Position, int] = {}
        """Pending positions and their redelivery deadlines (read-only for callers: a
        cheap emptiness test on the ack path)."""
        self._heap: list[tuple[int, Position]] = []

    def __len__(self) -> int:
        return len(self.deadline_ms)

    def add(self, position: Position, now_ms: int, delay_ms: int | None = None) -> None:
        if len(self.deadline_ms) >= self.max_tracked and position not in self.deadline_ms:
            raise OverflowError("too many negatively acknowledged messages pending")
        deadline = now_ms + (self.delay_ms if delay_ms is None else delay_ms)
        self.deadline_ms[position] = deadline
        heapq.heappush(self._heap, (deadline, position))

    def remove(self, position: Position) -> None:
        """Forget a position (it was acked after all); its heap entry is dropped lazily."""
        self.deadline_ms.pop(position, None)

    def next_deadline_ms(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self.deadline_ms.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def tick(self, now_ms: int) -> list[Position]:
        due: list[Position] = []
        heap = self._heap
        while True:
            self._drop_stale()
            if not heap or heap[0][0] > now_ms:
                return due
            _, position = heapq.heappop(heap)
            del self.deadline_ms[position]
            due.append(position)

    def clear(self) -> None:
        self.deadline_ms.clear()
        self._heap.clear()
