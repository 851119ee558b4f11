"""The broker-wide bound of bytes of publishes in flight (Pulsar's
``maxMessagePublishBufferSizeInMB``), as a state machine: who stops reading, when they read
again, and what a closed connection leaves."""

from __future__ import annotations

import pytest

from magnetar.broker.publish_buffer import PublishBuffer


def test_passing_the_bound_stops_every_publisher_until_half_is_answered() -> None:
    buf: PublishBuffer[str] = PublishBuffer(1000)
    assert buf.hold("a", 400) == []
    assert buf.hold("b", 500) == []
    assert not buf.full
    # "c" takes the total past the bound: everyone who published stops, "c" included
    assert sorted(buf.hold("c", 200)) == ["a", "b", "c"]
    assert buf.full and buf.stopped == 3 and buf.full_times == 1
    # a reader whose SENDs arrive while full stops after handing them over, once
    assert buf.hold("d", 50) == ["d"]
    assert buf.hold("d", 50) == []
    assert buf.held_bytes == 1200
    assert buf.release(600) == []  # 600 > 500: still full
    assert sorted(buf.release(100)) == ["a", "b", "c", "d"]  # 500: half the bound
    assert not buf.full and buf.held_bytes == 500
    # the next time it fills, the readers that read again stop again
    assert sorted(buf.hold("a", 600)) == ["a", "b", "c", "d"]
    assert buf.full_times == 2


def test_a_single_publish_larger_than_the_bound_stops_and_resumes() -> None:
    buf: PublishBuffer[str] = PublishBuffer(100)
    assert buf.hold("a", 5000) == ["a"]
    assert buf.release(5000) == ["a"]
    assert buf.held_bytes == 0 and not buf.full


def test_a_closed_connection_is_never_named_and_its_bytes_stay_counted() -> None:
    buf: PublishBuffer[str] = PublishBuffer(1000)
    buf.hold("gone", 800)
    buf.hold("kept", 100)
    buf.forget("gone")
    assert buf.hold("kept", 300) == ["kept"]  # "gone" is not named
    assert buf.held_bytes == 1200  # storage has not answered "gone"'s bytes yet
    assert buf.release(800) == ["kept"]
    assert buf.release(400) == [] and buf.held_bytes == 0
    buf.forget("kept")
    assert buf.hold("new", 2000) == ["new"]  # nobody else is left to stop


def test_zero_is_no_bound_but_bytes_are_still_counted() -> None:
    buf: PublishBuffer[str] = PublishBuffer(0)
    assert buf.hold("a", 10**9) == []
    assert buf.held_bytes == 10**9 and not buf.full
    assert buf.release(10**9) == []
    with pytest.raises(ValueError):
        PublishBuffer(-1)
