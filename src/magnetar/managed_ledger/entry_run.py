"""A run of entries read from the log in one call: positions, bytes and message counts in
three parallel lists.

The dispatch path reads, sends and remembers entries a run at a time: one read of the cache
per run, one loop that encodes a MESSAGE frame per entry, one write, one update of the
consumer's pending entries. Per entry it holds no object of its own (an ``Entry`` per entry
cost an object and several calls on every dispatched message).

The positions of a run ascend; they need not be contiguous (acknowledged entries found
after a read's await are filtered out). Lists are owned by the run; ``data`` items are the
log's shared bytes, never copied: do not mutate.
"""

from __future__ import annotations

from itertools import repeat
from typing import Final

from magnetar.common.frozen_struct import frozen_struct
from magnetar.managed_ledger.position import Position

_tuple_new: Final = tuple.__new__


@frozen_struct(kw_only=False)
class Entry:
    """One entry read from the log. ``data`` is shared, never copied; do not mutate.
    ``messages``: the entry's message count as its appender gave it, when the entry came
    from the cache of appended entries (None: not known without parsing ``data``)."""

    position: Position
    data: bytes
    messages: int | None = None


def positions_of(ledger_id: int, first: int, count: int) -> list[Position]:
    """``Position(ledger_id, first) .. Position(ledger_id, first + count - 1)``, built in
    one C loop (``Position(...)`` is a Python call per entry); the few of a short run
    without the loop's set-up, which costs more than they do below eight."""
    if count == 1:
        return [_tuple_new(Position, (ledger_id, first))]
    if count < 8:
        return [_tuple_new(Position, (ledger_id, e)) for e in range(first, first + count)]
    return list(
        map(_tuple_new, repeat(Position), zip(repeat(ledger_id), range(first, first + count)))
    )


class EntryRun:
    """Entries of one read, in log order."""

    __slots__ = ("data", "messages", "positions")

    def __init__(
        self, positions: list[Position], data: list[bytes], messages: list[int | None]
    ) -> None:
        assert len(positions) == len(data) == len(messages)
        self.positions = positions
        self.data = data
        self.messages = messages
        """Each entry's message count as its appender gave it (None: not known without
        parsing the entry's metadata; entries read from bookies)."""

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def counts_known(self) -> bool:
        """Whether every entry's message count is known (no metadata to parse; a count of
        0 counts as unknown)."""
        return all(self.messages)
