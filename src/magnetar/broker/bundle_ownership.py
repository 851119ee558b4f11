"""The broker's side of bundle ownership: which bundles this broker holds, and when to take
or give up the ownership node of one (sans-IO).

The controller's command channel is the persisted bundle record
(``/controller_state/bundles/...``, :class:`~magnetar.broker.controller.BundleRecord`): a
record in ASSIGNING or OWNED naming this broker means "hold this bundle", anything else
(another broker, UNASSIGNED, RELEASING, the record gone after a split) means "do not". The
shell feeds every record it reads to :meth:`BundleOwnership.record_seen` and carries out
the effects in order:

* :class:`AcquireOwnership` — create the ephemeral ownership node
  ``/namespace/<tenant>/<ns>/<range>`` in one ``fenced_multi`` on ``/controller_epoch`` with
  the record's epoch (a stale controller's command is refused by the store, not obeyed),
  then report :meth:`~BundleOwnership.acquired` or :meth:`~BundleOwnership.acquire_failed`;
* :class:`ReleaseOwnership` — stop serving: close the bundle's topics (their producers and
  consumers get CLOSE_PRODUCER / CLOSE_CONSUMER), then delete the node, then report
  :meth:`~BundleOwnership.released`.

The controller learns "acquired" and "released" from the ownership nodes themselves.

States of one bundle on this broker: absent (not held) → ACQUIRING → HELD → RELEASING →
absent. Only HELD bundles are served (:meth:`BundleOwnership.serves`): a topic is opened
only after its ownership node exists, and is closed before the node is deleted, so two
brokers never serve one bundle while their sessions live. One operation per bundle is in
flight at a time; a wish that changes meanwhile is applied when it completes. A failed
acquisition that was not fenced (the previous holder's node still there until its
session expires, a lost connection) is retried by :meth:`BundleOwnership.tick` after
``acquire_retry_ms``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from magnetar.broker.controller.bundle_state import BundleRecord, BundleState
from magnetar.broker.controller.bundles import BundleId

DEFAULT_ACQUIRE_RETRY_MS = 1_000


class Holding(enum.Enum):
    ACQUIRING = "Acquiring"
    HELD = "Held"
    RELEASING = "Releasing"


@dataclass(frozen=True, slots=True)
class AcquireOwnership:
    """Create the bundle's ownership node, fenced on controller epoch ``epoch``."""

    bundle: BundleId
    epoch: int


@dataclass(frozen=True, slots=True)
class ReleaseOwnership:
    """Close the bundle's topics, then delete its ownership node."""

    bundle: BundleId


OwnershipEffect = AcquireOwnership | ReleaseOwnership


class BundleOwnership:
    """Ownership rules of one broker (``broker_id`` as registered). Not thread-safe; the
    shell calls it from one task at a time and runs the effects in order."""

    def __init__(self, broker_id: str, *, acquire_retry_ms: int = DEFAULT_ACQUIRE_RETRY_MS) -> None:
        self.broker_id = broker_id
        self.acquire_retry_ms = acquire_retry_ms
        self._holding: dict[BundleId, Holding] = {}
        self._wanted: dict[BundleId, int] = {}
        """Bundles the latest records give this broker, with the record's epoch."""
        self._retry_at_ms: dict[BundleId, int] = {}

    # --- queries -------------------------------------------------------------------------

    def serves(self, bundle: BundleId) -> bool:
        """True only while this broker holds the bundle's ownership node and has not begun
        to let it go."""
        return self._holding.get(bundle) is Holding.HELD

    def holding(self, bundle: BundleId) -> Holding | None:
        return self._holding.get(bundle)

    @property
    def held(self) -> frozenset[BundleId]:
        """Bundles served now."""
        return frozenset(b for b, h in self._holding.items() if h is Holding.HELD)

    # --- events --------------------------------------------------------------------------

    def record_seen(
        self, bundle: BundleId, record: BundleRecord | None, now_ms: int
    ) -> list[OwnershipEffect]:
        """The bundle's record as read now (``None``: no record, e.g. split away)."""
        if (
            record is not None
            and record.broker == self.broker_id
            and record.state in (BundleState.ASSIGNING, BundleState.OWNED)
        ):
            if self._wanted.get(bundle, -1) > record.epoch:
                return []  # a late read of an older record
            self._wanted[bundle] = record.epoch
        else:
            self._wanted.pop(bundle, None)
            self._retry_at_ms.pop(bundle, None)
        return self._converge(bundle)

    def acquired(self, bundle: BundleId, now_ms: int) -> list[OwnershipEffect]:
        """The ownership node was created."""
        if self._holding.get(bundle) is not Holding.ACQUIRING:
            return []
        self._holding[bundle] = Holding.HELD
        return self._converge(bundle)

    def acquire_failed(
        self, bundle: BundleId, epoch: int, now_ms: int, *, fenced: bool
    ) -> list[OwnershipEffect]:
        """Creating the node failed. ``fenced``: the command's ``epoch`` is no longer the
        controller's, so it is dropped until a newer record asks again; otherwise it is
        retried after ``acquire_retry_ms``."""
        if self._holding.get(bundle) is not Holding.ACQUIRING:
            return []
        del self._holding[bundle]
        if fenced:
            if self._wanted.get(bundle) == epoch:
                del self._wanted[bundle]
            return self._converge(bundle)
        if bundle in self._wanted:
            self._retry_at_ms[bundle] = now_ms + self.acquire_retry_ms
        return []

    def released(self, bundle: BundleId, now_ms: int) -> list[OwnershipEffect]:
        """The bundle's topics are closed and its ownership node is gone."""
        if self._holding.get(bundle) is not Holding.RELEASING:
            return []
        del self._holding[bundle]
        return self._converge(bundle)

    def tick(self, now_ms: int) -> list[OwnershipEffect]:
        """Retry acquisitions whose retry time has come."""
        effects: list[OwnershipEffect] = []
        for bundle in sorted(self._retry_at_ms):
            if self._retry_at_ms[bundle] <= now_ms:
                del self._retry_at_ms[bundle]
                effects += self._converge(bundle)
        return effects

    # --- internals -----------------------------------------------------------------------

    def _converge(self, bundle: BundleId) -> list[OwnershipEffect]:
        holding = self._holding.get(bundle)
        wanted = self._wanted.get(bundle)
        if holding is None and wanted is not None and bundle not in self._retry_at_ms:
            self._holding[bundle] = Holding.ACQUIRING
            return [AcquireOwnership(bundle, wanted)]
        if holding is Holding.HELD and wanted is None:
            self._holding[bundle] = Holding.RELEASING
            return [ReleaseOwnership(bundle)]
        return []
