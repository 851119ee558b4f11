"""Ledger fragments and the re-replication of one fragment's replica (autorecovery), pure.

A *fragment* is the entry range one ensemble holds: fragment *i* starts at the first entry
of ``ensembles[i]`` and ends before the next one starts; the last fragment ends at the
ledger's last entry once the ledger is CLOSED, and is still being written (its end unknown)
while it is OPEN or IN_RECOVERY. Entry ``e`` of a fragment lives on the write set
``[(e + j) % E for j in range(Qw)]`` of the fragment's ensemble.

Re-replicating *bookie index* ``i`` of a fragment means: for every entry of the fragment
whose write set holds ``i``, read it from another replica of its write set and write it to a
*target* bookie (not in the fragment's ensemble); then replace ``ensemble[i]`` of that
fragment by the target in the ledger metadata, with compare-and-set. The copy must be
complete before the metadata names the target, so metadata never names a bookie that lacks
an entry it should hold. This module computes the plan and the new metadata; it does no I/O.

Only *sealed* fragments are re-replicated: every fragment of a CLOSED ledger and every
fragment but the last of an open one (entries before an ensemble change are all
confirmed). The last fragment of an open ledger belongs to its writer, which replaces a
failed bookie itself (ensemble change), or to the recovery that closes the ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from magnetar.common.errors import MagnetarError
from magnetar.ledger.metadata import LedgerMetadata, LedgerState


class FragmentChanged(MagnetarError):
    """The ledger metadata no longer has the fragment a re-replication was planned for
    (another party changed it): the task is moot or must be planned again."""


@dataclass(frozen=True, slots=True)
class Fragment:
    first_entry: int
    last_entry: int | None
    """Inclusive; ``None`` for the last fragment of a ledger not yet closed (still written).
    Less than ``first_entry`` for a fragment that holds no entry."""
    ensemble: tuple[str, ...]

    @property
    def sealed(self) -> bool:
        """Its entries are fixed: it may be re-replicated."""
        return self.last_entry is not None


def fragments_of(metadata: LedgerMetadata) -> list[Fragment]:
    """Every fragment of the ledger, in entry order."""
    result: list[Fragment] = []
    closed = metadata.state is LedgerState.CLOSED
    for i, (first, ensemble) in enumerate(metadata.ensembles):
        last: int | None
        if i + 1 < len(metadata.ensembles):
            last = metadata.ensembles[i + 1][0] - 1
        else:
            last = metadata.last_entry_id if closed else None
        result.append(Fragment(first, last, ensemble))
    return result


def fragment_at(metadata: LedgerMetadata, first_entry: int) -> Fragment | None:
    """The fragment starting at ``first_entry``, if the ledger has one."""
    for fragment in fragments_of(metadata):
        if fragment.first_entry == first_entry:
            return fragment
    return None


def _entries_on(fragment: Fragment, bookie_index: int, e: int, qw: int) -> Iterator[int]:
    if fragment.last_entry is None:
        raise ValueError("the fragment is still being written")
    for entry_id in range(fragment.first_entry, fragment.last_entry + 1):
        if (bookie_index - entry_id) % e < qw:
            yield entry_id


@dataclass(frozen=True, slots=True)
class RereplicationPlan:
    """What a replication worker does for one fragment's missing replica."""

    ledger_id: int
    fragment: Fragment
    bookie_index: int
    missing_bookie: str
    target_bookie: str
    ensemble_size: int
    write_quorum: int

    def entries(self) -> Iterator[int]:
        """The entries to copy to the target, in order (possibly none)."""
        return _entries_on(self.fragment, self.bookie_index, self.ensemble_size, self.write_quorum)

    def sources(self, entry_id: int) -> list[str]:
        """The other replicas of ``entry_id``, in write-set order: read from the first that
        answers (some may be gone too)."""
        e, qw = self.ensemble_size, self.write_quorum
        indexes = [(entry_id + j) % e for j in range(qw)]
        return [self.fragment.ensemble[i] for i in indexes if i != self.bookie_index]


def plan_rereplication(
    metadata: LedgerMetadata,
    first_entry: int,
    bookie_index: int,
    missing_bookie: str,
    target_bookie: str,
) -> RereplicationPlan | None:
    """The plan for replacing ``missing_bookie`` at ``bookie_index`` of the fragment that
    starts at ``first_entry`` by ``target_bookie``. ``None`` when there is nothing to do: the
    fragment no longer names ``missing_bookie`` there (already replaced). Raises
    :class:`FragmentChanged` when the ledger has no such sealed fragment, and
    :class:`ValueError` when the target is already in the fragment's ensemble (two replicas
    of one entry on one bookie would count as two)."""
    fragment = fragment_at(metadata, first_entry)
    if fragment is None or not fragment.sealed:
        raise FragmentChanged(
            f"ledger {metadata.ledger_id} has no sealed fragment starting at entry {first_entry}"
        )
    if not 0 <= bookie_index < len(fragment.ensemble):
        raise FragmentChanged(f"ledger {metadata.ledger_id} has no bookie index {bookie_index}")
    if fragment.ensemble[bookie_index] != missing_bookie:
        return None
    if target_bookie in fragment.ensemble:
        raise ValueError(f"target {target_bookie} is already in the ensemble {fragment.ensemble}")
    return RereplicationPlan(
        ledger_id=metadata.ledger_id,
        fragment=fragment,
        bookie_index=bookie_index,
        missing_bookie=missing_bookie,
        target_bookie=target_bookie,
        ensemble_size=metadata.ensemble_size,
        write_quorum=metadata.write_quorum,
    )


def replace_replica(metadata: LedgerMetadata, plan: RereplicationPlan) -> LedgerMetadata:
    """The metadata to write (compare-and-set) once the plan's entries are on the target.

    Apply it to the metadata read just before the write: on a version conflict, read again
    and call this again. Raises :class:`FragmentChanged` when that fragment is no longer as
    planned (its range or the replaced replica changed); the other fragments, the state and
    the last entry are kept as read, so a writer's concurrent ensemble change or close is
    not undone."""
    current = fragment_at(metadata, plan.fragment.first_entry)
    if (
        current is None
        or current.last_entry != plan.fragment.last_entry
        or current.ensemble[plan.bookie_index] != plan.missing_bookie
    ):
        raise FragmentChanged(
            f"ledger {metadata.ledger_id}: the fragment from entry {plan.fragment.first_entry} "
            f"changed while its replica {plan.bookie_index} was copied"
        )
    ensemble = list(current.ensemble)
    ensemble[plan.bookie_index] = plan.target_bookie
    ensembles = tuple(
        (first, tuple(ensemble) if first == plan.fragment.first_entry else bookies)
        for first, bookies in metadata.ensembles
    )
    return replace(metadata, ensembles=ensembles)


def missing_replicas(
    metadata: LedgerMetadata, live_bookies: frozenset[str] | set[str]
) -> list[tuple[Fragment, int]]:
    """Every (sealed fragment, bookie index) whose bookie is not in ``live_bookies``, in
    entry order then index order. The ledger is at its write quorum of live replicas when
    this is empty (the writer's current fragment aside)."""
    result: list[tuple[Fragment, int]] = []
    for fragment in fragments_of(metadata):
        if not fragment.sealed:
            continue
        for index, bookie in enumerate(fragment.ensemble):
            if bookie not in live_bookies:
                result.append((fragment, index))
    return result
