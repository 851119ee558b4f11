"""The leader's scheduler (sans-IO): which worker should run each instance.

Inputs: the instances the definitions ask for (``fqfn:i`` for ``i < parallelism``), the
current assignments, the live members (the coordination subscription's consumers) and the
time. Output: :class:`AssignmentChange` records for the leader to write (``worker_id`` None
is a tombstone). Rules:

* an instance keeps its worker while that worker is a member and not being drained, and for
  ``grace_ms`` after the worker was first seen missing (a restarting worker gets its
  instances back; a dead one loses them once the grace period is over);
* an unassigned instance goes to the live, not-draining member with the fewest instances
  (ties by worker id): round-robin over the members as instances arrive;
* an instance no definition asks for any more gets a tombstone;
* :meth:`Scheduler.rebalance` spreads every instance anew, round-robin in instance-key order;
  :meth:`Scheduler.drain` moves a worker's instances away and gives it none until it leaves
  the cluster (or :meth:`Scheduler.undrain`).

No clock is read: ``now_ms`` comes with every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEFAULT_RESCHEDULE_GRACE_MS = 10_000


@dataclass(frozen=True, slots=True)
class AssignmentChange:
    instance_key: str
    worker_id: str | None
    """The new owner, or None: the instance is gone (a tombstone)."""


class Scheduler:
    """The leader's scheduling state: when each missing worker was first missed, and which
    workers are draining. A new leader starts afresh (its grace periods start when it
    first sees a worker missing)."""

    def __init__(self, grace_ms: int = DEFAULT_RESCHEDULE_GRACE_MS) -> None:
        assert grace_ms >= 0
        self.grace_ms = grace_ms
        self._missing_since_ms: dict[str, int] = {}
        self._draining: set[str] = set()

    @property
    def draining(self) -> frozenset[str]:
        return frozenset(self._draining)

    def drain(self, worker_id: str) -> None:
        self._draining.add(worker_id)

    def undrain(self, worker_id: str) -> None:
        self._draining.discard(worker_id)

    def next_deadline_ms(self) -> int | None:
        """When the earliest grace period ends (the leader should plan again then)."""
        if not self._missing_since_ms:
            return None
        return min(self._missing_since_ms.values()) + self.grace_ms

    def plan(
        self,
        wanted: Iterable[str],
        current: Mapping[str, str],
        members: Iterable[str],
        now_ms: int,
    ) -> list[AssignmentChange]:
        """The changes that bring ``current`` to the rules above, in instance-key order."""
        live = sorted(set(members))
        self._track_missing(current.values(), live, now_ms)
        self._draining &= set(live)
        eligible = [w for w in live if w not in self._draining]
        wanted_keys = sorted(set(wanted))
        kept: dict[str, str] = {}
        for key in wanted_keys:
            owner = current.get(key)
            if owner is not None and self._may_keep(owner, live, now_ms):
                kept[key] = owner
        load = {w: 0 for w in eligible}
        for owner in kept.values():
            if owner in load:
                load[owner] += 1
        changes: list[AssignmentChange] = []
        for key in wanted_keys:
            if key in kept or not eligible:
                continue
            target = min(eligible, key=lambda w: (load[w], w))
            load[target] += 1
            changes.append(AssignmentChange(key, target))
        wanted_set = set(wanted_keys)
        changes.extend(AssignmentChange(k, None) for k in sorted(current) if k not in wanted_set)
        return sorted(changes, key=lambda c: c.instance_key)

    def rebalance(
        self, wanted: Iterable[str], current: Mapping[str, str], members: Iterable[str]
    ) -> list[AssignmentChange]:
        """Every instance spread anew round-robin over the eligible members; only the
        instances whose worker changes are returned (plus tombstones)."""
        live = sorted(set(members))
        self._draining &= set(live)
        eligible = [w for w in live if w not in self._draining]
        wanted_keys = sorted(set(wanted))
        changes: list[AssignmentChange] = []
        if eligible:
            for i, key in enumerate(wanted_keys):
                target = eligible[i % len(eligible)]
                if current.get(key) != target:
                    changes.append(AssignmentChange(key, target))
        wanted_set = set(wanted_keys)
        changes.extend(AssignmentChange(k, None) for k in sorted(current) if k not in wanted_set)
        return sorted(changes, key=lambda c: c.instance_key)

    def _track_missing(self, owners: Iterable[str], live: list[str], now_ms: int) -> None:
        live_set = set(live)
        for w in list(self._missing_since_ms):
            if w in live_set:
                del self._missing_since_ms[w]
        for w in set(owners) - live_set:
            self._missing_since_ms.setdefault(w, now_ms)
        # forget workers that own nothing any more
        owned = set(owners)
        for w in list(self._missing_since_ms):
            if w not in owned:
                del self._missing_since_ms[w]

    def _may_keep(self, owner: str, live: list[str], now_ms: int) -> bool:
        if owner in self._draining:
            return False
        if owner in live:
            return True
        since = self._missing_since_ms.get(owner, now_ms)
        return now_ms - since < self.grace_ms
