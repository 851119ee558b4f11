"""The bundle state machine: exact effect lists at logical times."""

from __future__ import annotations

import pytest

from magnetar.broker.controller import (
    AssignBundle,
    BundleBusy,
    BundleId,
    BundleRecord,
    BundleState,
    BundleStateMachine,
    ControllerDeposed,
    ControllerPolicy,
    DeleteBundleState,
    LoadPolicy,
    LoadReport,
    NamespaceBundles,
    NamespaceLimitReached,
    ReleaseBundle,
    StaleControllerEpoch,
    UnknownBundle,
    WriteBundleState,
    WriteNamespaceBundles,
)
from magnetar.broker.controller.bundle_state import CorruptRecord

NS = "public/default"
ONE = NamespaceBundles(NS, (0, 0xFFFFFFFF))
TWO = NamespaceBundles(NS, (0, 0x80000000, 0xFFFFFFFF))
LOW, HIGH = TWO.bundles
WHOLE = ONE.bundles[0]
UNA, ASG, OWN, REL = (
    BundleState.UNASSIGNED,
    BundleState.ASSIGNING,
    BundleState.OWNED,
    BundleState.RELEASING,
)


def rec(
    state: BundleState,
    broker: str | None,
    epoch: int,
    since_ms: int,
    avoid: str | None = None,
    split: bool = False,
) -> BundleRecord:
    return BundleRecord(state, broker, epoch, since_ms, avoid, split)


def write(bundle: BundleId, record: BundleRecord) -> WriteBundleState:
    return WriteBundleState(bundle, record, record.epoch)


def owned_two(epoch: int = 1) -> BundleStateMachine:
    """LOW owned by b1, HIGH owned by b2, at ``epoch``, started."""
    m = BundleStateMachine(
        epoch,
        namespaces=[TWO],
        records={LOW: rec(OWN, "b1", epoch, 0), HIGH: rec(OWN, "b2", epoch, 0)},
        live_brokers=["b1", "b2"],
    )
    assert m.start(0) == []
    return m


def test_lookup_assigns_every_bundle_then_acks_make_them_owned() -> None:
    m = BundleStateMachine(3, policy=ControllerPolicy(default_bundle_count=2))
    assert m.start(0) == []
    assert m.broker_joined("b1", 10) == []
    assert m.broker_joined("b2", 10) == []
    effects = m.lookup("persistent://public/default/t", 100)
    assert effects == [
        WriteNamespaceBundles(TWO, 3),
        write(LOW, rec(ASG, "b1", 3, 100)),
        AssignBundle(LOW, "b1", 3),
        write(HIGH, rec(ASG, "b2", 3, 100)),  # b1 has one already: fewest bundles wins
        AssignBundle(HIGH, "b2", 3),
    ]
    assert m.owner_of(HIGH) is None  # not served until acknowledged
    assert m.ownership_acquired(HIGH, "b2", 3, 150) == [write(HIGH, rec(OWN, "b2", 3, 150))]
    assert m.owner_of(HIGH) == "b2"
    assert m.bundle_of("persistent://public/default/t") == HIGH
    assert m.ownership_acquired(HIGH, "b2", 3, 160) == []  # a repeated ack
    assert m.lookup("persistent://public/default/t", 170) == []


def test_no_broker_no_assignment_until_one_joins() -> None:
    m = BundleStateMachine(1)
    m.start(0)
    assert m.namespace_added(ONE, 5) == [WriteNamespaceBundles(ONE, 1)]
    assert m.tick(6) == []
    assert m.broker_joined("b1", 7) == [
        write(WHOLE, rec(ASG, "b1", 1, 7)),
        AssignBundle(WHOLE, "b1", 1),
    ]


def test_dead_broker_bundles_go_to_the_living() -> None:
    m = owned_two()
    assert m.broker_left("b1", 500) == [
        write(LOW, rec(UNA, None, 1, 500)),
        write(LOW, rec(ASG, "b2", 1, 500)),
        AssignBundle(LOW, "b2", 1),
    ]
    # a late ack from the dead broker changes nothing
    assert m.ownership_acquired(LOW, "b1", 1, 510) == []
    assert m.broker_left("b1", 520) == []
    # the last broker dies: everything is unassigned, nothing is assigned
    assert m.broker_left("b2", 600) == [
        write(LOW, rec(UNA, None, 1, 600)),
        write(HIGH, rec(UNA, None, 1, 600)),
    ]
    assert m.broker_joined("b3", 700) == [
        write(LOW, rec(ASG, "b3", 1, 700)),
        AssignBundle(LOW, "b3", 1),
        write(HIGH, rec(ASG, "b3", 1, 700)),
        AssignBundle(HIGH, "b3", 1),
    ]


def test_unload_releases_then_moves_to_another_broker() -> None:
    m = owned_two()
    assert m.broker_joined("b3", 50) == []
    assert m.unload_requested(LOW, 100) == [
        write(LOW, rec(REL, "b1", 1, 100, avoid="b1")),
        ReleaseBundle(LOW, "b1", 1),
    ]
    assert m.owner_of(LOW) is None  # no new lookups answered b1 while it lets go
    with pytest.raises(BundleBusy):
        m.unload_requested(LOW, 110)
    assert m.ownership_released(LOW, "b2", 1, 115) == []  # not b2's to release
    # b1 has 0 bundles after the release and b3 has 0: b1 is avoided, b3 takes it
    assert m.ownership_released(LOW, "b1", 1, 120) == [
        write(LOW, rec(UNA, None, 1, 120, avoid="b1")),
        write(LOW, rec(ASG, "b3", 1, 120)),
        AssignBundle(LOW, "b3", 1),
    ]
    assert m.ownership_acquired(LOW, "b3", 1, 130) == [write(LOW, rec(OWN, "b3", 1, 130))]
    with pytest.raises(UnknownBundle):
        m.unload_requested(BundleId.parse("x/y/0x00000000_0xffffffff"), 140)


def test_unload_with_one_broker_comes_back_to_it() -> None:
    m = BundleStateMachine(1, namespaces=[ONE], live_brokers=["b1"])
    m.start(0)
    m.ownership_acquired(WHOLE, "b1", 1, 1)
    m.unload_requested(WHOLE, 2)
    assert m.ownership_released(WHOLE, "b1", 1, 3) == [
        write(WHOLE, rec(UNA, None, 1, 3, avoid="b1")),
        write(WHOLE, rec(ASG, "b1", 1, 3)),
        AssignBundle(WHOLE, "b1", 1),
    ]


def test_unacknowledged_commands_are_resent_after_the_retry_time() -> None:
    m = BundleStateMachine(
        2,
        policy=ControllerPolicy(command_retry_ms=1000),
        namespaces=[ONE],
        live_brokers=["b1"],
    )
    assert m.start(0) == [write(WHOLE, rec(ASG, "b1", 2, 0)), AssignBundle(WHOLE, "b1", 2)]
    assert m.tick(999) == []
    assert m.tick(1000) == [AssignBundle(WHOLE, "b1", 2)]
    assert m.tick(1999) == []
    m.ownership_acquired(WHOLE, "b1", 2, 2000)
    assert m.tick(5000) == []


def test_split_of_unassigned_and_of_owned_bundles() -> None:
    m = BundleStateMachine(1, namespaces=[ONE])
    m.start(0)
    left, right = ONE.split(WHOLE)[1]
    assert m.split_requested(WHOLE, 10) == [
        WriteNamespaceBundles(NamespaceBundles(NS, (0, 0x7FFFFFFF, 0xFFFFFFFF)), 1),
        DeleteBundleState(WHOLE, 1),
        write(left, rec(UNA, None, 1, 10)),
        write(right, rec(UNA, None, 1, 10)),
    ]
    # an owned bundle is released first and split once released
    m2 = owned_two()
    quarter_a, quarter_b = TWO.split(LOW)[1]
    assert m2.split_requested(LOW, 20) == [
        write(LOW, rec(REL, "b1", 1, 20, avoid="b1", split=True)),
        ReleaseBundle(LOW, "b1", 1),
    ]
    with pytest.raises(BundleBusy):
        m2.split_requested(LOW, 21)
    assert m2.ownership_released(LOW, "b1", 1, 30) == [
        write(LOW, rec(UNA, None, 1, 30, avoid="b1", split=True)),
        WriteNamespaceBundles(NamespaceBundles(NS, (0, 0x40000000, 0x80000000, 0xFFFFFFFF)), 1),
        DeleteBundleState(LOW, 1),
        write(quarter_a, rec(UNA, None, 1, 30, avoid="b1")),
        write(quarter_b, rec(UNA, None, 1, 30, avoid="b1")),
        write(quarter_a, rec(ASG, "b2", 1, 30)),
        AssignBundle(quarter_a, "b2", 1),
        write(quarter_b, rec(ASG, "b2", 1, 30)),
        AssignBundle(quarter_b, "b2", 1),
    ]
    with pytest.raises(UnknownBundle):
        m2.split_requested(LOW, 40)


def test_overloaded_broker_sheds_its_busiest_bundle_one_per_tick() -> None:
    four = NamespaceBundles.default(NS)
    b = four.bundles
    records = {b[0]: rec(OWN, "b1", 1, 0), b[1]: rec(OWN, "b1", 1, 0), b[2]: rec(OWN, "b2", 1, 0)}
    m = BundleStateMachine(
        1,
        policy=ControllerPolicy(load=LoadPolicy(overload_cpu_percent=80.0)),
        namespaces=[four],
        records=records,
        live_brokers=["b1", "b2"],
    )
    start = m.start(0)
    assert start == [write(b[3], rec(ASG, "b2", 1, 0)), AssignBundle(b[3], "b2", 1)]
    m.ownership_acquired(b[3], "b2", 1, 1)
    rates = {b[0].name: 10.0, b[1].name: 500.0}
    m.load_reported(LoadReport("b1", 100, cpu_percent=95.0, bundle_msg_rates=rates), 100)
    m.load_reported(LoadReport("b2", 100, cpu_percent=20.0), 100)
    assert m.tick(200) == [
        write(b[1], rec(REL, "b1", 1, 200, avoid="b1")),
        ReleaseBundle(b[1], "b1", 1),
    ]
    # no second move from b1 until a report newer than the one that caused the first
    assert m.tick(300) == []
    assert m.ownership_released(b[1], "b1", 1, 310) == [
        write(b[1], rec(UNA, None, 1, 310, avoid="b1")),
        write(b[1], rec(ASG, "b2", 1, 310)),  # the overloaded broker takes nothing new
        AssignBundle(b[1], "b2", 1),
    ]
    m.ownership_acquired(b[1], "b2", 1, 320)
    m.load_reported(LoadReport("b1", 50, cpu_percent=99.0), 330)  # older: ignored
    assert m.tick(400) == []
    m.load_reported(LoadReport("b1", 400, cpu_percent=90.0, bundle_msg_rates=rates), 400)
    assert m.tick(500) == [
        write(b[0], rec(REL, "b1", 1, 500, avoid="b1")),
        ReleaseBundle(b[0], "b1", 1),
    ]
    # everyone overloaded: nowhere to move, nothing shed
    m.load_reported(LoadReport("b2", 600, cpu_percent=95.0), 600)
    m.load_reported(LoadReport("b1", 600, cpu_percent=95.0), 600)
    assert m.tick(700) == []


REBALANCE_AT_ONCE = ControllerPolicy(load=LoadPolicy(rebalance_owned_min_ms=0))


def test_count_rebalancing_leaves_a_bundle_just_placed_where_it_is() -> None:
    # b1 4, b2 4; the admin unloads b1's busy bundle onto b2 (3, 5): the rebalancer moves
    # one of b2's older bundles back, not the one just moved
    four, other = NamespaceBundles.default(NS), NamespaceBundles.default("t/x")
    records = {bundle: rec(OWN, "b1", 1, 0) for bundle in four.bundles}
    records |= {bundle: rec(OWN, "b2", 1, 0) for bundle in other.bundles}
    policy = ControllerPolicy(load=LoadPolicy(rebalance_owned_min_ms=10_000))
    m = BundleStateMachine(
        1, policy=policy, namespaces=[four, other], records=records, live_brokers=["b1", "b2"]
    )
    m.start(0)
    moved = four.bundles[0]
    m.unload_requested(moved, 20_000)
    m.ownership_released(moved, "b1", 1, 20_001)
    m.ownership_acquired(moved, "b2", 1, 20_002)
    m.load_reported(LoadReport("b2", 20_003, bundle_msg_rates={moved.name: 99.0}), 20_003)
    effects = m.tick(20_010)
    assert effects == [
        write(other.bundles[0], rec(REL, "b2", 1, 20_010, avoid="b2")),
        ReleaseBundle(other.bundles[0], "b2", 1),
    ]


def test_a_joining_broker_takes_bundles_by_count_one_move_at_a_time() -> None:
    four = NamespaceBundles.default(NS)
    b = four.bundles
    records = {
        b[0]: rec(OWN, "b1", 1, 0),
        b[1]: rec(OWN, "b1", 1, 0),
        b[2]: rec(OWN, "b2", 1, 0),
        b[3]: rec(OWN, "b2", 1, 0),
    }
    m = BundleStateMachine(
        1, policy=REBALANCE_AT_ONCE, namespaces=[four], records=records, live_brokers=["b1", "b2"]
    )
    assert m.start(0) == []
    assert m.tick(10) == []  # 2 and 2: balanced
    assert m.broker_joined("b3", 20) == []
    # 2, 2, 0: b1 (most, first by id) gives up its busiest bundle
    m.load_reported(LoadReport("b1", 25, bundle_msg_rates={b[1].name: 50.0}), 25)
    assert m.tick(30) == [
        write(b[1], rec(REL, "b1", 1, 30, avoid="b1")),
        ReleaseBundle(b[1], "b1", 1),
    ]
    assert m.tick(40) == []  # one move at a time: the release is in flight
    assert m.ownership_released(b[1], "b1", 1, 50) == [
        write(b[1], rec(UNA, None, 1, 50, avoid="b1")),
        write(b[1], rec(ASG, "b3", 1, 50)),
        AssignBundle(b[1], "b3", 1),
    ]
    assert m.tick(60) == []  # still in flight: being assigned
    m.ownership_acquired(b[1], "b3", 1, 70)
    assert m.tick(80) == []  # 1, 2, 1: within the spread
    assert m.owner_of(b[1]) == "b3"


def test_count_rebalancing_spreads_each_namespace() -> None:
    # b1 took both namespaces' bundles before b2 registered; with no rates reported the
    # moves alternate between namespaces, so each ends 2 and 2
    a, f = NamespaceBundles.default("t/a"), NamespaceBundles.default("t/f")
    records = {bundle: rec(OWN, "b1", 1, 0) for bundle in (*a.bundles, *f.bundles)}
    m = BundleStateMachine(
        1, policy=REBALANCE_AT_ONCE, namespaces=[a, f], records=records, live_brokers=["b1", "b2"]
    )
    m.start(0)
    for t in range(1, 5):
        [_, release] = m.tick(t * 10)
        assert isinstance(release, ReleaseBundle)
        m.ownership_released(release.bundle, "b1", 1, t * 10 + 1)
        m.ownership_acquired(release.bundle, "b2", 1, t * 10 + 2)
    assert m.tick(100) == []
    for ns in (a, f):
        assert sorted(m.owner_of(bundle) or "" for bundle in ns.bundles) == ["b1", "b1", "b2", "b2"]


def test_count_rebalancing_avoids_overloaded_brokers_and_can_be_off() -> None:
    four = NamespaceBundles.default(NS)
    records = {bundle: rec(OWN, "b1", 1, 0) for bundle in four.bundles}
    m = BundleStateMachine(
        1, policy=REBALANCE_AT_ONCE, namespaces=[four], records=records, live_brokers=["b1", "b2"]
    )
    m.start(0)
    m.load_reported(LoadReport("b2", 5, cpu_percent=99.0), 5)
    assert m.tick(10) == []  # the only broker with fewer bundles is overloaded
    off = BundleStateMachine(
        1,
        policy=ControllerPolicy(load=LoadPolicy(rebalance_count_spread_max=None)),
        namespaces=[four],
        records=records,
        live_brokers=["b1", "b2"],
    )
    off.start(0)
    assert off.tick(10) == []


def test_stale_and_newer_epochs() -> None:
    m = owned_two(epoch=5)
    with pytest.raises(StaleControllerEpoch):
        m.ownership_acquired(LOW, "b1", 4, 10)
    with pytest.raises(StaleControllerEpoch):
        m.ownership_released(LOW, "b1", 4, 10)
    assert m.epoch_changed(5) == [] and not m.deposed
    assert m.epoch_changed(6) == [] and m.deposed
    with pytest.raises(ControllerDeposed):
        m.tick(20)
    with pytest.raises(ControllerDeposed):
        m.broker_joined("b9", 20)
    # an ack stamped with a newer epoch also shows this controller was deposed
    m2 = owned_two(epoch=5)
    with pytest.raises(ControllerDeposed):
        m2.ownership_released(LOW, "b1", 6, 10)
    assert m2.deposed


def test_records_from_a_newer_epoch_are_refused() -> None:
    with pytest.raises(StaleControllerEpoch):
        BundleStateMachine(2, namespaces=[ONE], records={WHOLE: rec(OWN, "b1", 3, 0)})
    with pytest.raises(UnknownBundle):
        BundleStateMachine(2, namespaces=[TWO], records={WHOLE: rec(OWN, "b1", 1, 0)})


def test_resume_restamps_in_flight_commands_and_frees_dead_owners() -> None:
    four = NamespaceBundles.default(NS)
    b = four.bundles
    records = {
        b[0]: rec(OWN, "b1", 1, 0),  # owned by a live broker: untouched
        b[1]: rec(ASG, "b1", 1, 0),  # in flight: restamped and resent
        b[2]: rec(REL, "b2", 2, 0, avoid="b2"),  # in flight: restamped and resent
        b[3]: rec(OWN, "gone", 1, 0),  # its broker is not registered any more
    }
    m = BundleStateMachine(3, namespaces=[four], records=records, live_brokers=["b1", "b2"])
    assert m.start(1000) == [
        write(b[1], rec(ASG, "b1", 3, 0)),
        AssignBundle(b[1], "b1", 3),
        write(b[2], rec(REL, "b2", 3, 0, avoid="b2")),
        ReleaseBundle(b[2], "b2", 3),
        write(b[3], rec(UNA, None, 3, 1000)),
        write(b[3], rec(ASG, "b2", 3, 1000)),  # b1 holds 2, b2 holds 1
        AssignBundle(b[3], "b2", 3),
    ]
    # the acks of the previous controller's commands are stale
    with pytest.raises(StaleControllerEpoch):
        m.ownership_acquired(b[1], "b1", 1, 1001)
    assert m.ownership_acquired(b[1], "b1", 3, 1002) == [write(b[1], rec(OWN, "b1", 3, 1002))]


def test_an_owned_bundle_whose_broker_holds_no_node_is_assigned_again() -> None:
    # A whole cluster restarted: the new controller (epoch 2) resumes records OWNED at
    # epoch 1 by brokers registered again under the same ids, which hold no ownership node
    # and refuse the epoch-1 record. Seeing the node absent makes the bundle served again.
    records = {LOW: rec(OWN, "b1", 1, 0), HIGH: rec(OWN, "b2", 1, 0)}
    m = BundleStateMachine(2, namespaces=[TWO], records=records, live_brokers=["b1", "b2"])
    assert m.start(100) == []
    assert m.ownership_lost(LOW, "b2", 110) == []  # not b2's
    assert m.ownership_lost(LOW, "b1", 120) == [
        write(LOW, rec(UNA, None, 2, 120)),
        write(LOW, rec(ASG, "b1", 2, 120)),  # b1 holds 0, b2 holds 1
        AssignBundle(LOW, "b1", 2),
    ]
    assert m.ownership_lost(LOW, "b1", 125) == []  # ASSIGNING: the command is in flight
    assert m.ownership_acquired(LOW, "b1", 2, 130) == [write(LOW, rec(OWN, "b1", 2, 130))]
    assert m.owner_of(LOW) == "b1"
    # a bundle being released is not "lost": its release is acknowledged as usual
    m.unload_requested(HIGH, 140)
    assert m.ownership_lost(HIGH, "b2", 150) == []


def test_a_broker_holding_what_is_not_its_own_is_told_to_release() -> None:
    m = owned_two()
    assert m.ownership_acquired(LOW, "b2", 1, 5) == [ReleaseBundle(LOW, "b2", 1)]
    assert m.owner_of(LOW) == "b1"


def test_record_round_trip_and_corruption() -> None:
    record = rec(REL, "b1", 7, 123, avoid="b1", split=True)
    assert BundleRecord.from_bytes(record.to_bytes()) == record
    assert BundleRecord.from_bytes(rec(UNA, None, 1, 0).to_bytes()) == rec(UNA, None, 1, 0)
    for data in [b"", b"{}", b'{"state":"Gone","broker":null,"epoch":1,"sinceMs":0}', b"\xff"]:
        with pytest.raises(CorruptRecord):
            BundleRecord.from_bytes(data)
    with pytest.raises(ValueError):
        BundleRecord(OWN, None, 1, 0)


def test_namespaces_are_bounded() -> None:
    m = BundleStateMachine(1, policy=ControllerPolicy(namespaces_max=2))
    m.start(0)
    m.lookup("persistent://t/a/x", 1)
    m.lookup("persistent://t/b/x", 2)
    with pytest.raises(NamespaceLimitReached):
        m.lookup("persistent://t/c/x", 3)
    assert [ns.namespace for ns in m.namespaces] == ["t/a", "t/b"]
    assert m.lookup("persistent://t/a/y", 4) == []  # known namespaces still work


def test_a_new_namespace_spreads_over_brokers_even_when_one_holds_far_fewer() -> None:
    # b1 and b2 took the first namespace before b3 registered; a new namespace's bundles
    # go one per broker first (fewest of that namespace), then by count: not all to b3
    old, new = NamespaceBundles.default("t/old"), NamespaceBundles.default("t/new")
    records = {
        bundle: rec(OWN, "b1" if i % 2 else "b2", 1, 0) for i, bundle in enumerate(old.bundles)
    }
    m = BundleStateMachine(1, namespaces=[old], records=records, live_brokers=["b1", "b2", "b3"])
    m.start(0)
    effects = m.namespace_added(new, 10)
    placed = [e.broker for e in effects if isinstance(e, AssignBundle)]
    assert placed == ["b3", "b1", "b2", "b3"]


def test_a_rebalanced_bundle_goes_to_the_emptiest_broker_so_the_moves_end() -> None:
    # b1 holds 3 of t/a and 1 of t/f, b2 3 of t/f, b3 1 of t/a: a t/a bundle moved off b1
    # goes to b3 (fewest bundles), not to b2 (fewest of t/a), and so every move after it
    a, f = NamespaceBundles.default("t/a"), NamespaceBundles.default("t/f")
    owners = {"b1": [*a.bundles[:3], f.bundles[0]], "b2": f.bundles[1:], "b3": a.bundles[3:]}
    records = {bundle: rec(OWN, b, 1, 0) for b, held in owners.items() for bundle in held}
    m = BundleStateMachine(
        1, policy=REBALANCE_AT_ONCE, namespaces=[a, f], records=records,
        live_brokers=["b1", "b2", "b3"],
    )  # fmt: skip
    m.start(0)
    for t in range(1, 20):
        effects = m.tick(t * 10)
        if not effects:
            break
        release = effects[-1]
        assert isinstance(release, ReleaseBundle)
        assigned = [
            e for e in m.ownership_released(release.bundle, release.broker, 1, t * 10 + 1)
            if isinstance(e, AssignBundle)
        ]  # fmt: skip
        assert [e.broker for e in assigned] == ["b3"]
        m.ownership_acquired(release.bundle, "b3", 1, t * 10 + 2)
    counts = {b: 0 for b in ("b1", "b2", "b3")}
    for bundle in (*a.bundles, *f.bundles):
        counts[m.owner_of(bundle) or ""] += 1
    assert max(counts.values()) - min(counts.values()) <= 1, counts
