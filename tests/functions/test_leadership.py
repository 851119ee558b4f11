"""The leadership core as exact effect lists (no I/O, no clock)."""

from __future__ import annotations

from magnetar.functions.leadership import (
    AcquireProducer,
    LeadershipChanged,
    LeadershipState,
    ReleaseProducer,
)


def test_becoming_leader_starts_a_term_and_acquires() -> None:
    s = LeadershipState()
    assert not s.is_leader and s.term == 0 and not s.holds_producer
    assert s.on_active_consumer_change(False) == []  # a newcomer told it is inactive
    assert s.on_active_consumer_change(True) == [LeadershipChanged(True, 1), AcquireProducer(1)]
    assert s.on_active_consumer_change(True) == []  # repeated: nothing
    assert s.wants_producer(1)
    assert s.on_acquired(1) == []
    assert s.holds_producer and not s.wants_producer(1)


def test_losing_leadership_releases_and_later_terms_count_up() -> None:
    s = LeadershipState()
    s.on_active_consumer_change(True)
    s.on_acquired(1)
    assert s.on_active_consumer_change(False) == [LeadershipChanged(False, 1), ReleaseProducer(1)]
    assert not s.holds_producer
    s.on_released(1)
    assert s.on_active_consumer_change(True) == [LeadershipChanged(True, 2), AcquireProducer(2)]
    assert not s.wants_producer(1) and s.wants_producer(2)


def test_acquisition_finishing_after_its_term_is_released() -> None:
    s = LeadershipState()
    s.on_active_consumer_change(True)
    s.on_active_consumer_change(False)  # term 1 ended while the producer was being taken
    assert not s.wants_producer(1)
    assert s.on_acquired(1) == [ReleaseProducer(1)]
    assert not s.holds_producer
    s.on_active_consumer_change(True)
    assert s.on_acquired(1) == [ReleaseProducer(1)]  # a stale term never counts as held
    assert s.on_acquired(2) == [] and s.holds_producer


def test_fenced_holder_keeps_the_flag_but_not_the_producer_for_that_term() -> None:
    s = LeadershipState()
    s.on_active_consumer_change(True)
    s.on_acquired(1)
    assert s.on_fenced(1) == [ReleaseProducer(1)]
    assert s.is_leader  # only the broker's notification changes that
    assert not s.holds_producer and not s.wants_producer(1)  # no fencing war
    assert s.on_fenced(1) == []
    s.on_active_consumer_change(False)
    assert s.on_active_consumer_change(True) == [LeadershipChanged(True, 2), AcquireProducer(2)]
    assert s.wants_producer(2)


def test_fenced_leader_told_active_again_starts_a_new_term() -> None:
    """Deposed without being told (paused), fenced by the newer leader, then chosen again by
    the broker: it must take the producer again in a new term, or nobody can write."""
    s = LeadershipState()
    s.on_active_consumer_change(True)
    s.on_acquired(1)
    assert s.on_fenced(1) == [ReleaseProducer(1)]
    s.on_released(1)
    assert s.on_active_consumer_change(True) == [
        LeadershipChanged(False, 1),
        ReleaseProducer(1),
        LeadershipChanged(True, 2),
        AcquireProducer(2),
    ]
    assert s.is_leader and s.term == 2 and s.wants_producer(2)
    assert s.on_acquired(2) == []
    assert s.holds_producer
    assert s.on_active_consumer_change(True) == []  # not fenced in term 2: nothing


def test_leaving_releases_once_and_ignores_later_notifications() -> None:
    s = LeadershipState()
    s.on_active_consumer_change(True)
    s.on_acquired(1)
    assert s.on_leave() == [LeadershipChanged(False, 1), ReleaseProducer(1)]
    assert s.on_leave() == []
    assert s.on_active_consumer_change(True) == []
    assert not s.is_leader and not s.wants_producer(1)
    follower = LeadershipState()
    assert follower.on_leave() == []
