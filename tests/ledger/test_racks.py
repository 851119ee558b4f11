"""Rack-aware choice of bookies (:mod:`magnetar.ledger.racks`): an ensemble spans as many
racks as it can, whatever the random order; replicas share a rack only when there are too
few racks."""

from __future__ import annotations

import random

import pytest

from magnetar.ledger.racks import (
    DEFAULT_RACK,
    InvalidRackConfiguration,
    normalized_rack,
    parse_configuration,
    place,
    racks_of,
)

RACKS = {"b1": "/r1", "b2": "/r1", "b3": "/r1", "b4": "/r2", "b5": "/r3"}
"""Three bookies on one rack, one on each of two others."""


@pytest.mark.parametrize("seed", range(200))
def test_an_ensemble_spans_as_many_racks_as_it_can(seed: int) -> None:
    rng = random.Random(seed)
    for count, racks_wanted in ((2, 2), (3, 3), (4, 3), (5, 3)):
        chosen = place(RACKS, count, RACKS, rng)
        assert len(set(chosen)) == count
        assert len({RACKS[b] for b in chosen}) == racks_wanted, chosen


@pytest.mark.parametrize("seed", range(100))
def test_an_ensemble_change_avoids_the_racks_kept(seed: int) -> None:
    rng = random.Random(seed)
    # b4 (/r2) failed; b1 (/r1) and b5 (/r3) stay: only /r1 has candidates left, so the
    # replacement shares a rack
    assert place(["b2", "b3"], 1, RACKS, rng, kept=["b1", "b5"])[0] in {"b2", "b3"}
    # b1 failed, b2 (/r1) stays: the replacement is on /r2 or /r3, not on /r1
    replacement = place(["b3", "b4", "b5"], 1, RACKS, rng, kept=["b2"])
    assert RACKS[replacement[0]] in {"/r2", "/r3"}


@pytest.mark.parametrize("seed", range(50))
def test_bookies_without_a_rack_share_the_default_one(seed: int) -> None:
    rng = random.Random(seed)
    racks = {"b1": "/r1"}
    chosen = place(["b1", "b2", "b3"], 2, racks, rng)
    assert "b1" in chosen  # b2 and b3 are both on the default rack
    assert place(["b2", "b3"], 2, racks, rng) in (["b2", "b3"], ["b3", "b2"])


def test_without_racks_every_candidate_is_picked_sometimes() -> None:
    rng = random.Random(1)
    seen = {b for _ in range(100) for b in place(["a", "b", "c", "d"], 2, {}, rng)}
    assert seen == {"a", "b", "c", "d"}


def test_too_few_candidates_is_a_programmer_error() -> None:
    with pytest.raises(ValueError):
        place(["a"], 2, {}, random.Random(0))


def test_the_stored_configuration_as_pulsar_writes_it() -> None:
    stored = (
        b'{"default": {"127.0.0.1:3181": {"rack": "rack-a", "hostname": "h1"},'
        b' "127.0.0.1:3182": {"rack": "/region/rack-b"}, "127.0.0.1:3183": {}},'
        b' "other": {"127.0.0.1:3181": {"rack": "/elsewhere"}}}'
    )
    assert racks_of(parse_configuration(stored)) == {
        "127.0.0.1:3181": "/rack-a",
        "127.0.0.1:3182": "/region/rack-b",
    }
    assert parse_configuration(b"") == {}
    for bad in (b"[]", b"{", b'{"default": 3}'):
        with pytest.raises(InvalidRackConfiguration):
            parse_configuration(bad)
    for bad_rack in ("", "/", " "):
        with pytest.raises(InvalidRackConfiguration):
            normalized_rack(bad_rack)
    assert DEFAULT_RACK == "/default-rack"
