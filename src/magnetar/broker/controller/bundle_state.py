"""The persisted state of one bundle (Kafka's partition state, per bundle).

States and what each promises::

    UNASSIGNED ──assign──▶ ASSIGNING ──acquired ack──▶ OWNED ──unload/shed/split──▶ RELEASING
        ▲                      │                                                       │
        └────── broker left ───┴────────────── released ack, or broker left ◀──────────┘

* ``UNASSIGNED`` — no broker may serve it (``broker`` is ``None``).
* ``ASSIGNING`` — ``broker`` was told to acquire it and may already serve it.
* ``OWNED`` — ``broker`` acknowledged that it holds the ownership node.
* ``RELEASING`` — ``broker`` was told to let it go and may still serve it until it acks.

Only UNASSIGNED names no broker, so a bundle is never handed to a second broker while the
first may still hold it. Every record carries the epoch of the controller that wrote it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, replace
from typing import Any

from magnetar.common.errors import MagnetarError


class BundleState(enum.Enum):
    UNASSIGNED = "Unassigned"
    ASSIGNING = "Assigning"
    OWNED = "Owned"
    RELEASING = "Releasing"


class CorruptRecord(MagnetarError, ValueError):
    """Persisted controller state (a bundle record, a namespace's boundaries) that cannot be
    decoded. A controller refuses to start on it rather than guess who owns what."""


@dataclass(frozen=True, slots=True)
class BundleRecord:
    state: BundleState
    broker: str | None
    """The owner (OWNED), the target (ASSIGNING), the holder letting go (RELEASING)."""
    epoch: int
    """Epoch of the controller that wrote this record."""
    since_ms: int
    """When the bundle entered ``state`` (the controller's clock)."""
    avoid_broker: str | None = None
    """After release, prefer any live broker but this one (unload and load shedding)."""
    split_after_release: bool = False
    """Split the bundle in two once released (a split requested while it was owned)."""

    def __post_init__(self) -> None:
        if (self.state is BundleState.UNASSIGNED) != (self.broker is None):
            raise ValueError(f"a {self.state.value} record with broker {self.broker!r}")

    def moved(
        self, state: BundleState, broker: str | None, epoch: int, now_ms: int
    ) -> BundleRecord:
        """This record in a new state, written at ``epoch`` (hints kept)."""
        return replace(self, state=state, broker=broker, epoch=epoch, since_ms=now_ms)

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "state": self.state.value,
            "broker": self.broker,
            "epoch": self.epoch,
            "sinceMs": self.since_ms,
        }
        if self.avoid_broker is not None:
            body["avoidBroker"] = self.avoid_broker
        if self.split_after_release:
            body["splitAfterRelease"] = True
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleRecord:
        """Raises :class:`CorruptRecord`."""
        try:
            body = json.loads(data)
            return cls(
                state=BundleState(body["state"]),
                broker=body["broker"],
                epoch=int(body["epoch"]),
                since_ms=int(body["sinceMs"]),
                avoid_broker=body.get("avoidBroker"),
                split_after_release=bool(body.get("splitAfterRelease", False)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptRecord(f"undecodable bundle record {data[:80]!r}: {exc}") from None
