"""Marker entries are dropped from what a dispatcher read (:mod:`magnetar.broker.marker_filter`)."""

from __future__ import annotations

from magnetar.broker.marker_filter import drop_markers, is_marker
from magnetar.managed_ledger.entry_run import EntryRun
from magnetar.managed_ledger.position import Position
from magnetar.protocol.entry import build_entry
from magnetar.protocol.markers import SnapshotRequest, marker_entry
from magnetar.protocol.metadata import MessageMetadata

P = Position


def _message(i: int) -> bytes:
    md = MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    return b"".join(build_entry(md, str(i).encode()))


MARKER = marker_entry(SnapshotRequest("id", "east"), 1)


def test_markers_are_dropped_and_their_positions_returned() -> None:
    a = EntryRun([P(1, 0), P(1, 1), P(1, 2)], [_message(0), MARKER, _message(2)], [1, 1, 1])
    b = EntryRun([P(1, 3)], [MARKER], [1])
    c = EntryRun([P(2, 0)], [_message(3)], [None])
    kept, markers = drop_markers([a, b, c])
    assert markers == [P(1, 1), P(1, 3)]
    assert [run.positions for run in kept] == [[P(1, 0), P(1, 2)], [P(2, 0)]]
    assert kept[0].data == [_message(0), _message(2)] and kept[1] is c


def test_runs_without_markers_are_returned_as_they_are() -> None:
    run = EntryRun([P(1, 0)], [_message(0)], [1])
    kept, markers = drop_markers([run])
    assert kept == [run] and markers == []


def test_a_malformed_entry_is_not_a_marker() -> None:
    assert is_marker(MARKER)
    assert not is_marker(_message(1))
    assert not is_marker(b"\x0e\x01garbage")
