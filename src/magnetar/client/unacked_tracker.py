"""Ack timeout, sans I/O: messages handed to the application but not acked in time.

Every tracked message shares one timeout, so deadlines are increasing in insertion order
and an insertion-ordered dict gives O(1) add, remove and expiry. :meth:`tick` returns the
positions to redeliver; the shell sends REDELIVER_UNACKNOWLEDGED_MESSAGES for them.
Bounded by ``max_tracked`` (the consumer's receive limit keeps it far below).
"""

from __future__ import annotations

from collections import OrderedDict

Position = tuple[int, int]


class UnackedMessageTracker:
    def __init__(self, timeout_ms: int, *, max_tracked: int = 1_000_000) -> None:
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive (0 disables the tracker)")
        self.timeout_ms = timeout_ms
        self.max_tracked = max_tracked
        self._deadlines: OrderedDict[Position, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._deadlines)

    def add(self, position: Position, now_ms: int) -> None:
        """Track an entry handed to the application (batch messages share their entry)."""
        if position in self._deadlines:
            return
        if len(self._deadlines) >= self.max_tracked:
            self._deadlines.popitem(last=False)
        self._deadlines[position] = now_ms + self.timeout_ms

    def remove(self, position: Position) -> None:
        self._deadlines.pop(position, None)

    def remove_up_to(self, position: Position) -> None:
        """Forget everything at or below ``position`` (a cumulative ack)."""
        for p in [p for p in self._deadlines if p <= position]:
            del self._deadlines[p]

    def tick(self, now_ms: int) -> list[Position]:
        """Positions whose timeout passed; they are no longer tracked."""
        due: list[Position] = []
        deadlines = self._deadlines
        while deadlines:
            position, deadline = next(iter(deadlines.items()))
            if deadline > now_ms:
                break
            deadlines.popitem(last=False)
            due.append(position)
        return due

    def clear(self) -> None:
        self._deadlines.clear()
