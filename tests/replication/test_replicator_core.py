"""The replicator's rules (magnetar.replication.replicator), without I/O."""

from __future__ import annotations

from magnetar.broker.deduplication import DeduplicationState, DupStatus
from magnetar.broker.policies import Policies, TopicPolicies
from magnetar.common.clock import SystemClock
from magnetar.managed_ledger.position import Position
from magnetar.protocol.entry import build_entry
from magnetar.protocol.metadata import MessageMetadata
from magnetar.replication.persistent_replicator import forwarded_metadata, parse_entry
from magnetar.replication.policy import effective_clusters, remote_clusters
from magnetar.replication.replicator import (
    LOCAL_ONLY,
    Forward,
    ReplicatorCore,
    sequence_id_of,
    should_forward,
)


def test_loop_guard_never_forwards_a_replicated_message() -> None:
    assert should_forward("west", None, ())
    assert not should_forward("west", "east", ())
    assert not should_forward("west", "east", ("west",))


def test_replicate_to_restricts_targets_and_local_keeps_it_home() -> None:
    assert should_forward("west", None, ("west", "north"))
    assert not should_forward("west", None, ("north",))
    assert not should_forward("west", None, (LOCAL_ONLY,))
    assert not should_forward("west", None, (), marker=True)


def test_sequence_ids_grow_with_the_position() -> None:
    ids = [sequence_id_of(Position(*p)) for p in [(3, 0), (3, 1), (3, 900), (4, 0), (10, 2)]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_cursor_moves_only_over_receipted_or_skipped_entries() -> None:
    core = ReplicatorCore("west")
    a = core.on_entry(Position(1, 0), None, ())
    b = core.on_entry(Position(1, 1), "north", ())  # skipped: the loop guard
    c = core.on_entry(Position(1, 2), None, ())
    assert isinstance(a, Forward) and b is None and isinstance(c, Forward)
    assert core.advance() is None  # the first is not receipted yet
    assert core.on_receipt(a.sequence_id) == Position(1, 1)  # a, then the skipped b
    assert core.in_flight == 1
    assert core.on_receipt(c.sequence_id) == Position(1, 2)
    assert core.in_flight == 0


def test_skipped_entries_alone_move_the_cursor() -> None:
    core = ReplicatorCore("west")
    assert core.on_entry(Position(5, 0), None, (LOCAL_ONLY,)) is None
    assert core.advance() == Position(5, 0)


def test_a_new_connection_sends_every_entry_after_the_mark_delete_again() -> None:
    """The remote's deduplication, not a skip on connect, keeps resends out: the remote's
    last sequence id counts entries accepted, not stored."""
    core = ReplicatorCore("west")
    first = core.on_entry(Position(2, 6), None, ())
    assert first is not None
    core.on_entry(Position(2, 7), None, ())
    core.on_receipt(first.sequence_id)
    assert core.on_disconnect() == Position(2, 6)
    again = ReplicatorCore("west")  # the next connection's
    resent = again.on_entry(Position(2, 7), None, ())
    assert resent == Forward(Position(2, 7), sequence_id_of(Position(2, 7)))


def test_in_flight_is_bounded() -> None:
    core = ReplicatorCore("west", in_flight_max=2)
    first = core.on_entry(Position(1, 0), None, ())
    core.on_entry(Position(1, 1), None, ())
    assert not core.can_read
    assert first is not None
    core.on_receipt(first.sequence_id)
    assert core.can_read


def test_disconnect_forgets_what_is_in_flight() -> None:
    core = ReplicatorCore("west")
    first = core.on_entry(Position(1, 0), None, ())
    core.on_entry(Position(1, 1), None, ())
    assert first is not None
    core.on_receipt(first.sequence_id)
    assert core.on_disconnect() == Position(1, 0)
    assert core.in_flight == 0


def test_effective_and_remote_clusters() -> None:
    ns = Policies(replication_clusters=("east", "west"))
    assert effective_clusters(ns, None) == ("east", "west")
    own = TopicPolicies(extra={"replicationClusters": ["east"]})
    assert effective_clusters(ns, own) == ("east",)
    assert remote_clusters("east", ("east", "west")) == {"west"}
    assert remote_clusters("east", ("east",)) == set()
    assert remote_clusters("east", ("west",)) == set()  # not replicated here


def test_the_delay_starts_at_the_oldest_entry_not_done() -> None:
    core = ReplicatorCore("west")
    assert core.oldest_publish_ms is None
    first = core.on_entry(Position(1, 0), None, (), publish_ms=1_000)
    core.on_entry(Position(1, 1), None, (), publish_ms=2_000)
    assert core.oldest_publish_ms == 1_000
    assert first is not None
    core.on_receipt(first.sequence_id)
    assert core.oldest_publish_ms == 2_000


def test_forwarded_metadata_lets_the_remote_rebuild_its_deduplication_from_entries() -> None:
    # The remote's deduplication replays stored entries' metadata after a crash: the
    # replicator's producer name and the position's sequence id must be the ones stored,
    # or entries sent again after the crash are taken as new (seen as duplicates).
    original = MessageMetadata(
        producer_name="app-producer",
        sequence_id=7,
        publish_time=1_000,
        partition_key="k",
        properties=(("a", "b"),),
        event_time=5,
    )
    seq = sequence_id_of(Position(12, 3))
    data = b"".join(build_entry(forwarded_metadata(original, "east", "west", seq), b"payload"))
    stored, payload, messages = parse_entry(data)
    assert (stored.producer_name, stored.sequence_id) == ("pulsar.repl.east-->west", seq)
    assert stored.replicated_from == "east"
    assert (stored.partition_key, stored.properties, stored.event_time) == (
        "k",
        (("a", "b"),),
        5,
    )
    assert (payload, messages) == (b"payload", 1)
    state = DeduplicationState(SystemClock())
    state.replay_entry(stored.producer_name, stored.sequence_id, stored.highest_sequence_id)
    assert state.check("pulsar.repl.east-->west", seq, seq, None, None) is DupStatus.DUP
