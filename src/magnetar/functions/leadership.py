"""Who leads, and what the leader must hold: the sans-IO core of a worker's election.

The broker decides: the active consumer of the coordination topic's Failover subscription is
the leader, and it tells each consumer through ACTIVE_CONSUMER_CHANGE. This core turns those
notifications, and what happened to the assignments producer, into *effects* that the shell
(:mod:`magnetar.functions.worker`, :mod:`magnetar.functions.fenced_producer`) carries out in
order. It does no I/O and reads no clock.

Contract:

* Leadership comes in *terms*: each change from follower to leader starts a new term
  (1, 2, …). Repeated notifications of the same state produce nothing.
* Becoming leader: :class:`LeadershipChanged` (``is_leader=True``), then
  :class:`AcquireProducer` for the new term. Losing leadership (an inactive notification, or
  the worker leaving): :class:`LeadershipChanged` (``False``), then :class:`ReleaseProducer`.
* The producer is taken with fencing (Pulsar's ExclusiveWithFencing), so a newer leader always
  gets it and the older holder's sends fail. A holder told it was fenced keeps its leadership
  flag (only the broker's notification changes that) but must not take the producer back in
  the same term: doing so would fence the real leader, which would fence it back, forever.
  It may take it again in a later term.
* An acquisition that finished after its term ended (or after leaving) is released at once:
  :meth:`LeadershipState.on_acquired` answers :class:`ReleaseProducer`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeadershipChanged:
    """Tell the worker's listeners: this worker is (no longer) the leader, in ``term``."""

    is_leader: bool
    term: int


@dataclass(frozen=True, slots=True)
class AcquireProducer:
    """Take the assignments topic's exclusive producer for ``term``, retrying failures while
    :meth:`LeadershipState.wants_producer` holds; report success with
    :meth:`LeadershipState.on_acquired`."""

    term: int


@dataclass(frozen=True, slots=True)
class ReleaseProducer:
    """Close the assignments producer held for ``term`` (if any)."""

    term: int


Effect = LeadershipChanged | AcquireProducer | ReleaseProducer


class LeadershipState:
    """One worker's view of its leadership. Not thread-safe; one event loop drives it."""

    __slots__ = ("_fenced_term", "_holding_term", "_left", "is_leader", "term")

    def __init__(self) -> None:
        self.is_leader = False
        self.term = 0
        """The current (or last) leadership term of this worker; 0 before the first."""
        self._holding_term: int | None = None
        self._fenced_term: int | None = None
        self._left = False

    @property
    def holds_producer(self) -> bool:
        """Whether the shell holds the assignments producer for the current term."""
        return self.is_leader and self._holding_term == self.term

    def wants_producer(self, term: int) -> bool:
        """Whether an acquisition for ``term`` should still be attempted (or retried):
        this worker leads in that term, does not hold the producer yet and was not fenced."""
        return (
            not self._left
            and self.is_leader
            and term == self.term
            and self._holding_term != term
            and self._fenced_term != term
        )

    def on_active_consumer_change(self, is_active: bool) -> list[Effect]:
        """The broker's ACTIVE_CONSUMER_CHANGE for this worker's coordination consumer.

        Told *active* again while fenced in the current term, the worker starts a new term
        (ends the old one, then takes the producer again): it was deposed without being told
        (paused, cut off), a newer leader fenced it, and the broker has since chosen it again
        (after the other leader left, or when its consumer came back). Without a new term it
        would lead without ever holding the producer, and nobody could write."""
        if self._left:
            return []
        if is_active and self.is_leader and self._fenced_term == self.term:
            old = self.term
            self.term += 1
            if self._holding_term == old:
                self._holding_term = None
            return [
                LeadershipChanged(False, old),
                ReleaseProducer(old),
                LeadershipChanged(True, self.term),
                AcquireProducer(self.term),
            ]
        if is_active == self.is_leader:
            return []
        self.is_leader = is_active
        if is_active:
            self.term += 1
            return [LeadershipChanged(True, self.term), AcquireProducer(self.term)]
        return [LeadershipChanged(False, self.term), ReleaseProducer(self.term)]

    def on_leave(self) -> list[Effect]:
        """The worker leaves its cluster (closes its coordination consumer). Afterwards every
        notification is ignored."""
        if self._left:
            return []
        self._left = True
        if not self.is_leader:
            return []
        self.is_leader = False
        return [LeadershipChanged(False, self.term), ReleaseProducer(self.term)]

    def on_acquired(self, term: int) -> list[Effect]:
        """The producer for ``term`` was taken. Answers its release when that term is over."""
        if self.wants_producer(term):
            self._holding_term = term
            return []
        return [ReleaseProducer(term)]

    def on_released(self, term: int) -> None:
        """The producer held for ``term`` is closed (or was never taken)."""
        if self._holding_term == term:
            self._holding_term = None

    def on_fenced(self, term: int) -> list[Effect]:
        """The broker fenced the producer held for ``term``: a newer leader took it. The
        producer is released and not taken again in this term."""
        self._fenced_term = term
        if self._holding_term == term:
            self._holding_term = None
            return [ReleaseProducer(term)]
        return []
