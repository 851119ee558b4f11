"""Ensemble placement: which bookies a ledger's ensemble is made of, and when an entry is
durable enough to acknowledge. Pure (no I/O): the ledger client reads the bookies and their
racks and hands them in.

Racks are ``/region/rack`` paths (:mod:`magnetar.ledger.racks`); a bookie's **region** is
the first component of its rack (``/east/r1`` → ``/east``; ``/r1`` → ``/r1``), and a
bookie without a rack is on :data:`~magnetar.ledger.racks.DEFAULT_RACK`, in
:data:`DEFAULT_REGION` — BookKeeper's ``RegionAwareEnsemblePlacementPolicy`` reads regions
the same way.

**Placement** (:func:`place`) fills the open positions of an ensemble one at a time (a new
ledger: all of them; an ensemble change: the failed ones), each with the candidate that
adds least repetition to the write sets containing that position — first by region (when
:attr:`PlacementPolicy.region_aware`), then by rack (when :attr:`PlacementPolicy.rack_aware`),
then by use in the whole ensemble — at random among equals; a pass that falls short of the
minimums below is tried again over another random order (at most
:data:`PLACEMENT_ATTEMPTS_MAX` passes), the best kept. Write sets are BookKeeper's
round robin: entry ``e`` goes to positions ``e % E … e % E + Qw - 1`` (mod E). So every
write set spans as many regions and racks as the candidates allow, also when striped
(E > Qw). A placement whose write sets span fewer regions than
``min(min_regions_for_durability, Qw)`` (or fewer racks than
``min(min_racks_per_write_quorum, Qw)``) is *degraded*: :func:`place` returns it unless
:attr:`PlacementPolicy.enforce_min` is set, in which case it raises
:class:`PlacementUnmet` (the ledger client then fails the create or the append; writes
resume once enough bookies are back).

**Replacement** (:func:`replacements`): a lost replica's bookie is replaced (autorecovery)
by the candidate with which the ensemble meets the minimums, or falls least short of them,
then by the same repetition costs, so a re-replicated ensemble spans regions and racks as a
placed one does.

**Durability** (:func:`regions_needed`, :func:`durable`): with region awareness an entry
is acknowledged once ``Qa`` bookies of its write set stored it *and* they are in at least
``min(min_regions_for_durability, regions of that write set)`` regions, so a whole region
lost loses nothing acknowledged while the write set spans regions. A degraded write set (one
region: every other region's bookies are gone) needs acks from its one region only —
writes go on at reduced durability, logged by the ledger client.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from magnetar.common.frozen_struct import frozen_struct
from magnetar.ledger.errors import NotEnoughBookies
from magnetar.ledger.racks import DEFAULT_RACK

PLACEMENT_ATTEMPTS_MAX = 16
"""Greedy passes (each over another random order) :func:`place` tries before it settles for
the best degraded placement: one pass can miss a striped arrangement (E > Qw) that exists."""
DEFAULT_REGION = "/default-region"
"""The region of a bookie without a rack (BookKeeper's ``UnknownRegion``)."""


class PlacementUnmet(NotEnoughBookies):
    """The bookies available cannot be placed as a policy that enforces its minimums asks
    (retriable later: bookies may come back)."""


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    """How ensembles are placed; Pulsar's broker settings in brackets."""

    rack_aware: bool = True
    """Spread write sets over racks (``bookkeeperClientRackawarePolicyEnabled``)."""
    region_aware: bool = False
    """Spread write sets over regions and acknowledge only entries stored in
    ``min_regions_for_durability`` of them (``bookkeeperClientRegionawarePolicyEnabled``)."""
    min_racks_per_write_quorum: int = 2
    """``bookkeeperClientMinNumRacksPerWriteQuorum`` (capped at Qw)."""
    min_regions_for_durability: int = 2
    """BookKeeper's ``reppMinimumRegionsForDurability`` (capped at Qw)."""
    enforce_min: bool = False
    """Refuse degraded placements instead of logging them
    (``bookkeeperClientEnforceMinNumRacksPerWriteQuorum``; with region awareness it applies
    to regions too)."""

    def __post_init__(self) -> None:
        if self.min_racks_per_write_quorum < 1 or self.min_regions_for_durability < 1:
            raise ValueError("the minimum racks and regions are at least 1")


def region_of(rack: str) -> str:
    """The region of a (normalized) rack path: its first component."""
    if rack == DEFAULT_RACK:
        return DEFAULT_REGION
    first = rack.lstrip("/").split("/", 1)[0]
    return "/" + first if first else DEFAULT_REGION


def write_sets(ensemble_size: int, write_quorum: int) -> list[tuple[int, ...]]:
    """The ensemble positions of each write set, by ``entry_id % ensemble_size``."""
    return list(shared_write_sets(ensemble_size, write_quorum))


@functools.lru_cache(maxsize=64)
def shared_write_sets(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """:func:`write_sets`, shared by every caller (placements read them several times, and
    every ledger handle keeps them)."""
    e = ensemble_size
    return tuple(tuple((first + i) % e for i in range(write_quorum)) for first in range(e))


@frozen_struct(kw_only=False)
class Shortfall:
    """The fewest regions and racks any write set of an ensemble spans, against what the
    policy asks; ``degraded`` when below."""

    regions: int
    regions_wanted: int
    racks: int
    racks_wanted: int

    @property
    def degraded(self) -> bool:
        return self.regions < self.regions_wanted or self.racks < self.racks_wanted

    def describe(self) -> str:
        parts = []
        if self.regions < self.regions_wanted:
            parts.append(f"{self.regions} region(s) of {self.regions_wanted} wanted")
        if self.racks < self.racks_wanted:
            parts.append(f"{self.racks} rack(s) of {self.racks_wanted} wanted")
        return "a write set spans only " + " and ".join(parts)


def shortfall(
    policy: PlacementPolicy,
    ensemble: Sequence[str],
    write_quorum: int,
    racks: Mapping[str, str],
) -> Shortfall:
    """How well ``ensemble`` meets the policy's minimums (see :class:`Shortfall`)."""
    sets = shared_write_sets(len(ensemble), write_quorum)
    rack = [racks.get(b, DEFAULT_RACK) for b in ensemble]
    fewest_racks = min(len({rack[i] for i in ws}) for ws in sets)
    fewest_regions = min(len({region_of(rack[i]) for i in ws}) for ws in sets)
    return Shortfall(
        regions=fewest_regions,
        regions_wanted=min(policy.min_regions_for_durability, write_quorum)
        if policy.region_aware
        else 0,
        racks=fewest_racks,
        racks_wanted=min(policy.min_racks_per_write_quorum, write_quorum)
        if policy.rack_aware
        else 0,
    )


def place(
    policy: PlacementPolicy,
    candidates: Iterable[str],
    ensemble: Sequence[str | None],
    write_quorum: int,
    racks: Mapping[str, str],
    rng: random.Random,
) -> list[str]:
    """``ensemble`` with every ``None`` position filled by a distinct bookie of
    ``candidates`` (those already in ``ensemble`` are skipped), as the module docstring
    describes. ``racks``: bookie → rack (absent: :data:`DEFAULT_RACK`). Raises
    :class:`NotEnoughBookies` when there are too few candidates, :class:`PlacementUnmet` when
    the policy enforces its minimums and the result falls short."""
    return placed(policy, candidates, ensemble, write_quorum, racks, rng)[0]


def placed(
    policy: PlacementPolicy,
    candidates: Iterable[str],
    ensemble: Sequence[str | None],
    write_quorum: int,
    racks: Mapping[str, str],
    rng: random.Random,
) -> tuple[list[str], Shortfall]:
    """:func:`place`'s ensemble and its :func:`shortfall`."""
    open_positions = [i for i, b in enumerate(ensemble) if b is None]
    taken = {b for b in ensemble if b is not None}
    pool = sorted(set(candidates) - taken)
    if len(pool) < len(open_positions):
        raise NotEnoughBookies(f"need {len(open_positions)} more bookies, {len(pool)} available")
    if len(pool) == len(open_positions) == 1:  # one way to fill it (a standalone's bookie)
        best = [pool[0] if b is None else b for b in ensemble]
        best_short = shortfall(policy, best, write_quorum, racks)
    else:
        best, best_short = _best_of_attempts(policy, pool, ensemble, write_quorum, racks, rng)
    if policy.enforce_min and best_short.degraded:
        raise PlacementUnmet(
            f"no placement meets the policy with the bookies available: {best_short.describe()}"
        )
    return best, best_short


def _best_of_attempts(
    policy: PlacementPolicy,
    pool: list[str],
    ensemble: Sequence[str | None],
    write_quorum: int,
    racks: Mapping[str, str],
    rng: random.Random,
) -> tuple[list[str], Shortfall]:
    """The best of up to :data:`PLACEMENT_ATTEMPTS_MAX` greedy fills of ``pool`` (shuffled
    each time), stopping at the first that meets the policy."""
    best: list[str] = []
    best_short: Shortfall | None = None
    for _ in range(PLACEMENT_ATTEMPTS_MAX):
        rng.shuffle(pool)
        result = _fill(policy, pool, ensemble, write_quorum, racks)
        short = shortfall(policy, result, write_quorum, racks)
        if best_short is None or (short.regions, short.racks) > (
            best_short.regions,
            best_short.racks,
        ):
            best, best_short = result, short
        if not short.degraded:
            break
    assert best_short is not None
    return best, best_short


def _fill(
    policy: PlacementPolicy,
    pool: Sequence[str],
    ensemble: Sequence[str | None],
    write_quorum: int,
    racks: Mapping[str, str],
) -> list[str]:
    """One greedy pass of :func:`place` over ``pool`` (in its order: first among equals)."""
    pool = list(pool)
    filled: list[str | None] = list(ensemble)
    for position in (i for i, b in enumerate(ensemble) if b is None):
        chosen = min(pool, key=lambda b: _cost(policy, filled, write_quorum, racks, position, b))
        pool.remove(chosen)
        filled[position] = chosen
    return [b for b in filled if b is not None]


def _cost(
    policy: PlacementPolicy,
    filled: Sequence[str | None],
    write_quorum: int,
    racks: Mapping[str, str],
    position: int,
    b: str,
) -> tuple[int, int, int, int]:
    """The repetition bookie ``b`` at ``position`` adds: write sets containing ``position``
    that already have its region and its rack, then its region's and rack's use in the
    whole ensemble (each 0 when the policy ignores regions or racks)."""

    def rack(bookie: str) -> str:
        return racks.get(bookie, DEFAULT_RACK)

    b_rack = rack(b)
    b_region = region_of(b_rack)
    region_repeats = rack_repeats = 0
    for ws in shared_write_sets(len(filled), write_quorum):
        if position not in ws:
            continue
        members = [m for m in (filled[i] for i in ws if i != position) if m is not None]
        if policy.region_aware:
            region_repeats += any(region_of(rack(m)) == b_region for m in members)
        if policy.rack_aware:
            rack_repeats += any(rack(m) == b_rack for m in members)
    members = [m for i, m in enumerate(filled) if m is not None and i != position]
    region_use = sum(region_of(rack(m)) == b_region for m in members) if policy.region_aware else 0
    rack_use = sum(rack(m) == b_rack for m in members) if policy.rack_aware else 0
    return (region_repeats, rack_repeats, region_use, rack_use)


def replacements(
    policy: PlacementPolicy,
    candidates: Iterable[str],
    ensemble: Sequence[str],
    index: int,
    write_quorum: int,
    racks: Mapping[str, str],
) -> list[str]:
    """The ``candidates`` not in ``ensemble`` that may replace its bookie at ``index``
    (re-replication of a lost replica), best first: those with which every write set meets
    the policy's minimums (else falls least short of them, regions first), then those
    adding least repetition at ``index`` as :func:`place` ranks them; equals keep their
    order in ``candidates`` (the caller's preference, e.g. the least loaded first)."""

    def key(b: str) -> tuple[int, ...]:
        trial = list(ensemble)
        trial[index] = b
        short = shortfall(policy, trial, write_quorum, racks)
        return (
            max(0, short.regions_wanted - short.regions),
            max(0, short.racks_wanted - short.racks),
            *_cost(policy, ensemble, write_quorum, racks, index, b),
        )

    return sorted((b for b in candidates if b not in ensemble), key=key)


def regions_needed(
    policy: PlacementPolicy,
    ensemble: Sequence[str],
    write_quorum: int,
    racks: Mapping[str, str],
) -> list[int]:
    """For each write set (by ``entry_id % E``): how many regions its acknowledging
    bookies must be in (1 without region awareness)."""
    if not policy.region_aware:
        return [1] * len(ensemble)
    rack = [racks.get(b, DEFAULT_RACK) for b in ensemble]
    return [
        min(policy.min_regions_for_durability, len({region_of(rack[i]) for i in ws}))
        for ws in shared_write_sets(len(ensemble), write_quorum)
    ]


_T = TypeVar("_T")
_SHAPES_MAX = 256
_shapes: dict[tuple[object, ...], tuple[object, ...]] = {}
"""Equal tuples of :func:`ensemble_regions`, one kept for all (bounded)."""


def _shared(shape: tuple[_T, ...]) -> tuple[_T, ...]:
    found = _shapes.get(shape)
    if found is None:
        if len(_shapes) >= _SHAPES_MAX:
            _shapes.clear()
        found = _shapes[shape] = shape
    return found  # type: ignore[return-value]


def ensemble_regions(
    policy: PlacementPolicy,
    ensemble: Sequence[str],
    write_quorum: int,
    racks: Mapping[str, str],
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The region of each position of ``ensemble`` and :func:`regions_needed`, as tuples
    shared with every caller that got equal ones (a ledger handle keeps both, and most
    handles of a broker have the same few)."""
    regions = tuple(region_of(racks.get(b, DEFAULT_RACK)) for b in ensemble)
    needed = tuple(regions_needed(policy, ensemble, write_quorum, racks))
    return _shared(regions), _shared(needed)


def durable(acked: Collection[int], ack_quorum: int, needed: int, regions: Sequence[str]) -> bool:
    """Whether an entry acknowledged by the ensemble positions ``acked`` may be confirmed:
    at least ``ack_quorum`` of them, in at least ``needed`` distinct ``regions`` (the region
    of each position)."""
    if len(acked) < ack_quorum:
        return False
    return needed <= 1 or len({regions[i] for i in acked}) >= needed
