"""The marker codec (:mod:`magnetar.protocol.markers`): golden payload bytes of
PulsarMarkers.proto, round trips, and marker entries' metadata."""

from __future__ import annotations

import pytest

from magnetar.common.errors import ProtocolError
from magnetar.protocol.entry import Entry
from magnetar.protocol.markers import (
    MARKER_PRODUCER_NAME,
    MarkerType,
    Snapshot,
    SnapshotRequest,
    SnapshotResponse,
    Update,
    decode_marker,
    encode_marker,
    marker_entry,
    marker_type_of,
)


def test_golden_payloads() -> None:
    assert encode_marker(SnapshotRequest("id", "east")) == (
        MarkerType.SNAPSHOT_REQUEST,
        b"\x0a\x02id\x12\x04east",
    )
    # cluster {cluster "west", message_id {ledger_id 3, entry_id 7}}
    assert encode_marker(SnapshotResponse("id", "west", (3, 7))) == (
        MarkerType.SNAPSHOT_RESPONSE,
        b"\x0a\x02id\x12\x0c\x0a\x04west\x12\x04\x08\x03\x10\x07",
    )
    assert encode_marker(Update("s", {"west": (3, 7)})) == (
        MarkerType.UPDATE,
        b"\x0a\x01s\x12\x0c\x0a\x04west\x12\x04\x08\x03\x10\x07",
    )
    assert encode_marker(Snapshot("id", (1, 2), {})) == (
        MarkerType.SNAPSHOT,
        b"\x0a\x02id\x12\x04\x08\x01\x10\x02",
    )


@pytest.mark.parametrize(
    "marker",
    [
        SnapshotRequest("a-b", "east"),
        SnapshotResponse("a-b", "west", (12, 0)),
        Snapshot("a-b", (5, 9), {"west": (1, 2), "north": (3, 4)}),
        Update("sub", {"west": (1, 2), "east": (7, 8)}),
    ],
)
def test_round_trip(marker: object) -> None:
    marker_type, payload = encode_marker(marker)  # type: ignore[arg-type]
    assert decode_marker(marker_type, payload) == marker


def test_unknown_types_decode_to_none_and_garbage_raises() -> None:
    assert decode_marker(20, b"") is None  # e.g. a transaction marker
    with pytest.raises(ProtocolError):
        decode_marker(MarkerType.SNAPSHOT_REQUEST, b"\xff\xff")
    with pytest.raises(ProtocolError):
        decode_marker(MarkerType.SNAPSHOT_RESPONSE, b"\x0a\x02id")  # no cluster


def test_a_marker_entry_carries_the_type_and_targets_in_its_metadata() -> None:
    data = marker_entry(SnapshotResponse("x", "west", (1, 1)), 1234, ("east",))
    entry = Entry(data)
    md = entry.metadata
    assert md.producer_name == MARKER_PRODUCER_NAME
    assert md.publish_time == 1234
    assert md.replicate_to == ("east",)
    assert marker_type_of(data) == MarkerType.SNAPSHOT_RESPONSE
    assert decode_marker(MarkerType.SNAPSHOT_RESPONSE, bytes(entry.payload)) == SnapshotResponse(
        "x", "west", (1, 1)
    )
