"""Ledger metadata: what the metadata store keeps about one ledger, at ``/ledgers/L<id>``.

Stored as JSON and always updated with compare-and-set on the node's version, so two
parties (a writer changing its ensemble, a reader recovering the ledger) can never both win.
``ensembles`` maps the first entry id of each fragment to the bookies that hold it; entry
``e`` lives in the last fragment whose first entry is ``<= e``, on the write set
``[(e + i) % E for i in range(Qw)]`` of that fragment's ensemble (BookKeeper's round-robin
distribution). The paths are the cluster layout of :mod:`magnetar.bookie_protocol.layout`,
re-exported here.
"""

from __future__ import annotations

import bisect
import enum
import json
from dataclasses import dataclass, field, replace
from typing import Final

from magnetar.bookie_protocol.layout import AVAILABLE_PATH as AVAILABLE_PATH
from magnetar.bookie_protocol.layout import IDGEN_PATH as IDGEN_PATH
from magnetar.bookie_protocol.layout import LEDGERS_PATH as LEDGERS_PATH
from magnetar.bookie_protocol.layout import READONLY_NAME as READONLY_NAME
from magnetar.bookie_protocol.layout import ledger_path as ledger_path

_NO_END: Final = 2**63 - 1


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    """Total payload bytes; -1 when closed by recovery (not recomputed)."""
    created_ms: int = 0
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1):
            raise ValueError("need ensemble_size >= write_quorum >= ack_quorum >= 1")

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        firsts = [first for first, _ in self.ensembles]
        i = bisect.bisect_right(firsts, entry_id) - 1
        return self.ensembles[max(i, 0)][1]

    def fragment_last(self, entry_id: int) -> int:
        """The last entry id of the fragment ``entry_id`` is in (a large number for the
        last fragment, which ends where the ledger does)."""
        for first, _ in self.ensembles:
            if first > entry_id:
                return first - 1
        return _NO_END

    @property
    def current_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    def write_set(self, entry_id: int) -> list[int]:
        e = self.ensemble_size
        return [(entry_id + i) % e for i in range(self.write_quorum)]

    def with_ensemble(self, first_entry: int, bookies: tuple[str, ...]) -> LedgerMetadata:
        """A new fragment from ``first_entry`` (replacing a fragment that starts there)."""
        kept = tuple((f, b) for f, b in self.ensembles if f < first_entry)
        return replace(self, ensembles=(*kept, (first_entry, bookies)))

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "ledger_id": self.ledger_id,
                "state": self.state.value,
                "ensemble_size": self.ensemble_size,
                "write_quorum": self.write_quorum,
                "ack_quorum": self.ack_quorum,
                "ensembles": [{"first_entry": f, "bookies": list(b)} for f, b in self.ensembles],
                "last_entry_id": self.last_entry_id,
                "length": self.length,
                "created_ms": self.created_ms,
                "properties": self.properties,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerMetadata:
        raw = json.loads(data)
        return cls(
            ledger_id=int(raw["ledger_id"]),
            ensemble_size=int(raw["ensemble_size"]),
            write_quorum=int(raw["write_quorum"]),
            ack_quorum=int(raw["ack_quorum"]),
            ensembles=tuple(
                (int(e["first_entry"]), tuple(str(b) for b in e["bookies"]))
                for e in raw["ensembles"]
            ),
            state=LedgerState(raw["state"]),
            last_entry_id=int(raw["last_entry_id"]),
            length=int(raw["length"]),
            created_ms=int(raw.get("created_ms", 0)),
            properties={str(k): str(v) for k, v in raw.get("properties", {}).items()},
        )
