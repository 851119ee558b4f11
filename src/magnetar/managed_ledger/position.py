"""Positions in a managed ledger: ``(ledger_id, entry_id)``, ordered as tuples.

A position names one entry of one ledger. Positions order first by ledger id (ledgers are
created with increasing ids, so this is log order) and then by entry id. The entry id ``-1``
is a valid *boundary* position meaning "before the first entry of that ledger"; mark-delete
positions use it (``(L, -1)``: everything before ledger ``L`` is acknowledged), as Pulsar does.

``Position`` is a ``NamedTuple`` so comparisons and hashing run in C: the acknowledgement
path compares positions millions of times per second.
"""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """One entry (or a boundary before a ledger's first entry when ``entry_id == -1``)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Inverse of ``str()``: ``"12:34"`` -> ``Position(12, 34)``. Raises ``ValueError``."""
        ledger, _, entry = text.partition(":")
        if not _:
            raise ValueError(f"not a position: {text!r}")
        return cls(int(ledger), int(entry))


EARLIEST = Position(-1, -1)
"""Sentinel before every real position (seek target meaning "oldest available")."""

LATEST = Position(2**63 - 1, 2**63 - 1)
"""Sentinel after every real position (seek target meaning "after the last entry")."""
