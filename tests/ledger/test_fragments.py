"""Fragment geometry and the re-replication plan (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from magnetar.ledger.fragments import (
    Fragment,
    FragmentChanged,
    fragments_of,
    missing_replicas,
    plan_rereplication,
    replace_replica,
)
from magnetar.ledger.metadata import LedgerMetadata, LedgerState

# E=3, Qw=2: entry e on indexes e%3 and (e+1)%3. Fragment 0..4 on a,b,c; 5.. on a,d,c.
OPEN = LedgerMetadata(
    ledger_id=7,
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    ensembles=((0, ("a", "b", "c")), (5, ("a", "d", "c"))),
)
CLOSED = replace(OPEN, state=LedgerState.CLOSED, last_entry_id=9)


def test_fragments_of_an_open_ledger_leave_the_last_one_to_its_writer() -> None:
    assert fragments_of(OPEN) == [
        Fragment(0, 4, ("a", "b", "c")),
        Fragment(5, None, ("a", "d", "c")),
    ]
    assert fragments_of(CLOSED)[1] == Fragment(5, 9, ("a", "d", "c"))


def test_missing_replicas_are_the_sealed_fragments_on_departed_bookies() -> None:
    assert missing_replicas(OPEN, {"a", "c", "d"}) == [(Fragment(0, 4, ("a", "b", "c")), 1)]
    assert missing_replicas(OPEN, {"b", "c", "d"}) == [(Fragment(0, 4, ("a", "b", "c")), 0)]
    assert missing_replicas(CLOSED, {"b", "c", "d"}) == [
        (Fragment(0, 4, ("a", "b", "c")), 0),
        (Fragment(5, 9, ("a", "d", "c")), 0),
    ]
    assert missing_replicas(CLOSED, {"a", "b", "c", "d"}) == []


def test_the_plan_copies_exactly_the_entries_the_missing_index_held() -> None:
    plan = plan_rereplication(CLOSED, 0, 1, "b", "e")
    assert plan is not None
    # index 1 holds e with e%3 == 1 (first replica) or (e+1)%3 == 1 (second): 0, 1, 3, 4
    assert list(plan.entries()) == [0, 1, 3, 4]
    assert plan.sources(0) == ["a"]  # write set [a, b]
    assert plan.sources(1) == ["c"]  # write set [b, c]
    assert replace_replica(CLOSED, plan).ensembles == (
        (0, ("a", "e", "c")),
        (5, ("a", "d", "c")),
    )


def test_a_fragment_with_no_entries_needs_only_the_metadata_change() -> None:
    # an ensemble change at entry 5, then closed at entry 4: the second fragment is empty
    closed_at_4 = replace(OPEN, state=LedgerState.CLOSED, last_entry_id=4)
    plan = plan_rereplication(closed_at_4, 5, 0, "a", "e")
    assert plan is not None and list(plan.entries()) == []
    assert replace_replica(closed_at_4, plan).ensembles[1] == (5, ("e", "d", "c"))


def test_nothing_to_do_when_the_replica_was_already_replaced() -> None:
    done = replace(CLOSED, ensembles=((0, ("a", "e", "c")), (5, ("a", "d", "c"))))
    assert plan_rereplication(done, 0, 1, "b", "f") is None


def test_refusals() -> None:
    with pytest.raises(FragmentChanged):
        plan_rereplication(OPEN, 5, 0, "a", "e")  # the writer's fragment
    with pytest.raises(FragmentChanged):
        plan_rereplication(CLOSED, 3, 0, "a", "e")  # no fragment starts there
    with pytest.raises(ValueError):
        plan_rereplication(CLOSED, 0, 1, "b", "c")  # c already holds this fragment


def test_replacement_keeps_a_concurrent_ensemble_change_and_close() -> None:
    plan = plan_rereplication(OPEN, 0, 1, "b", "e")
    assert plan is not None
    # meanwhile the writer replaced d in its own fragment and closed the ledger
    now = replace(
        OPEN,
        ensembles=((0, ("a", "b", "c")), (5, ("a", "d", "c")), (8, ("a", "f", "c"))),
        state=LedgerState.CLOSED,
        last_entry_id=12,
    )
    assert replace_replica(now, plan) == replace(
        now, ensembles=((0, ("a", "e", "c")), (5, ("a", "d", "c")), (8, ("a", "f", "c")))
    )
    # a fragment whose range changed under the copy is refused
    shorter = replace(OPEN, ensembles=((0, ("a", "b", "c")), (3, ("a", "d", "c"))))
    with pytest.raises(FragmentChanged):
        replace_replica(shorter, plan)
    taken = replace(OPEN, ensembles=((0, ("a", "g", "c")), (5, ("a", "d", "c"))))
    with pytest.raises(FragmentChanged):
        replace_replica(taken, plan)
