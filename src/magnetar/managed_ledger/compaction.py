"""Hook for topic compaction: a compacted view (key -> latest entry) of a managed ledger.

Interface only; the broker's compactor builds it. A compacted view covers the log up to
its ``horizon``; readers of a compacted subscription read the view first and then continue
in the managed ledger after the horizon.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from magnetar.managed_ledger.position import Position


@dataclass(frozen=True, slots=True)
class CompactedEntry:
    key: bytes
    position: Position
    data: bytes


class CompactedView(Protocol):
    @property
    def horizon(self) -> Position:
        """Every entry at or before this position is reflected in the view."""
        ...

    async def get(self, key: bytes) -> CompactedEntry | None:
        """The latest entry for ``key`` at or before the horizon (``None``: absent or
        deleted by a tombstone)."""
        ...

    async def read(self, after: Position, max_entries: int) -> Sequence[CompactedEntry]:
        """Entries of the view after ``after``, in position order, at most ``max_entries``."""
        ...
