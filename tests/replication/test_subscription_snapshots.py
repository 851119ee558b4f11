"""The replicated-subscription rules without I/O
(:mod:`magnetar.replication.subscription_snapshots`): time is the ``now_ms`` each call gets,
snapshot ids come from a counter, and two or three cores exchange markers by hand the way
the replicators would carry them."""

from __future__ import annotations

import itertools

from magnetar.managed_ledger.position import Position
from magnetar.protocol.markers import Snapshot, SnapshotRequest, SnapshotResponse, Update
from magnetar.replication.subscription_snapshots import (
    MoveSubscription,
    SnapshotCache,
    SubscriptionSnapshots,
    WriteMarker,
)

P = Position


def _core(local: str = "east", **kwargs: int) -> SubscriptionSnapshots:
    ids = itertools.count(1)
    return SubscriptionSnapshots(local, lambda: f"{local}-{next(ids)}", **kwargs)


def _only_request(effects: list[object]) -> SnapshotRequest:
    assert len(effects) == 1
    effect = effects[0]
    assert isinstance(effect, WriteMarker) and isinstance(effect.marker, SnapshotRequest)
    assert effect.replicate_to == ()  # to every remote
    return effect.marker


def test_no_snapshot_without_traffic_and_one_per_tick_with_it() -> None:
    core = _core()
    subs = {"s": P(1, 0)}
    assert core.tick(1000, {"west"}, True, subs) == []  # idle: no marker
    core.on_data()
    request = _only_request(core.tick(2000, {"west"}, True, subs))
    assert request == SnapshotRequest("east-1", "east")
    assert core.pending == 1
    assert core.tick(3000, {"west"}, True, subs) == []  # no data since it started
    core.on_data()
    assert _only_request(core.tick(4000, {"west"}, True, subs)).snapshot_id == "east-2"


def test_no_snapshot_without_replicated_subscriptions_remotes_or_connections() -> None:
    core = _core()
    core.on_data()
    assert core.tick(1000, {"west"}, True, {}) == []
    assert core.tick(1000, set(), True, {"s": P(1, 0)}) == []
    assert core.tick(1000, {"west"}, False, {"s": P(1, 0)}) == []
    assert len(core.tick(1000, {"west"}, True, {"s": P(1, 0)})) == 1  # the data still counts


def test_a_request_from_another_cluster_is_answered_to_that_cluster_only() -> None:
    west = _core("west")
    effects = west.on_marker(P(4, 9), SnapshotRequest("east-1", "east"), "east", P(4, 12), {})
    assert effects == [WriteMarker(SnapshotResponse("east-1", "west", (4, 12)), ("east",))]
    # our own request, read back from our log, is not answered
    assert west.on_marker(P(4, 13), SnapshotRequest("west-1", "west"), None, P(4, 13), {}) == []


def test_a_snapshot_completes_with_every_remote_and_stays_local() -> None:
    east = _core()
    east.on_data()
    request = _only_request(east.tick(0, {"west"}, True, {"s": P(1, 0)}))
    response = SnapshotResponse(request.snapshot_id, "west", (7, 40))
    effects = east.on_marker(P(1, 50), response, "west", P(1, 50), {"s": P(1, 0)})
    assert effects == [WriteMarker(Snapshot("east-1", (1, 50), {"west": (7, 40)}), ("east",))]
    assert east.pending == 0 and east.completed_total == 1
    # a late or repeated answer changes nothing
    assert east.on_marker(P(1, 51), response, "west", P(1, 51), {"s": P(1, 0)}) == []


def test_three_clusters_take_two_rounds() -> None:
    east = _core()
    east.on_data()
    request = _only_request(east.tick(0, {"west", "north"}, True, {"s": P(1, 0)}))
    subs = {"s": P(1, 0)}
    first_west = SnapshotResponse(request.snapshot_id, "west", (7, 1))
    assert east.on_marker(P(1, 5), first_west, "west", P(1, 5), subs) == []
    second = east.on_marker(
        P(1, 6), SnapshotResponse(request.snapshot_id, "north", (9, 1)), "north", P(1, 6), subs
    )
    assert _only_request(second) == request  # the second round, same id
    assert east.on_marker(P(1, 8), SnapshotResponse(request.snapshot_id, "north", (9, 5)),
                          "north", P(1, 8), subs) == []  # fmt: skip
    done = east.on_marker(
        P(1, 9), SnapshotResponse(request.snapshot_id, "west", (7, 6)), "west", P(1, 9), subs
    )
    # the first round's positions, the last response's local position
    assert done == [
        WriteMarker(Snapshot("east-1", (1, 9), {"west": (7, 1), "north": (9, 1)}), ("east",))
    ]


def test_snapshots_time_out_are_counted_and_let_the_next_start() -> None:
    east = _core(timeout_ms=30_000)
    east.on_data()
    request = _only_request(east.tick(0, {"west"}, True, {"s": P(1, 0)}))
    assert east.tick(29_999, {"west"}, True, {"s": P(1, 0)}) == []
    retry = _only_request(east.tick(30_000, {"west"}, True, {"s": P(1, 0)}))
    assert retry.snapshot_id != request.snapshot_id
    assert east.timed_out_total == 1 and east.pending == 1
    late = SnapshotResponse(request.snapshot_id, "west", (7, 1))
    assert east.on_marker(P(1, 9), late, "west", P(1, 9), {"s": P(1, 0)}) == []


def test_pending_snapshots_are_bounded() -> None:
    east = _core(pending_max=2)
    for now in (0, 1000, 2000):
        east.on_data()
        east.tick(now, {"west"}, True, {"s": P(1, 0)})
    assert east.pending == 2


def test_an_update_follows_the_mark_delete_past_a_snapshot_once() -> None:
    east = _core()
    subs = {"s": P(1, 10), "other": P(1, 10)}
    east.on_marker(P(1, 31), Snapshot("a", (1, 20), {"west": (7, 15)}), None, P(1, 31), subs)
    east.on_marker(P(1, 41), Snapshot("b", (1, 40), {"west": (7, 35)}), None, P(1, 41), subs)
    assert east.cached("s") == 2
    assert east.tick(0, {"west"}, True, subs) == []  # nothing passed yet
    subs["s"] = P(1, 45)
    assert east.tick(1000, {"west"}, True, subs) == [
        WriteMarker(Update("s", {"west": (7, 35)}))  # the newest passed, to every remote
    ]
    assert east.cached("s") == 0 and east.cached("other") == 2
    assert east.tick(2000, {"west"}, True, subs) == []
    # a snapshot a subscription has passed already is not cached for it
    east.on_marker(P(1, 51), Snapshot("c", (1, 44), {"west": (7, 40)}), None, P(1, 51), subs)
    assert east.cached("s") == 0 and east.cached("other") == 3
    # a snapshot replicated in from elsewhere is not ours
    east.on_marker(P(1, 52), Snapshot("d", (1, 50), {}), "west", P(1, 52), subs)
    assert east.cached("other") == 3


def test_an_update_naming_this_cluster_moves_the_subscription() -> None:
    west = _core("west")
    update = Update("s", {"west": (7, 35), "north": (9, 3)})
    assert west.on_marker(P(7, 50), update, "east", P(7, 50), {}) == [
        MoveSubscription("s", P(7, 35))
    ]
    assert west.on_marker(P(7, 51), Update("s", {"north": (9, 3)}), "east", P(7, 51), {}) == []
    assert west.on_marker(P(7, 52), update, None, P(7, 52), {}) == []  # our own, going out


def test_the_cache_keeps_the_newest_snapshots_in_order() -> None:
    cache = SnapshotCache(max_snapshots=3)
    for i in range(1, 6):
        cache.add(Snapshot(str(i), (1, i * 10)))
    cache.add(Snapshot("old", (1, 5)))  # not after the newest: ignored
    assert len(cache) == 3
    assert cache.advanced(P(1, 25)) is None  # 1..2 were dropped when full
    newest = cache.advanced(P(1, 45))
    assert newest is not None and newest.snapshot_id == "4"
    assert len(cache) == 1


def test_two_clusters_end_to_end() -> None:
    """East and west exchange markers as the replicators carry them: east's subscription
    passing a snapshot moves west's subscription to west's position of that snapshot."""
    east, west = _core("east"), _core("west")
    east_subs = {"s": P(1, 0)}
    east.on_data()
    (req,) = east.tick(0, {"west"}, True, east_subs)
    assert isinstance(req, WriteMarker)
    # west stores the replicated request at 2:10, its log ending at 2:10
    (resp,) = west.on_marker(P(2, 10), req.marker, "east", P(2, 10), {})
    assert isinstance(resp, WriteMarker) and resp.replicate_to == ("east",)
    # east stores the replicated response at 1:30
    (snap,) = east.on_marker(P(1, 30), resp.marker, "west", P(1, 30), east_subs)
    assert isinstance(snap, WriteMarker) and isinstance(snap.marker, Snapshot)
    east.on_marker(P(1, 31), snap.marker, None, P(1, 31), east_subs)
    east_subs["s"] = P(1, 30)
    (update,) = east.tick(1000, {"west"}, True, east_subs)
    assert isinstance(update, WriteMarker)
    assert west.on_marker(P(2, 20), update.marker, "east", P(2, 20), {}) == [
        MoveSubscription("s", P(2, 10))
    ]


def test_the_first_snapshot_of_a_burst_is_due_at_once_then_one_per_period() -> None:
    """A consumer that acknowledged a whole burst before the timer's first tick had no
    snapshot behind its position (the other cluster never moved its subscription): the
    shell ticks as soon as :meth:`start_due` says so, at most once per ``frequency_ms``."""
    core = _core()
    subs = {"s": P(1, 0)}
    assert not core.start_due(100)  # no data yet
    core.on_data()
    assert core.start_due(150)
    assert _only_request(core.tick(150, {"west"}, True, subs)).snapshot_id == "east-1"
    core.on_data()
    assert not core.start_due(700)
    assert core.tick(1000, {"west"}, True, subs) == []  # the timer tick within the period
    assert core.start_due(1150)
    assert _only_request(core.tick(1150, {"west"}, True, subs)).snapshot_id == "east-2"
