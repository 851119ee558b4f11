"""Where and how a managed ledger keeps its state in the metadata store.

::

    /managed-ledgers/<name>                  JSON: {"ledgers": [segment...], "terminated": bool,
                                                    "properties": {...}}      (versioned, CAS)
    /managed-ledgers/<name>/<quoted cursor>  JSON: {"cursor_ledger": id | -1,
                                                    "mark_delete": [ledger, entry],
                                                    "properties": {...}}      (versioned, CAS)

Every update of a node is a compare-and-set on the version read or last written by this
process; a ``BadVersion`` means another process took the managed ledger over (fenced).
Cursor names are URL-quoted so any name is a single path segment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from magnetar.managed_ledger.ledger_list import LedgerSegment
from magnetar.managed_ledger.position import Position
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore, NotFound

ROOT = "/managed-ledgers"


def ledger_path(name: str) -> str:
    return f"{ROOT}/{name.strip('/')}"


def cursor_path(name: str, cursor: str) -> str:
    return f"{ledger_path(name)}/{quote(cursor, safe='')}"


def cursor_name(segment: str) -> str:
    return unquote(segment)


@dataclass(slots=True)
class ManagedLedgerInfo:
    ledgers: list[LedgerSegment] = field(default_factory=list)
    terminated: bool = False
    properties: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "ledgers": [s.to_json() for s in self.ledgers],
                "terminated": self.terminated,
                "properties": self.properties,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ManagedLedgerInfo:
        if not data:
            return cls()
        raw: dict[str, Any] = json.loads(data)
        return cls(
            ledgers=[LedgerSegment.from_json(s) for s in raw.get("ledgers", [])],
            terminated=bool(raw.get("terminated", False)),
            properties={str(k): str(v) for k, v in raw.get("properties", {}).items()},
        )


class LedgerInfoNode:
    """A managed ledger's node: :meth:`load`, then :meth:`write` with compare-and-set on
    the version this process last read or wrote. A node :meth:`load` did not find is
    created by the first :meth:`write` (with the managed ledger's first ledger: one write,
    not an empty node and then its first ledger)."""

    __slots__ = (
        "_name",
        "_store",
        "_version",
    )

    def __init__(self, store: MetadataStore, name: str) -> None:
        self._store = store
        self._name = name
        self._version = MUST_NOT_EXIST

    @property
    def path(self) -> str:
        """The node's path (made when needed: the managed ledger's name string is kept
        anyway, a path string beside it was ~100 B per idle topic)."""
        return ledger_path(self._name)

    async def load(self) -> ManagedLedgerInfo | None:
        """The stored value, None if there is no node. Raises the store's errors."""
        try:
            got = await self._store.get(self.path)
        except NotFound:
            self._version = MUST_NOT_EXIST
            return None
        self._version = got.stat.version
        return ManagedLedgerInfo.decode(got.value)

    async def write(self, info: ManagedLedgerInfo) -> None:
        """Store ``info``. Raises ``BadVersion``/``NotFound`` when another process changed
        or deleted the node since this one last read or wrote it, ``NodeExists`` when
        :meth:`load` found none and another process created it since."""
        stat = await self._store.put(self.path, info.encode(), self._version)
        self._version = stat.version


@dataclass(slots=True)
class CursorInfo:
    cursor_ledger: int = -1
    mark_delete: Position = field(default_factory=lambda: Position(-1, -1))
    properties: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "cursor_ledger": self.cursor_ledger,
                "mark_delete": list(self.mark_delete),
                "properties": self.properties,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> CursorInfo:
        raw: dict[str, Any] = json.loads(data)
        md = raw.get("mark_delete", [-1, -1])
        return cls(
            cursor_ledger=int(raw.get("cursor_ledger", -1)),
            mark_delete=Position(int(md[0]), int(md[1])),
            properties={str(k): int(v) for k, v in raw.get("properties", {}).items()},
        )
