"""The leader's scheduler as exact change lists at logical times (no I/O, no clock)."""

from __future__ import annotations

from magnetar.functions.scheduler import AssignmentChange as C
from magnetar.functions.scheduler import Scheduler


def _keys(fqfn: str, n: int) -> list[str]:
    return [f"{fqfn}:{i}" for i in range(n)]


def _applied(current: dict[str, str], changes: list[C]) -> dict[str, str]:
    out = dict(current)
    for c in changes:
        if c.worker_id is None:
            out.pop(c.instance_key, None)
        else:
            out[c.instance_key] = c.worker_id
    return out


def test_new_instances_go_round_robin_to_the_least_loaded() -> None:
    s = Scheduler(grace_ms=1000)
    assert s.plan(_keys("t/n/f", 3), {}, ["w2", "w1"], now_ms=0) == [
        C("t/n/f:0", "w1"), C("t/n/f:1", "w2"), C("t/n/f:2", "w1"),
    ]  # fmt: skip
    current = {"t/n/f:0": "w1", "t/n/f:1": "w2", "t/n/f:2": "w1"}
    # a second function fills the less loaded worker first
    assert s.plan(_keys("t/n/f", 3) + _keys("t/n/g", 1), current, ["w1", "w2"], 0) == [
        C("t/n/g:0", "w2")
    ]
    assert s.plan(_keys("t/n/f", 3), current, ["w1", "w2"], 0) == []  # stable


def test_removed_instances_get_tombstones() -> None:
    s = Scheduler()
    current = {"t/n/f:0": "w1", "t/n/f:1": "w2", "t/n/gone:0": "w1"}
    assert s.plan(_keys("t/n/f", 1), current, ["w1", "w2"], 0) == [
        C("t/n/f:1", None), C("t/n/gone:0", None),
    ]  # fmt: skip


def test_departed_worker_keeps_its_instances_for_the_grace_period_only() -> None:
    s = Scheduler(grace_ms=5000)
    current = {"t/n/f:0": "w1", "t/n/f:1": "w2"}
    wanted = _keys("t/n/f", 2)
    assert s.plan(wanted, current, ["w2"], now_ms=10_000) == []  # w1 first missed at 10 s
    assert s.next_deadline_ms() == 15_000
    assert s.plan(wanted, current, ["w2"], now_ms=14_999) == []
    assert s.plan(wanted, current, ["w2"], now_ms=15_000) == [C("t/n/f:0", "w2")]


def test_worker_back_within_grace_keeps_its_instances_and_its_clock_restarts() -> None:
    s = Scheduler(grace_ms=5000)
    current = {"t/n/f:0": "w1"}
    assert s.plan(["t/n/f:0"], current, ["w2"], now_ms=0) == []
    assert s.plan(["t/n/f:0"], current, ["w1", "w2"], now_ms=4000) == []
    assert s.next_deadline_ms() is None
    assert s.plan(["t/n/f:0"], current, ["w2"], now_ms=8000) == []  # missed again at 8 s
    assert s.plan(["t/n/f:0"], current, ["w2"], now_ms=13_000) == [C("t/n/f:0", "w2")]


def test_no_members_assigns_nothing() -> None:
    assert Scheduler().plan(_keys("t/n/f", 2), {}, [], 0) == []


def test_drain_moves_a_workers_instances_and_keeps_it_empty() -> None:
    s = Scheduler()
    current = {"t/n/f:0": "w1", "t/n/f:1": "w2", "t/n/f:2": "w1"}
    s.drain("w1")
    changes = s.plan(_keys("t/n/f", 3), current, ["w1", "w2", "w3"], 0)
    assert changes == [C("t/n/f:0", "w3"), C("t/n/f:2", "w2")]
    current = _applied(current, changes)
    assert s.plan(_keys("t/n/f", 4), current, ["w1", "w2", "w3"], 0) == [C("t/n/f:3", "w3")]
    # once it leaves, it is no longer draining; back, it gets work again
    s.plan([], {}, ["w2", "w3"], 0)
    assert s.draining == frozenset()


def test_rebalance_spreads_evenly_and_moves_only_what_changes() -> None:
    s = Scheduler()
    current = {k: "w1" for k in _keys("t/n/f", 4)}
    changes = s.rebalance(_keys("t/n/f", 4), current, ["w1", "w2"])
    assert changes == [C("t/n/f:1", "w2"), C("t/n/f:3", "w2")]
    assert sorted(_applied(current, changes).values()) == ["w1", "w1", "w2", "w2"]
