"""The ledger replica state machine: exact effect lists at logical times."""

from __future__ import annotations

from dataclasses import replace

import pytest

from magnetar.broker.controller import (
    ControllerDeposed,
    CorruptRecord,
    DeleteReplicaState,
    ReplicaPolicy,
    ReplicaRecord,
    ReplicaState,
    ReplicaStateMachine,
    ReplicateFragment,
    StaleControllerEpoch,
    WriteReplicaState,
)
from magnetar.ledger.metadata import LedgerMetadata, LedgerState
from magnetar.ledger.placement import PlacementPolicy

UR, RR = ReplicaState.UNDER_REPLICATED, ReplicaState.REREPLICATING
EPOCH = 5


def closed(
    ledger_id: int, *ensembles: tuple[int, tuple[str, ...]], last: int = 9
) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        ensembles=ensembles,
        state=LedgerState.CLOSED,
        last_entry_id=last,
    )


L1 = closed(1, (0, ("b1", "b2", "b3")))
L2 = closed(2, (0, ("b2", "b3", "b1")))


def machine(
    *ledgers: LedgerMetadata,
    live: tuple[str, ...] = ("b1", "b2", "b3", "b4"),
    policy: ReplicaPolicy | None = None,
    records: dict[int, ReplicaRecord] | None = None,
    epoch: int = EPOCH,
) -> ReplicaStateMachine:
    m = ReplicaStateMachine(
        epoch,
        policy=policy,
        ledgers={md.ledger_id: (md, 1) for md in ledgers},
        records=records,
        live_bookies=live,
    )
    return m


def task(
    ledger_id: int,
    index: int,
    missing: str,
    target: str,
    first: int = 0,
    attempt: int = 1,
    epoch: int = EPOCH,
) -> ReplicateFragment:
    return ReplicateFragment(ledger_id, first, index, missing, target, epoch, attempt)


def rereplicating(ledger_id: int, t: ReplicateFragment, since_ms: int) -> WriteReplicaState:
    return WriteReplicaState(ledger_id, ReplicaRecord(RR, EPOCH, since_ms, t), EPOCH)


def under(ledger_id: int, since_ms: int) -> WriteReplicaState:
    return WriteReplicaState(ledger_id, ReplicaRecord(UR, EPOCH, since_ms), EPOCH)


def with_replica(md: LedgerMetadata, first: int, index: int, bookie: str) -> LedgerMetadata:
    ensembles = tuple(
        (f, tuple(bookie if i == index and f == first else b for i, b in enumerate(ens)))
        for f, ens in md.ensembles
    )
    return replace(md, ensembles=ensembles)


def test_a_departed_bookie_makes_its_ledgers_rereplicate_until_healthy() -> None:
    m = machine(L1)
    assert m.start(0) == []
    t = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t, 100), t]
    assert m.state_of(1) is RR
    assert m.fragment_replicated(t, with_replica(L1, 0, 1, "b4"), 2, 200) == [
        DeleteReplicaState(1, EPOCH)
    ]
    assert m.state_of(1) is ReplicaState.HEALTHY
    assert m.tasks_in_flight == []


def test_every_missing_replica_of_a_ledger_in_turn_one_task_at_a_time() -> None:
    two = closed(1, (0, ("b1", "b2", "b3")), (5, ("b1", "b2", "b4")))
    m = machine(two, live=("b1", "b2", "b3", "b4", "b5"))
    assert m.start(0) == []
    first = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, first, 100), first]
    after_first = with_replica(two, 0, 1, "b4")
    second = task(1, 1, "b2", "b3", first=5)  # b4 is in that fragment: b3 (b5 by id after)
    assert m.fragment_replicated(first, after_first, 2, 200) == [
        rereplicating(1, second, 100),
        second,
    ]
    assert m.fragment_replicated(second, with_replica(after_first, 5, 1, "b3"), 3, 300) == [
        DeleteReplicaState(1, EPOCH)
    ]


def test_no_target_waits_under_replicated_and_a_new_bookie_takes_part_at_once() -> None:
    m = machine(L1, live=("b1", "b2", "b3"))
    assert m.start(0) == []
    assert m.bookie_left("b2", 100) == [under(1, 100)]
    assert m.tick(5_000) == []
    t = task(1, 1, "b2", "b9")
    assert m.bookie_joined("b9", 6_000) == [rereplicating(1, t, 100), t]


def test_a_bookie_back_before_the_copy_makes_its_ledgers_healthy() -> None:
    m = machine(L1, live=("b1", "b2", "b3"))
    assert m.start(0) == []
    assert m.bookie_left("b2", 100) == [under(1, 100)]
    assert m.bookie_joined("b2", 200) == [DeleteReplicaState(1, EPOCH)]


def test_failed_tasks_retry_after_a_bounded_doubling_backoff() -> None:
    policy = ReplicaPolicy(retry_backoff_initial_ms=1_000, retry_backoff_max_ms=3_000)
    m = machine(L1, policy=policy)
    m.start(0)
    t1 = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t1, 100), t1]
    assert m.fragment_failed(t1, 200) == [under(1, 100)]
    assert m.tick(1_199) == []
    t2 = task(1, 1, "b2", "b4", attempt=2)
    assert m.tick(1_200) == [rereplicating(1, t2, 100), t2]
    assert m.fragment_failed(t2, 1_300) == [under(1, 100)]
    assert m.tick(3_299) == []  # 2 000 ms now
    t3 = task(1, 1, "b2", "b4", attempt=3)
    assert m.tick(3_300) == [rereplicating(1, t3, 100), t3]
    assert m.fragment_failed(t3, 3_400) == [under(1, 100)]
    assert m.tick(6_399) == []  # 4 000 ms would be past the bound: 3 000 ms
    t4 = task(1, 1, "b2", "b4", attempt=4)
    assert m.tick(6_400) == [rereplicating(1, t4, 100), t4]
    # an answer to a task no longer current changes nothing
    assert m.fragment_failed(t1, 6_500) == []


def test_an_unanswered_task_times_out_as_failed() -> None:
    m = machine(L1, policy=ReplicaPolicy(task_timeout_ms=10_000))
    m.start(0)
    t1 = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t1, 100), t1]
    assert m.tick(10_099) == []
    assert m.tick(10_100) == [under(1, 100)]
    t2 = task(1, 1, "b2", "b4", attempt=2)
    assert m.tick(11_100) == [rereplicating(1, t2, 100), t2]


def test_a_task_whose_target_left_is_reassigned_at_once() -> None:
    m = machine(L1, live=("b1", "b2", "b3", "b4", "b5"))
    m.start(0)
    t1 = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t1, 100), t1]
    t2 = task(1, 1, "b2", "b5")
    assert m.bookie_left("b4", 200) == [rereplicating(1, t2, 100), t2]
    assert m.fragment_replicated(t1, with_replica(L1, 0, 1, "b4"), 2, 300) == []  # superseded


def test_tasks_in_flight_are_bounded_and_targets_spread() -> None:
    l3 = closed(3, (0, ("b3", "b1", "b2")))
    m = ReplicaStateMachine(
        EPOCH,
        policy=ReplicaPolicy(tasks_in_flight_max=2),
        ledgers={md.ledger_id: (md, 1) for md in (L1, L2, l3)},
        live_bookies=("b1", "b2", "b3", "b4", "b5"),
    )
    m.start(0)
    t1 = task(1, 1, "b2", "b4")
    t2 = task(2, 0, "b2", "b5")  # b4 has one task already
    assert m.bookie_left("b2", 100) == [
        rereplicating(1, t1, 100),
        t1,
        rereplicating(2, t2, 100),
        t2,
        under(3, 100),
    ]
    t3 = task(3, 2, "b2", "b4")
    assert m.fragment_replicated(t1, with_replica(L1, 0, 1, "b4"), 2, 200) == [
        DeleteReplicaState(1, EPOCH),
        rereplicating(3, t3, 100),
        t3,
    ]


def test_the_writers_fragment_waits_until_the_ledger_is_closed() -> None:
    open_l1 = replace(L1, state=LedgerState.OPEN, last_entry_id=-1)
    m = machine(open_l1)
    m.start(0)
    assert m.bookie_left("b2", 100) == []  # the writer replaces b2 by an ensemble change
    assert m.state_of(1) is ReplicaState.HEALTHY
    t = task(1, 1, "b2", "b4")
    closed_l1 = replace(open_l1, state=LedgerState.CLOSED, last_entry_id=3)
    assert m.ledger_changed(closed_l1, 2, 200) == [rereplicating(1, t, 200), t]


def test_a_late_older_metadata_view_is_ignored() -> None:
    m = machine(L1)
    m.start(0)
    t = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t, 100), t]
    healed = with_replica(L1, 0, 1, "b4")
    assert m.fragment_replicated(t, healed, 3, 200) == [DeleteReplicaState(1, EPOCH)]
    assert m.ledger_changed(L1, 2, 300) == []  # the version before the worker's write
    assert m.metadata(1) == healed


def test_a_deleted_ledger_loses_its_state_and_its_tasks_answer_is_ignored() -> None:
    m = machine(L1)
    m.start(0)
    t = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t, 100), t]
    assert m.ledger_deleted(1, 200) == [DeleteReplicaState(1, EPOCH)]
    assert m.tasks_in_flight == []
    assert m.fragment_failed(t, 300) == []
    assert m.ledger_deleted(1, 400) == []


def test_answers_of_other_epochs() -> None:
    m = machine(L1)
    m.start(0)
    t = task(1, 1, "b2", "b4")
    assert m.bookie_left("b2", 100) == [rereplicating(1, t, 100), t]
    with pytest.raises(StaleControllerEpoch):
        m.fragment_failed(replace(t, epoch=EPOCH - 1), 200)
    assert m.tasks_in_flight == [t]
    with pytest.raises(ControllerDeposed):
        m.fragment_failed(replace(t, epoch=EPOCH + 1), 200)
    with pytest.raises(ControllerDeposed):
        m.tick(300)
    m2 = machine(L1)
    assert m2.epoch_changed(EPOCH) == []
    m2.epoch_changed(EPOCH + 1)
    with pytest.raises(ControllerDeposed):
        m2.start(0)
    with pytest.raises(StaleControllerEpoch):
        machine(L1, records={1: ReplicaRecord(UR, EPOCH + 1, 0)})


def test_a_new_controller_resumes_the_persisted_states() -> None:
    l3 = closed(3, (0, ("b1", "b3", "b4")))
    old = EPOCH - 1
    to_live = task(1, 1, "b2", "b4", epoch=old)
    to_dead = task(2, 0, "b2", "b9", epoch=old)
    records = {
        1: ReplicaRecord(RR, old, 10, to_live),
        2: ReplicaRecord(RR, old, 20, to_dead),
        3: ReplicaRecord(UR, old, 30),  # healthy now: b2 is not in its ensemble
        4: ReplicaRecord(UR, old, 40),  # deleted since
    }
    m = machine(L1, L2, l3, live=("b1", "b3", "b4", "b5"), records=records)
    resent = replace(to_live, epoch=EPOCH)
    reassigned = task(2, 0, "b2", "b5")
    assert m.start(1_000) == [
        rereplicating(1, resent, 10),
        resent,
        rereplicating(2, reassigned, 20),
        reassigned,
        DeleteReplicaState(4, EPOCH),
        DeleteReplicaState(3, EPOCH),
    ]
    with pytest.raises(StaleControllerEpoch):
        m.fragment_replicated(to_live, with_replica(L1, 0, 1, "b4"), 2, 1_100)
    assert m.fragment_replicated(resent, with_replica(L1, 0, 1, "b4"), 2, 1_100) == [
        DeleteReplicaState(1, EPOCH)
    ]


def test_records_round_trip_and_corrupt_ones_are_refused() -> None:
    for record in (
        ReplicaRecord(UR, 3, 1_000),
        ReplicaRecord(RR, 3, 1_000, task(9, 2, "b2", "b4", first=100, attempt=3, epoch=3)),
    ):
        assert ReplicaRecord.from_bytes(record.to_bytes()) == record
    for data in (
        b"",
        b"[]",
        b'{"state":"Healthy"}',
        b'{"state":"Rereplicating","epoch":1,"sinceMs":0}',
        b'{"state":"Nope","epoch":1,"sinceMs":0}',
    ):
        with pytest.raises(CorruptRecord):
            ReplicaRecord.from_bytes(data)
    with pytest.raises(ValueError):
        ReplicaPolicy(tasks_in_flight_max=0)


def test_a_persisted_task_already_done_is_not_sent_again() -> None:
    # The worker replaced b2 by b4, but the controller that assigned it was deposed before
    # it recorded the answer: the next one must not send the task again (its target is in
    # the ensemble now), and finds the ledger healthy.
    old = EPOCH - 1
    done = task(1, 1, "b2", "b4", epoch=old)
    m = machine(
        with_replica(L1, 0, 1, "b4"),
        live=("b1", "b3", "b4", "b5"),
        records={1: ReplicaRecord(RR, old, 10, done)},
    )
    assert m.start(1_000) == [DeleteReplicaState(1, EPOCH)]
    # its missing bookie came back: nothing to copy either
    m = machine(L1, live=("b1", "b2", "b3", "b4"), records={1: ReplicaRecord(RR, old, 10, done)})
    assert m.start(1_000) == [DeleteReplicaState(1, EPOCH)]


def test_only_bookies_running_a_worker_are_targets() -> None:
    """A bookie started with autorecovery off registers no worker: it is never a target;
    a task towards a bookie whose worker went is reassigned at once (no failure counted),
    and a ledger with no worker to copy it waits until one registers."""
    m = ReplicaStateMachine(
        EPOCH,
        ledgers={1: (L1, 1), 2: (L2, 1)},
        live_bookies=("b1", "b2", "b3", "b4", "b5"),
        workers=("b1", "b2", "b3", "b5"),
    )
    assert m.start(0) == []
    t1, t2 = task(1, 1, "b2", "b5"), task(2, 0, "b2", "b5")
    assert m.bookie_left("b2", 10) == [rereplicating(1, t1, 10), t1, rereplicating(2, t2, 10), t2]
    # b5's worker goes (b5 stays registered): b4 runs none, so nothing can copy.
    assert m.workers_changed(("b1", "b3"), 20) == [under(1, 10), under(2, 10)]
    assert m.tasks_in_flight == []
    assert m.workers_changed(("b1", "b3"), 30) == []
    # b4's worker starts: it takes both at once, first attempts still.
    u1, u2 = task(1, 1, "b2", "b4"), task(2, 0, "b2", "b4")
    assert m.workers_changed(("b1", "b3", "b4"), 40) == [
        rereplicating(1, u1, 10),
        u1,
        rereplicating(2, u2, 10),
        u2,
    ]


def test_a_resumed_task_towards_a_bookie_without_worker_is_replanned() -> None:
    t = task(1, 1, "b2", "b4", epoch=EPOCH - 1)
    m = ReplicaStateMachine(
        EPOCH,
        ledgers={1: (L1, 1)},
        records={1: ReplicaRecord(RR, EPOCH - 1, 0, t)},
        live_bookies=("b1", "b3", "b4", "b5"),
        workers=("b5",),
    )
    u = task(1, 1, "b2", "b5")
    assert m.start(100) == [rereplicating(1, u, 0), u]


def test_the_target_keeps_the_ensemble_within_the_placement_policy() -> None:
    """w1 lost from a ledger placed over two regions: the west spare is the target, though
    the east ones have fewer tasks or sort first; once the racks say w2 moved east, the
    next task falls back to the least loaded (by id). Without racks, the least loaded."""
    racks = {"e1": "/east/r1", "e2": "/east/r2", "e3": "/east/r1", "w1": "/west/r1"}
    racks["w2"] = "/west/r2"
    ledger = replace(closed(1, (0, ("e1", "w1"))), ensemble_size=2)
    other = replace(closed(2, (0, ("e1", "w1"))), ensemble_size=2)
    m = ReplicaStateMachine(
        EPOCH,
        policy=ReplicaPolicy(placement=PlacementPolicy(region_aware=True)),
        ledgers={1: (ledger, 1), 2: (other, 1)},
        live_bookies=tuple(racks),
        racks=racks,
    )
    assert m.start(0) == []
    t1 = task(1, 1, "w1", "w2")
    (*_, t2) = m.bookie_left("w1", 10)
    assert m.tasks_in_flight[0] == t1
    assert t2 == task(2, 1, "w1", "w2")  # the region outranks w2's load
    m.racks_changed({**racks, "w2": "/east/r3"})
    assert m.fragment_failed(t2, 20) == [under(2, 10)]
    retried = m.tick(20 + ReplicaPolicy().backoff_ms(1))
    assert retried[-1] == task(2, 1, "w1", "e2", attempt=2)  # e2: another rack than e1

    plain = ReplicaStateMachine(
        EPOCH, ledgers={1: (ledger, 1)}, live_bookies=tuple(racks), racks={}
    )
    assert plain.start(0) == []
    assert plain.bookie_left("w1", 10)[-1] == task(1, 1, "w1", "e2")
