"""The hand-written ACK decoder (:mod:`magnetar.protocol.ack_decoder`) gives exactly what the
protobuf runtime gives for every ACK it takes, gives up on every other shape, never takes
bytes the runtime rejects, and is what :class:`~magnetar.protocol.FrameDecoder` uses."""

from __future__ import annotations

from functools import partial
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import magnetar.protocol as p
import magnetar.protocol.frame as frame_module
from magnetar.common.errors import ProtocolError
from magnetar.protocol import MessageId, _convert
from magnetar.protocol.ack_decoder import ack_from_command_bytes
from magnetar.protocol.command import Command
from magnetar.protocol.generated import PulsarApi_pb2 as pb
from magnetar.protocol.varint import encode_varint

T = TypeVar("T")
U64 = st.integers(0, (1 << 64) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
I32 = st.one_of(st.integers(-1, 300), st.integers(-(1 << 31), (1 << 31) - 1))
LEDGER_OR_ENTRY_IDS = st.one_of(st.integers(0, 1 << 22), I64)  # negative: a wire value >= 2**63
ACK_SETS = st.lists(st.one_of(st.just(-1), st.integers(0, 1 << 10), I64), max_size=4).map(tuple)


def _protobuf_command(command_bytes: bytes) -> Command | None:
    """What the protobuf runtime makes of a command's bytes (None: it rejects them)."""
    base = pb.BaseCommand()
    try:
        _convert.parse_into(base, command_bytes, "command")
        return _convert.command_from_base(base)
    except ProtocolError:
        return None


def _command_bytes(frame: bytes) -> bytes:
    return frame[8 : 8 + int.from_bytes(frame[4:8], "big")]


message_ids = st.builds(
    MessageId,
    ledger_id=LEDGER_OR_ENTRY_IDS,
    entry_id=LEDGER_OR_ENTRY_IDS,
    partition=I32,
    batch_index=I32,
    ack_set=ACK_SETS,
    batch_size=st.none() | I32,
)


@st.composite
def acks(draw: st.DrawFn) -> tuple[p.Ack, bool]:
    """An ACK, and whether it holds a field the fast decoder leaves to the runtime
    (validation_error, properties or a message id's first_chunk_message_id; 1 in 4)."""
    ids = draw(st.lists(message_ids, max_size=5))
    validation_error = None
    properties: tuple[tuple[str, int], ...] = ()
    unusual = draw(st.integers(0, 3)) == 0
    if unusual:
        which = draw(st.sampled_from(["validation_error", "properties", "first_chunk"]))
        if which == "validation_error":
            validation_error = draw(st.sampled_from(p.ValidationError))
        elif which == "properties":
            properties = tuple(draw(st.lists(st.tuples(st.text(max_size=4), U64), min_size=1)))
        else:
            chunk_start = draw(st.builds(MessageId, LEDGER_OR_ENTRY_IDS, LEDGER_OR_ENTRY_IDS))
            first = draw(message_ids)
            ids.insert(
                0,
                MessageId(first.ledger_id, first.entry_id, first_chunk_message_id=chunk_start),
            )
    ack = p.Ack(
        consumer_id=draw(U64),
        ack_type=draw(st.sampled_from(p.AckType)),
        message_id=tuple(ids),
        validation_error=validation_error,
        properties=properties,
        txnid_least_bits=draw(st.just(0) | U64),
        txnid_most_bits=draw(st.just(0) | U64),
        request_id=draw(st.none() | U64),
    )
    return ack, unusual


@settings(max_examples=1000, deadline=None)
@given(generated=acks())
def test_decoded_acks_equal_the_protobuf_runtimes(generated: tuple[p.Ack, bool]) -> None:
    ack, unusual = generated
    frame = p.encode(ack)
    command_bytes = _command_bytes(frame)
    want = _protobuf_command(command_bytes)
    assert want == ack
    # one frame per read, and two in one read (the decoder's two paths to a frame)
    frames = p.FrameDecoder().feed(frame) + p.FrameDecoder().feed(frame + frame)
    expected = [(want, None, None)] * 3
    assert [(f.command, f.entry, f.broker_entry_metadata) for f in frames] == expected
    assert all(repr(f.command) == repr(want) for f in frames)  # enums, not ints
    fast = ack_from_command_bytes(command_bytes)
    if unusual:
        assert fast is None
    else:
        assert fast == want and repr(fast) == repr(want)


# Protobuf pieces for the ACKs the encoder never makes: fields in any order or repeated,
# packed ack sets, varints that are over-long, non-minimal or beyond 64 bits, wrong keys.
# The odd pieces come now and then only, so that many commands are still ones the fast
# decoder takes (and its results are compared).


def _now_and_then(usual: st.SearchStrategy[T], odd: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """``usual``, or one time in eight ``odd``."""
    return st.integers(0, 7).flatmap(lambda i: odd if i == 0 else usual)


raw_varints = st.tuples(st.lists(st.integers(0x80, 0xFF), max_size=10), st.integers(0, 0x7F)).map(
    lambda t: bytes(t[0]) + bytes([t[1]])
)
varints = _now_and_then(
    st.one_of(
        st.integers(0, 300).map(encode_varint),
        U64.map(encode_varint),
        I64.map(encode_varint),
    ),
    st.one_of(  # any, and ten bytes (at or beyond 64 bits)
        raw_varints,
        st.integers(0, 0x7F).map(lambda last: b"\xff" * 9 + bytes([last])),
    ),
)
junk_fields = st.tuples(st.integers(0, 0xFF), st.binary(max_size=6)).map(
    lambda kv: bytes([kv[0]]) + kv[1]
)


def _delimited(key: int, body: bytes, length_error: int = 0) -> bytes:
    return bytes([key]) + encode_varint(max(0, len(body) + length_error)) + body


length_errors = _now_and_then(st.just(0), st.sampled_from([-2, -1, 1, 2]))
"""What to add to a length (now and then, so that it falls short or overruns)."""


def _varint_field(key: int, value: bytes) -> bytes:
    return bytes([key]) + value


message_id_fields = _now_and_then(
    st.one_of(
        st.builds(_varint_field, st.sampled_from([0x08, 0x10, 0x18, 0x20, 0x28, 0x30]), varints),
        st.builds(  # ack_set, packed
            lambda words, error: _delimited(0x2A, b"".join(words), error),
            st.lists(varints, max_size=4),
            length_errors,
        ),
    ),
    st.one_of(
        st.just(_delimited(0x3A, b"\x08\x01\x10\x02")),  # first_chunk_message_id
        junk_fields,
    ),
)


def _bodies(
    required: list[bytes],
    short_of_required: list[bytes],
    fields: st.SearchStrategy[bytes],
    most: int,
) -> st.SearchStrategy[bytes]:
    """A message's bytes: its required fields (now and then not all of them), then up to
    ``most`` of ``fields``."""
    return st.builds(
        lambda head, rest: head + b"".join(rest),
        _now_and_then(st.sampled_from(required), st.sampled_from(short_of_required)),
        st.lists(fields, max_size=most),
    )


message_id_bodies = _bodies(  # ledgerId and entryId
    [b"\x08\x90\x4e\x10\x07", b"\x10\x07\x08\x01"],
    [b"\x08\x01", b"\x10\x07", b""],
    message_id_fields,
    5,
)
ack_fields = _now_and_then(
    st.one_of(
        # consumer_id, txnid_least_bits, txnid_most_bits, request_id
        st.builds(_varint_field, st.sampled_from([0x08, 0x30, 0x38, 0x40]), varints),
        st.builds(_varint_field, st.just(0x10), st.sampled_from([b"\x00", b"\x01"])),  # ack_type
        st.builds(partial(_delimited, 0x1A), message_id_bodies, length_errors),
    ),
    st.one_of(
        st.builds(_varint_field, st.sampled_from([0x10, 0x20]), varints),  # + validation_error
        st.just(_delimited(0x2A, b"\x0a\x01k\x10\x05")),  # properties
        junk_fields,
    ),
)
ack_bodies = _bodies(  # consumer_id and ack_type
    [b"\x08\x05\x10\x01", b"\x10\x00\x08\x05"], [b"\x08\x05", b"\x10\x01", b""], ack_fields, 6
)


@st.composite
def damaged(draw: st.DrawFn, command: bytes) -> bytes:
    """``command`` as it is, truncated, with a byte changed, or with bytes added."""
    how = draw(st.sampled_from(["none", "none", "truncate", "set", "append"]))
    if how == "truncate":
        return command[: draw(st.integers(0, len(command)))]
    if how == "set":
        at = draw(st.integers(0, len(command) - 1))
        return command[:at] + bytes([draw(st.integers(0, 0xFF))]) + command[at + 1 :]
    if how == "append":
        return command + draw(st.binary(min_size=1, max_size=3))
    return command


commands = ack_bodies.map(lambda body: _delimited(0x52, body)).map(lambda sub: b"\x08\x0a" + sub)


@settings(max_examples=3000, deadline=None)
@given(command_bytes=commands.flatmap(damaged))
def test_the_fast_decoder_takes_only_what_the_runtime_takes(command_bytes: bytes) -> None:
    fast = ack_from_command_bytes(command_bytes)
    if fast is not None:
        want = _protobuf_command(command_bytes)
        assert want is not None, "the fast decoder took bytes the protobuf runtime rejects"
        assert fast == want and repr(fast) == repr(want)


@settings(max_examples=500, deadline=None)
@given(tail=st.binary(max_size=60))
def test_random_bytes_after_an_ack_header(tail: bytes) -> None:
    command_bytes = b"\x08\x0a\x52" + bytes([len(tail)]) + tail
    fast = ack_from_command_bytes(command_bytes)
    if fast is not None:
        assert fast == _protobuf_command(command_bytes)


CUMULATIVE = p.Ack(
    consumer_id=3, ack_type=p.AckType.Cumulative, message_id=(MessageId(1_234_567, 890),)
)
INDIVIDUAL = p.Ack(
    consumer_id=3,
    ack_type=p.AckType.Individual,
    message_id=(
        MessageId(1_234_567, 891, batch_index=70, ack_set=(-1, 0x3F), batch_size=70),
        MessageId(1_234_567, 892, partition=4),
        MessageId(1_234_568, 0),
    ),
    request_id=12,
)


def test_the_fast_decoder_takes_the_usual_acks() -> None:
    for ack in (CUMULATIVE, INDIVIDUAL):
        assert ack_from_command_bytes(_command_bytes(p.encode(ack))) == ack
    # an ack set packed, as a client may send it
    message_id = (
        b"\x08"
        + encode_varint(1_234_567)
        + b"\x10"
        + encode_varint(891)
        + _delimited(0x2A, encode_varint(-1) + encode_varint(0x3F))
        + b"\x30\x46"
    )
    packed = b"\x08\x0a" + _delimited(0x52, b"\x08\x03\x10\x00" + _delimited(0x1A, message_id))
    want = p.Ack(
        consumer_id=3,
        ack_type=p.AckType.Individual,
        message_id=(MessageId(1_234_567, 891, ack_set=(-1, 0x3F), batch_size=70),),
    )
    assert ack_from_command_bytes(packed) == _protobuf_command(packed) == want


def test_the_frame_decoder_decodes_acks_with_the_fast_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results: list[p.Ack | None] = []

    def recording(data: bytes) -> p.Ack | None:
        result = ack_from_command_bytes(data)
        results.append(result)
        return result

    monkeypatch.setattr(frame_module, "ack_from_command_bytes", recording)
    decoder = p.FrameDecoder()
    # a frame per read, then two frames in one read: the decoder's two paths to a frame
    frames = decoder.feed(p.encode(CUMULATIVE)) + decoder.feed(p.encode(INDIVIDUAL))
    frames += decoder.feed(p.encode(CUMULATIVE) + p.encode(INDIVIDUAL))
    assert [f.command for f in frames] == results == [CUMULATIVE, INDIVIDUAL] * 2


def test_an_ack_frame_with_a_payload_is_refused() -> None:
    frame = p.encode(CUMULATIVE) + b"\x0e\x01"
    frame = (len(frame) - 4).to_bytes(4, "big") + frame[4:]
    with pytest.raises(ProtocolError, match="unexpected payload after a ACK command"):
        p.FrameDecoder().feed(frame)


def _ack_bytes(*fields: bytes) -> bytes:
    return b"\x08\x0a" + _delimited(0x52, b"".join(fields))


_ID = b"\x08\x90\x4e\x10\x07"  # ledgerId 10000, entryId 7


@pytest.mark.parametrize(
    "command_bytes",
    [
        _ack_bytes(b"\x08\x05\x10\x01\x20\x02"),  # validation_error
        _ack_bytes(b"\x08\x05\x10\x01", _delimited(0x2A, b"\x0a\x01k\x10\x05")),  # properties
        # first_chunk_message_id
        _ack_bytes(b"\x08\x05\x10\x01", _delimited(0x1A, _ID + _delimited(0x3A, _ID))),
        _ack_bytes(b"\x08\x05\x10\x01\x48\x01"),  # field 9
        _ack_bytes(b"\x08\x05\x10\x01\x80\x01\x01"),  # field 16: a two-byte key
        _ack_bytes(b"\x09" + bytes(8), b"\x10\x01"),  # consumer_id as fixed64
        # partition as fixed32
        _ack_bytes(b"\x08\x05\x10\x01", _delimited(0x1A, _ID + b"\x1d" + bytes(4))),
        _ack_bytes(b"\x10\x01", _delimited(0x1A, _ID)),  # no consumer_id
        _ack_bytes(b"\x08\x05", _delimited(0x1A, _ID)),  # no ack_type
        _ack_bytes(b"\x08\x05\x10\x01", _delimited(0x1A, b"\x08\x01")),  # no entryId
        _ack_bytes(b"\x08\x05\x10\x02"),  # no such AckType
        _ack_bytes(b"\x08\x05\x10\x81\x80\x80\x80\x10"),  # 2**32 + 1: not 1
        _ack_bytes(b"\x08" + b"\xff" * 9 + b"\x02", b"\x10\x01"),  # beyond 64 bits
        _ack_bytes(b"\x08" + b"\xff" * 10 + b"\x00", b"\x10\x01"),  # 11 bytes
        _ack_bytes(b"\x08\x05\x10\x01", b"\x1a\x06" + _ID),  # message id overruns
        _ack_bytes(b"\x08\x05\x10\x01", b"\x1a\x04" + _ID),  # ... falls short
        # a packed ack set overrunning its message id
        _ack_bytes(b"\x08\x05\x10\x01", _delimited(0x1A, _ID + b"\x2a\x03\x01\x01"), b"\x40\x01"),
        _ack_bytes(b"\x08\x05\x10\x01")[:-1],  # truncated
        _ack_bytes(b"\x08\x05\x10\x01") + b"\x00",  # trailing byte
        b"\x08\x0a\x52\x04\x08\x05\x10\x01\x50\x01",  # a BaseCommand field after the ack
    ],
)
def test_the_fast_decoder_gives_up_on_other_shapes(command_bytes: bytes) -> None:
    assert ack_from_command_bytes(command_bytes) is None
    want = _protobuf_command(command_bytes)
    frame = (len(command_bytes) + 4).to_bytes(4, "big")
    frame += len(command_bytes).to_bytes(4, "big") + command_bytes
    if want is None:
        with pytest.raises(ProtocolError):
            p.FrameDecoder().feed(frame)
    else:
        assert [f.command for f in p.FrameDecoder().feed(frame)] == [want]
