"""PartialFrameBudget: the broker-wide bound on bytes held in partially read frames."""

from __future__ import annotations

import pytest

from magnetar.broker.partial_frames import PartialFrameBudget


def test_readers_under_the_budget_read_on() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=100, timeout_ms=1000)
    assert budget.hold("a", 60, 0.0) is False
    assert budget.hold("b", 40, 0.0) is False  # exactly at the budget is fine
    assert budget.held_bytes == 100
    assert budget.waiting == 0


def test_the_reader_that_goes_over_stops_and_resumes_when_room_is_back() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=100, timeout_ms=1000)
    budget.hold("a", 80, 0.0)
    assert budget.hold("b", 30, 0.0) is True  # keeps its 30 bytes, stops reading
    assert budget.held_bytes == 110
    assert budget.hold("c", 5, 0.0) is True
    assert budget.resumable() == []  # still over
    budget.hold("a", 0, None)  # a's frame completed
    assert budget.held_bytes == 35
    assert budget.resumable() == ["b", "c"]  # in the order they stopped
    assert budget.resumable() == []
    assert budget.waiting == 0


def test_a_reader_holding_nothing_never_stops() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=10, timeout_ms=1000)
    budget.hold("a", 50, 0.0)
    assert budget.hold("b", 0, None) is False


def test_the_oldest_frame_never_stops_even_when_larger_than_the_budget() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=100, timeout_ms=1000)
    assert budget.hold("a", 150, 1.0) is False  # alone and over: it must still complete
    assert budget.hold("b", 10, 2.0) is True
    assert budget.hold("a", 300, None) is False
    assert budget.resumable() == []


def test_when_the_oldest_frame_completes_the_next_oldest_resumes() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=100, timeout_ms=1000)
    budget.hold("a", 90, 1.0)
    assert budget.hold("b", 60, 2.0) is True
    assert budget.hold("c", 60, 3.0) is True
    budget.hold("a", 0, None)  # done; 120 bytes still held, over the budget
    assert budget.resumable() == ["b"]  # b's frame began first: it reads on alone
    assert budget.resumable() == []
    assert budget.hold("b", 0, None) is False
    assert budget.resumable() == ["c"]  # 60 < 100: everyone


def test_a_new_frame_of_the_same_reader_is_the_newest() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=100, timeout_ms=1000)
    budget.hold("a", 90, 1.0)
    assert budget.hold("b", 60, 2.0) is True
    budget.hold("a", 70, 3.0)  # a finished its frame and began another in one read
    assert budget.resumable() == ["b"]  # b's frame is now the oldest
    assert budget.hold("a", 80, None) is True


def test_release_frees_the_readers_bytes_and_its_place_in_the_queue() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=100, timeout_ms=1000)
    budget.hold("a", 90, 0.0)
    assert budget.hold("b", 20, 0.0) is True
    assert budget.hold("c", 20, 0.0) is True
    budget.release("b")  # connection ended while stopped
    assert budget.held_bytes == 110
    budget.release("a")
    assert budget.held_bytes == 20
    assert budget.resumable() == ["c"]
    budget.release("c")
    budget.release("never-seen")
    assert budget.held_bytes == 0


def test_growth_of_the_same_frame_keeps_its_start_time() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=1000, timeout_ms=2000)
    budget.hold("a", 10, 100.0)
    budget.hold("a", 20, None)  # the same frame grew at 101.5
    budget.hold("b", 10, 101.0)
    assert budget.expired(101.9) == []
    assert budget.expired(102.5) == ["a"]  # started at 100.0, overdue after 102.0
    assert budget.expired(103.5) == ["a", "b"]


def test_a_new_frame_restarts_the_deadline() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=1000, timeout_ms=2000)
    budget.hold("a", 10, 100.0)
    budget.hold("a", 0, None)  # complete
    assert budget.expired(500.0) == []
    budget.hold("a", 7, 499.0)  # another frame, started later
    assert budget.expired(500.0) == []
    assert budget.expired(501.5) == ["a"]


def test_stopped_readers_expire_too() -> None:
    budget: PartialFrameBudget[str] = PartialFrameBudget(bytes_max=10, timeout_ms=1000)
    budget.hold("a", 10, 0.0)
    assert budget.hold("b", 10, 0.5) is True
    assert budget.expired(1.2) == ["a"]
    assert budget.expired(1.6) == ["a", "b"]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PartialFrameBudget(bytes_max=0)
    with pytest.raises(ValueError):
        PartialFrameBudget(timeout_ms=0)
