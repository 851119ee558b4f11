"""The bookie protocol codec: golden bytes, arbitrary chunking, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookie_protocol import bookie_pb2
from magnetar.bookie_protocol.codec import (
    FrameDecoder,
    OpType,
    Request,
    RequestDecoder,
    Response,
    ResponseDecoder,
    Status,
    encode_request,
    encode_response,
)
from magnetar.bookie_protocol.errors import error_for_status
from magnetar.common.errors import FrameTooLarge, ProtocolError


def test_add_request_golden_bytes() -> None:
    frame = b"".join(
        encode_request(
            Request(request_id=1, op=OpType.ADD_ENTRY, ledger_id=7, entry_id=3, checksum=5),
            b"hi",
        )
    )
    header = bytes([0x08, 0x01, 0x10, 0x01, 0x18, 0x07, 0x20, 0x03, 0x30, 0x05])
    assert (
        frame
        == (4 + len(header) + 2).to_bytes(4, "big")
        + len(header).to_bytes(4, "big")
        + header
        + b"hi"
    )


def test_response_round_trip() -> None:
    resp = Response(request_id=9, op=OpType.READ_ENTRY, status=Status.NO_SUCH_ENTRY, message="x")
    out = ResponseDecoder().feed(b"".join(encode_response(resp, b"payload")))
    assert len(out) == 1
    assert out[0][0] == resp
    assert out[0][1] == b"payload"


@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    cuts=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=50),
)
def test_any_chunking_yields_the_same_requests(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(
        b"".join(encode_request(Request(request_id=i, op=OpType.ADD_ENTRY, entry_id=i), p))
        for i, p in enumerate(payloads)
    )
    decoder = RequestDecoder()
    got = []
    pos = 0
    i = 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        got.extend(decoder.feed(stream[pos : pos + step]))
        pos += step
        i += 1
    assert [(r.request_id, p) for r, p in got] == list(enumerate(payloads))


def test_oversized_frame_is_refused_before_buffering() -> None:
    decoder = FrameDecoder(frame_size_max_bytes=1000)
    with pytest.raises(FrameTooLarge):
        decoder.feed((5000).to_bytes(4, "big") + (2).to_bytes(4, "big"))


def test_header_larger_than_frame_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed((10).to_bytes(4, "big") + (50).to_bytes(4, "big") + b"x" * 6)


def test_unparsable_header_is_a_protocol_error() -> None:
    header = b"\xff\xff\xff"
    with pytest.raises(ProtocolError):
        RequestDecoder().feed(
            (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
        )


@pytest.mark.parametrize(("enum", "proto_name"), [(OpType, "OpType"), (Status, "Status")])
def test_the_intenums_are_the_values_of_the_proto_enums(enum: type, proto_name: str) -> None:
    """``op`` and ``status`` travel as uint32 fields holding these values; the enums of
    ``bookie.proto`` are their specification."""
    spec = bookie_pb2.DESCRIPTOR.enum_types_by_name[proto_name]
    assert {v.name: v.number for v in spec.values} == {m.name: m.value for m in enum}


def test_a_status_is_the_same_varint_as_the_enum_field_it_replaced() -> None:
    """Bytes from before ``status`` was a uint32 (an enum field, FENCED = 3) decode the same."""
    response = Response(request_id=1, op=OpType.FENCE, status=Status.FENCED)
    assert response.SerializeToString() == bytes([0x08, 0x01, 0x10, 0x04, 0x18, 0x03])
    assert Status(response.status) is Status.FENCED


def test_every_refusal_status_is_one_error_class() -> None:
    refusals = [s for s in Status if s != Status.OK]
    classes = [type(error_for_status(s, "m")) for s in refusals]
    assert len(set(classes)) == len(refusals)
    assert [c.status for c in classes] == refusals
    assert str(error_for_status(Status.FENCED, "ledger 5 is fenced")) == "ledger 5 is fenced"
