"""Ensemble placement and the durability rule (:mod:`magnetar.ledger.placement`): write sets
span as many racks (and, region-aware, regions) as they can, whatever the random order;
a policy that enforces its minimums refuses a placement that falls short; an entry is
durable only with acks from enough regions. Randomized cases run over fixed seeds; a failing
case names its seed in the test id."""

from __future__ import annotations

import itertools
import random

import pytest

from magnetar.ledger.errors import NotEnoughBookies
from magnetar.ledger.placement import (
    DEFAULT_REGION,
    PlacementPolicy,
    PlacementUnmet,
    durable,
    place,
    region_of,
    regions_needed,
    replacements,
    shortfall,
    write_sets,
)

RACK_AWARE = PlacementPolicy()
REGION_AWARE = PlacementPolicy(region_aware=True)
ENFORCED = PlacementPolicy(region_aware=True, enforce_min=True)

RACKS = {"b1": "/r1", "b2": "/r1", "b3": "/r1", "b4": "/r2", "b5": "/r3"}
"""Three bookies on one rack, one on each of two others."""

TWO_REGIONS = {
    "e1": "/east/r1",
    "e2": "/east/r2",
    "e3": "/east/r1",
    "w1": "/west/r1",
    "w2": "/west/r2",
    "w3": "/west/r1",
}


def new(
    policy: PlacementPolicy,
    candidates: list[str] | dict[str, str],
    size: int,
    qw: int,
    racks: dict[str, str],
    rng: random.Random,
) -> list[str]:
    return place(policy, candidates, [None] * size, qw, racks, rng)


@pytest.mark.parametrize("seed", range(200))
def test_an_ensemble_spans_as_many_racks_as_it_can(seed: int) -> None:
    rng = random.Random(seed)
    for count, racks_wanted in ((2, 2), (3, 3), (4, 3), (5, 3)):
        chosen = new(RACK_AWARE, list(RACKS), count, count, RACKS, rng)
        assert len(set(chosen)) == count
        assert len({RACKS[b] for b in chosen}) == racks_wanted, chosen


@pytest.mark.parametrize("seed", range(100))
def test_an_ensemble_change_avoids_the_racks_kept(seed: int) -> None:
    rng = random.Random(seed)
    # b4 (/r2) failed; b1 (/r1) and b5 (/r3) stay: only /r1 has candidates left, so the
    # replacement shares a rack
    assert place(RACK_AWARE, ["b2", "b3"], ["b1", "b5", None], 3, RACKS, rng)[2] in {"b2", "b3"}
    # b1 failed, b2 (/r1) stays: the replacement is on /r2 or /r3, not on /r1
    replaced = place(RACK_AWARE, ["b3", "b4", "b5"], ["b2", None], 2, RACKS, rng)
    assert replaced[0] == "b2" and RACKS[replaced[1]] in {"/r2", "/r3"}


@pytest.mark.parametrize("seed", range(50))
def test_bookies_without_a_rack_share_the_default_one(seed: int) -> None:
    rng = random.Random(seed)
    racks = {"b1": "/r1"}
    assert "b1" in new(RACK_AWARE, ["b1", "b2", "b3"], 2, 2, racks, rng)
    assert sorted(new(RACK_AWARE, ["b2", "b3"], 2, 2, racks, rng)) == ["b2", "b3"]


def test_without_racks_every_candidate_is_picked_sometimes() -> None:
    rng = random.Random(1)
    seen = {b for _ in range(100) for b in new(RACK_AWARE, ["a", "b", "c", "d"], 2, 2, {}, rng)}
    assert seen == {"a", "b", "c", "d"}
    unaware = PlacementPolicy(rack_aware=False)
    seen = {b for _ in range(100) for b in new(unaware, list(RACKS), 2, 2, RACKS, rng)}
    assert seen == set(RACKS)  # rack-unaware: b1..b3 on one rack are picked together too


def test_too_few_candidates() -> None:
    with pytest.raises(NotEnoughBookies) as info:
        new(RACK_AWARE, ["a"], 2, 2, {}, random.Random(0))
    assert not isinstance(info.value, PlacementUnmet)


def test_the_region_of_a_rack() -> None:
    assert region_of("/east/r1") == "/east"
    assert region_of("/east/r1/shelf") == "/east"
    assert region_of("/r1") == "/r1"
    assert region_of("/default-rack") == DEFAULT_REGION


def test_write_sets_are_round_robin() -> None:
    assert write_sets(3, 3) == [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    assert write_sets(4, 2) == [(0, 1), (1, 2), (2, 3), (3, 0)]


SHAPES = [(2, 2), (3, 3), (3, 2), (4, 2), (4, 3), (4, 4), (5, 3), (6, 2)]
"""(E, Qw) pairs."""


def brute_force_best(
    policy: PlacementPolicy, candidates: list[str], size: int, qw: int, racks: dict[str, str]
) -> tuple[int, int]:
    """The most regions and, among those, racks that every write set of some ensemble of
    ``size`` of ``candidates`` spans (the naive search :func:`place` must match)."""
    best = (0, 0)
    for ensemble in itertools.permutations(candidates, size):
        short = shortfall(policy, list(ensemble), qw, racks)
        best = max(best, (short.regions, short.racks))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_region_aware_write_sets_span_regions_whenever_some_placement_does(seed: int) -> None:
    """Random universes of up to 6 bookies over up to 3 regions: whenever some ensemble has
    every write set over ``min(2, Qw)`` regions, the one placed does too."""
    rng = random.Random(seed)
    for _ in range(4):
        n = rng.randint(2, 6)
        racks = {f"b{i}": f"/region-{rng.randint(1, 3)}/rack-{rng.randint(1, 2)}" for i in range(n)}
        for size, qw in SHAPES:
            if size > n:
                continue
            want = min(2, qw)
            best_regions, _ = brute_force_best(REGION_AWARE, list(racks), size, qw, racks)
            chosen = new(REGION_AWARE, list(racks), size, qw, racks, rng)
            got = shortfall(REGION_AWARE, chosen, qw, racks)
            assert got.regions >= min(want, best_regions), (seed, racks, size, qw, chosen)
            if best_regions >= want:
                assert not got.regions < want


@pytest.mark.parametrize("seed", range(100))
def test_two_regions_of_three_bookies(seed: int) -> None:
    rng = random.Random(seed)
    for size, qw in SHAPES:
        if (size, qw) == (3, 2):
            continue  # three write sets in a ring of three: one pair shares a region
        chosen = new(REGION_AWARE, list(TWO_REGIONS), size, qw, TWO_REGIONS, rng)
        for ws in write_sets(size, qw):
            assert {region_of(TWO_REGIONS[chosen[i]]) for i in ws} == {"/east", "/west"}
        if size <= 4:  # two racks per region: racks do not repeat in a region either
            assert len({TWO_REGIONS[b] for b in chosen}) == size, chosen


@pytest.mark.parametrize("seed", range(100))
def test_an_ensemble_change_keeps_both_regions(seed: int) -> None:
    rng = random.Random(seed)
    ensemble = new(REGION_AWARE, list(TWO_REGIONS), 4, 2, TWO_REGIONS, rng)
    lost = rng.randrange(4)
    partial: list[str | None] = [None if i == lost else b for i, b in enumerate(ensemble)]
    others = [b for b in TWO_REGIONS if b not in ensemble]
    changed = place(REGION_AWARE, others, partial, 2, TWO_REGIONS, rng)
    assert [b for i, b in enumerate(changed) if i != lost] == [
        b for i, b in enumerate(ensemble) if i != lost
    ]
    assert region_of(TWO_REGIONS[changed[lost]]) == region_of(TWO_REGIONS[ensemble[lost]])


@pytest.mark.parametrize("seed", range(50))
def test_a_region_gone_degrades_unless_enforced(seed: int) -> None:
    rng = random.Random(seed)
    east = [b for b in TWO_REGIONS if b.startswith("e")]
    ensemble = ["e1", "w1", "e2"]
    partial: list[str | None] = ["e1", None, "e2"]
    changed = place(REGION_AWARE, east, partial, 3, TWO_REGIONS, rng)
    assert changed[1] == "e3"
    short = shortfall(REGION_AWARE, changed, 3, TWO_REGIONS)
    assert short.degraded and short.regions == 1
    assert "1 region(s) of 2 wanted" in short.describe()
    with pytest.raises(PlacementUnmet, match="region"):
        place(ENFORCED, east, partial, 3, TWO_REGIONS, rng)
    with pytest.raises(PlacementUnmet):
        new(ENFORCED, east, 3, 3, TWO_REGIONS, rng)
    assert not shortfall(ENFORCED, ensemble, 3, TWO_REGIONS).degraded


def test_a_replacement_keeps_the_ensemble_over_regions_and_racks() -> None:
    # w1 lost from (e1, w1): only the west candidates keep two regions, and w2 is on
    # another rack than e1 as w3 is, but w3 shares w1's rack with nothing: both fine, by
    # the caller's order among equals
    order = replacements(REGION_AWARE, ["e2", "e3", "w3", "w2"], ["e1", "w1"], 1, 2, TWO_REGIONS)
    assert order[:2] == ["w3", "w2"]
    assert set(order[2:]) == {"e2", "e3"}
    assert order[2] == "e2"  # another rack than e1: only the rack minimum is met
    # without region awareness, racks alone: e2 and the west ones differ from e1's rack
    assert replacements(RACK_AWARE, ["e3", "e2"], ["e1", "w1"], 1, 2, TWO_REGIONS) == [
        "e2",
        "e3",
    ]
    # members of the ensemble are never candidates; none left: nothing to offer
    assert replacements(REGION_AWARE, ["e1", "w1"], ["e1", "w1"], 0, 2, TWO_REGIONS) == []


@pytest.mark.parametrize("seed", range(50))
def test_a_replacement_meets_the_policy_whenever_some_candidate_does(seed: int) -> None:
    rng = random.Random(seed)
    ensemble = new(REGION_AWARE, list(TWO_REGIONS), 4, 2, TWO_REGIONS, rng)
    lost = rng.randrange(4)
    candidates = [b for b in TWO_REGIONS if b not in ensemble]
    rng.shuffle(candidates)
    best = replacements(REGION_AWARE, candidates, ensemble, lost, 2, TWO_REGIONS)[0]
    fixed = [best if i == lost else b for i, b in enumerate(ensemble)]
    meets = [
        c
        for c in candidates
        if not shortfall(
            REGION_AWARE, [c if i == lost else b for i, b in enumerate(ensemble)], 2, TWO_REGIONS
        ).degraded
    ]
    assert meets, "a spare of the lost bookie's region fits"
    assert not shortfall(REGION_AWARE, fixed, 2, TWO_REGIONS).degraded, (seed, ensemble, best)


def test_enforced_racks() -> None:
    policy = PlacementPolicy(enforce_min=True)
    with pytest.raises(PlacementUnmet, match="rack"):
        new(policy, ["b1", "b2", "b3"], 2, 2, RACKS, random.Random(0))
    assert new(policy, ["b1", "b4"], 2, 2, RACKS, random.Random(0)) in (["b1", "b4"], ["b4", "b1"])
    # a minimum above Qw is capped at Qw
    capped = PlacementPolicy(enforce_min=True, min_racks_per_write_quorum=5)
    assert len(new(capped, list(RACKS), 3, 2, RACKS, random.Random(0))) == 3


def test_regions_needed_per_write_set() -> None:
    ensemble = ["e1", "w1", "e2", "e3"]
    assert regions_needed(REGION_AWARE, ensemble, 2, TWO_REGIONS) == [2, 2, 1, 1]
    assert regions_needed(REGION_AWARE, ensemble, 4, TWO_REGIONS) == [2, 2, 2, 2]
    assert regions_needed(RACK_AWARE, ensemble, 4, TWO_REGIONS) == [1, 1, 1, 1]
    three = PlacementPolicy(region_aware=True, min_regions_for_durability=3)
    assert regions_needed(three, ensemble, 4, TWO_REGIONS) == [2, 2, 2, 2]


def test_an_entry_is_durable_with_acks_from_enough_regions() -> None:
    regions = ["/east", "/east", "/west"]
    assert not durable({0, 1}, 2, 2, regions)  # Qa met, one region only
    assert durable({0, 2}, 2, 2, regions)
    assert durable({0, 1, 2}, 2, 2, regions)
    assert not durable({2}, 2, 2, regions)  # two regions... of one ack: Qa not met
    assert not durable({2}, 1, 2, regions)  # Qa met, one region only
    assert durable({0, 1}, 2, 1, regions)  # degraded (or not region-aware): Qa alone
    with pytest.raises(ValueError):
        PlacementPolicy(min_regions_for_durability=0)


def test_one_candidate_for_one_open_position_is_placed_with_its_shortfall() -> None:
    """The only way to fill the ensemble is taken as it is: a degraded result is returned
    (and logged by the client) unless the policy enforces its minimums."""
    racks = {"e1": "/east/r1", "e2": "/east/r2"}
    assert place(REGION_AWARE, ["e2"], ["e1", None], 2, racks, random.Random(1)) == ["e1", "e2"]
    with pytest.raises(PlacementUnmet):
        place(ENFORCED, ["e2"], ["e1", None], 2, racks, random.Random(1))
    assert place(ENFORCED, ["w1"], ["e1", None], 2, TWO_REGIONS, random.Random(1)) == ["e1", "w1"]
