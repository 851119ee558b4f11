"""FrameDecoder: chunking, limits and hostile input (example-based and hypothesis)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import magnetar.protocol as p
from magnetar.common.errors import FrameTooLarge, ProtocolError
from magnetar.protocol import MessageId

from .samples import SAMPLES

LIMIT = 64 * 1024


def _frame_bytes(cmd: Any, payload: bytes = b"data") -> bytes:
    if cmd.TYPE in p.PAYLOAD_COMMANDS:
        md = p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
        return b"".join(p.encode_payload_command(cmd, p.build_entry(md, payload)))
    return p.encode(cmd)


def _summary(frames: list[p.Frame]) -> list[tuple[Any, bytes | None, Any]]:
    return [
        (f.command, None if f.entry is None else bytes(f.entry.data), f.broker_entry_metadata)
        for f in frames
    ]


def _feed_all(decoder: p.FrameDecoder, chunks: list[bytes]) -> list[p.Frame]:
    frames: list[p.Frame] = []
    for chunk in chunks:
        frames += decoder.feed(chunk)
        assert decoder.buffered_bytes <= decoder.max_frame_size_bytes
    return frames


# ---------------------------------------------------------------- strategies

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
i64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
i32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
u32 = st.integers(min_value=0, max_value=(1 << 32) - 1)
message_ids = st.builds(
    MessageId,
    ledger_id=i64,
    entry_id=i64,
    partition=i32,
    batch_index=i32,
    ack_set=st.lists(i64, max_size=3).map(tuple),
)
hot_commands = st.one_of(
    st.builds(
        p.Send,
        producer_id=u64,
        sequence_id=u64,
        num_messages=i32,
        highest_sequence_id=u64,
        is_chunk=st.booleans(),
    ),
    st.builds(
        p.Message,
        consumer_id=u64,
        message_id=message_ids,
        redelivery_count=u32,
        ack_set=st.lists(i64, max_size=3).map(tuple),
        consumer_epoch=st.none() | u64,
    ),
    st.builds(
        p.Ack,
        consumer_id=u64,
        ack_type=st.sampled_from(p.AckType),
        message_id=st.lists(message_ids, max_size=3).map(tuple),
        request_id=st.none() | u64,
    ),
    st.builds(p.Flow, consumer_id=u64, message_permits=u32),
)
commands = st.one_of(hot_commands, st.sampled_from([cmd for cmd, _ in SAMPLES]))


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Any], bytes]:
    cmds = draw(st.lists(commands, min_size=1, max_size=8))
    payloads = [draw(st.binary(max_size=300)) for _ in cmds]
    data = b"".join(_frame_bytes(c, pl) for c, pl in zip(cmds, payloads, strict=True))
    return cmds, data


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=20)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# ---------------------------------------------------------------- properties


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), stream=streams())
def test_any_split_yields_the_same_frames(
    data: st.DataObject, stream: tuple[list[Any], bytes]
) -> None:
    cmds, raw = stream
    whole = p.FrameDecoder(max_frame_size_bytes=LIMIT).feed(raw)
    assert [f.command for f in whole] == cmds
    chunks = data.draw(splits(raw))
    decoder = p.FrameDecoder(max_frame_size_bytes=LIMIT)
    assert _summary(_feed_all(decoder, chunks)) == _summary(whole)
    assert decoder.buffered_bytes == 0


@settings(max_examples=30, deadline=None)
@given(stream=streams())
def test_one_byte_at_a_time(stream: tuple[list[Any], bytes]) -> None:
    cmds, raw = stream
    decoder = p.FrameDecoder(max_frame_size_bytes=LIMIT)
    frames = _feed_all(decoder, [raw[i : i + 1] for i in range(len(raw))])
    assert [f.command for f in frames] == cmds


def _exercise(decoder: p.FrameDecoder, chunks: list[bytes]) -> None:
    """Feed chunks and use every lazy helper; only ProtocolError may escape."""
    for chunk in chunks:
        for frame in decoder.feed(chunk):
            if frame.entry is not None:
                frame.entry.verify_checksum()
                md = frame.entry.metadata
                _ = (md.num_messages, md.num_messages_in_batch, md.sequence_id, md.properties)
                _ = (md.partition_key, md.deliver_at_time, md.chunk_id, md.is_last_chunk)
                md.to_message_metadata()
                p.split_batch(frame.entry.payload, md.num_messages_in_batch)
        assert decoder.buffered_bytes <= decoder.max_frame_size_bytes


@settings(max_examples=500, deadline=None)
@given(data=st.data(), raw=st.binary(max_size=2000))
def test_random_bytes_raise_only_protocol_errors(data: st.DataObject, raw: bytes) -> None:
    decoder = p.FrameDecoder(max_frame_size_bytes=1024)
    with contextlib.suppress(ProtocolError):
        _exercise(decoder, data.draw(splits(raw)))


@settings(max_examples=500, deadline=None)
@given(data=st.data(), stream=streams())
def test_mutated_streams_raise_only_protocol_errors(
    data: st.DataObject, stream: tuple[list[Any], bytes]
) -> None:
    _, raw = stream
    mutated = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        i = data.draw(st.integers(0, max(0, len(mutated) - 1)))
        if op == "flip" and mutated:
            mutated[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set" and mutated:
            mutated[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del mutated[i : i + data.draw(st.integers(1, 8))]
        else:
            mutated[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    with contextlib.suppress(ProtocolError):
        _exercise(p.FrameDecoder(max_frame_size_bytes=LIMIT), data.draw(splits(bytes(mutated))))


@settings(max_examples=200, deadline=None)
@given(size=st.integers(min_value=LIMIT - 3, max_value=(1 << 32) - 1), head=st.integers(0, 3))
def test_oversized_frame_rejected_before_its_body(size: int, head: int) -> None:
    decoder = p.FrameDecoder(max_frame_size_bytes=LIMIT)
    prefix = struct.pack(">I", size)
    decoder.feed(prefix[:head])  # a split prefix is fine
    with pytest.raises(FrameTooLarge):
        decoder.feed(prefix[head:])  # no body byte has been offered yet
    assert decoder.buffered_bytes == 0


# ---------------------------------------------------------------- examples


def test_frame_at_the_limit_is_accepted() -> None:
    cmd = p.Error(request_id=1, error=p.ServerError.UnknownError, message="x" * 100)
    raw = p.encode(cmd)
    assert p.FrameDecoder(max_frame_size_bytes=len(raw)).feed(raw)[0].command == cmd
    with pytest.raises(FrameTooLarge):
        p.FrameDecoder(max_frame_size_bytes=len(raw) - 1).feed(raw)


def test_default_limit_is_five_mib_plus_padding() -> None:
    assert p.FrameDecoder().max_frame_size_bytes == 5 * 1024 * 1024 + 10 * 1024


def test_partial_frame_holds_only_the_bytes_that_arrived() -> None:
    raw = _frame_bytes(p.Send(producer_id=1, sequence_id=1), b"z" * 5000)
    decoder = p.FrameDecoder()
    assert decoder.feed(raw[:100]) == []
    assert decoder.buffered_bytes == 96  # not the 5029 the prefix announced
    assert decoder.feed(raw[100:3000]) == []
    assert decoder.buffered_bytes == 2996
    (frame,) = decoder.feed(raw[3000:])
    assert frame.entry is not None and bytes(frame.entry.payload) == b"z" * 5000
    assert decoder.buffered_bytes == 0


def test_announced_size_is_not_allocated_up_front() -> None:
    # A prefix announcing a frame at the limit, then silence: the decoder holds the prefix
    # and a few bytes, not the announced size.
    decoder = p.FrameDecoder()
    size = decoder.max_frame_size_bytes - 4
    peak = tracemalloc_peak(lambda: decoder.feed(struct.pack(">II", size, 100) + b"\x00" * 10))
    assert decoder.buffered_bytes == 14
    assert peak < 64 * 1024


def tracemalloc_peak(run: Any) -> int:
    """Peak bytes Python allocated while ``run()`` ran."""
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_partial_frames_started_counts_new_partial_frames_only() -> None:
    raw = p.encode(p.Ping()) + _frame_bytes(p.Send(producer_id=1, sequence_id=1), b"z" * 100)
    decoder = p.FrameDecoder()
    decoder.feed(raw[:2])  # a split prefix starts a partial frame
    assert decoder.partial_frames_started == 1
    decoder.feed(raw[2:20])  # PING completes; the SEND is partial: a second one
    assert decoder.partial_frames_started == 2
    decoder.feed(raw[20:30])  # the same SEND grows
    assert decoder.partial_frames_started == 2
    (frame,) = decoder.feed(raw[30:])
    assert frame.command.TYPE is p.CommandType.SEND
    assert decoder.partial_frames_started == 2
    assert decoder.buffered_bytes == 0


def test_release_drops_the_partial_frame_and_fails_the_decoder() -> None:
    raw = _frame_bytes(p.Send(producer_id=1, sequence_id=1), b"z" * 5000)
    decoder = p.FrameDecoder()
    decoder.feed(raw[:1000])
    decoder.release("connection closed")
    assert decoder.buffered_bytes == 0
    with pytest.raises(ProtocolError, match="connection closed"):
        decoder.feed(raw[1000:])


def test_a_failed_decoder_keeps_no_buffer_alive() -> None:
    # A frame whose handler raises after it completed: neither the decoder nor anything it
    # keeps (an exception's traceback holds the failed call's frames and their locals)
    # may keep the frame's bytes alive once the caller dropped the exception.
    import gc
    import tracemalloc

    raw = _frame_bytes(p.Send(producer_id=1, sequence_id=1), b"z" * 200_000)
    head, rest = raw[:100], raw[100:]

    def on_frame(frame: p.Frame) -> None:
        raise ProtocolError("SEND before CONNECT")

    gc.disable()  # only reference counting frees memory here, as in a serving process
    tracemalloc.start()
    try:
        decoder = p.FrameDecoder()
        decoder.feed(head)
        with pytest.raises(ProtocolError):
            decoder.feed_each(rest, on_frame)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < 50_000  # the joined 200 kB frame is gone
    with pytest.raises(ProtocolError, match="SEND before CONNECT"):
        decoder.feed(p.encode(p.Ping()))


def test_decoder_stays_failed() -> None:
    decoder = p.FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(b"\x00\x00\x00\x01\x00")
    with pytest.raises(ProtocolError):
        decoder.feed(p.encode(p.Ping()))


# MESSAGE{consumer_id=1, message_id={ledgerId=1, entryId=1}}
MESSAGE_BASE = b"\x08\x09\x4a\x08\x08\x01\x12\x04\x08\x01\x10\x01"


def _raw_frame(base: bytes, rest: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(base) + len(rest), len(base)) + base + rest


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (_raw_frame(b""), "lacks required fields"),  # no type
        (_raw_frame(b"\x08\x2d"), "lacks required fields"),  # unknown type 45
        (_raw_frame(b"\x08\x0b"), "FLOW command without its flow"),  # FLOW without sub-message
        (_raw_frame(b"\x08\x0b\x5a\x02\x08\x03"), "lacks required fields"),  # no permits
        (_raw_frame(b"\x08\x0b\x5a\x09\x08"), "unparsable"),  # truncated
        (_raw_frame(b"\x08\x12\x92\x01\x00", b"x"), "unexpected payload"),  # PING + payload
        (_raw_frame(b"\x08\x06\x32\x04\x08\x01\x10\x01"), "without payload"),  # SEND, no entry
        (_raw_frame(b"\x08\x06\x32\x04\x08\x01\x10\x01", b"\x0e\x01\x00"), "checksum"),
        (_raw_frame(b"\x08\x06\x32\x04\x08\x01\x10\x01", b"\x00\x00\x00\x09ab"), "metadata size"),
        (_raw_frame(MESSAGE_BASE, b"\x0e\x02\x00\x00\x00\x09"), "overruns"),
        (struct.pack(">II", 2, 0)[:6], "no command size"),
        (struct.pack(">II", 4, 9), "exceeds the frame"),
    ],
)
def test_malformed_frames(raw: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        p.FrameDecoder().feed(raw)


def test_missing_required_field_in_nested_message() -> None:
    # MESSAGE whose MessageIdData lacks entryId.
    base = b"\x08\x09\x4a\x06\x08\x01\x12\x02\x08\x01"
    md = b"\x0a\x01p\x10\x01\x18\x02"
    entry = struct.pack(">I", len(md)) + md
    with pytest.raises(ProtocolError, match="lacks required fields"):
        p.FrameDecoder().feed(_raw_frame(base, entry))


def test_non_bytes_input_is_copied() -> None:
    raw = bytearray(_frame_bytes(p.Send(producer_id=1, sequence_id=1), b"abc"))
    (frame,) = p.FrameDecoder().feed(raw)
    raw[:] = b"\x00" * len(raw)
    assert frame.entry is not None and bytes(frame.entry.payload) == b"abc"


@settings(max_examples=200, deadline=None)
@given(
    consumer_id=u64,
    message_id=message_ids,
    redelivery_count=u32,
    ack_set=st.lists(i64, max_size=4),
    consumer_epoch=st.none() | u64,
    bem=st.none()
    | st.builds(p.BrokerEntryMetadata, broker_timestamp=st.none() | u64, index=st.none() | u64),
    payload=st.binary(max_size=100),
)
def test_fast_message_encoder_matches_the_generic_one(
    consumer_id: int,
    message_id: MessageId,
    redelivery_count: int,
    ack_set: list[int],
    consumer_epoch: int | None,
    bem: p.BrokerEntryMetadata | None,
    payload: bytes,
) -> None:
    md = p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    entry = b"".join(p.build_entry(md, payload))
    fast = p.encode_message(
        consumer_id,
        message_id,
        redelivery_count,
        entry,
        ack_set,
        consumer_epoch=consumer_epoch,
        broker_entry_metadata=bem,
    )
    cmd = p.Message(
        consumer_id=consumer_id,
        message_id=message_id,
        redelivery_count=redelivery_count,
        ack_set=tuple(ack_set),
        consumer_epoch=consumer_epoch,
    )
    generic = p.encode_payload_command(cmd, entry, bem)
    assert b"".join(fast) == b"".join(generic)
    (frame,) = p.FrameDecoder().feed(b"".join(fast))
    assert frame.command == cmd and frame.broker_entry_metadata == bem


def _upb_send(command_bytes: bytes) -> p.Send | None:
    from magnetar.protocol import _convert
    from magnetar.protocol.generated import PulsarApi_pb2 as pb

    base = pb.BaseCommand()
    try:
        _convert.parse_into(base, command_bytes, "command")
        command = _convert.command_from_base(base)
    except ProtocolError:
        return None
    return command if isinstance(command, p.Send) else None


@settings(max_examples=300, deadline=None)
@given(
    send=st.builds(
        p.Send,
        producer_id=u64,
        sequence_id=u64,
        num_messages=i32,
        txnid_least_bits=u64,
        txnid_most_bits=u64,
        highest_sequence_id=u64,
        is_chunk=st.booleans(),
        marker=st.booleans(),
        message_id=st.none() | message_ids,
    )
)
def test_fast_send_decoder_agrees_with_protobuf(send: p.Send) -> None:
    from magnetar.protocol import _convert

    raw = b"".join(p.encode_payload_command(send, b"\x00\x00\x00\x00"))
    command_bytes = raw[8 : 8 + int.from_bytes(raw[4:8], "big")]
    fast = _convert.send_from_command_bytes(command_bytes)
    if send.message_id is None:
        assert fast == send
    else:
        assert fast is None  # message_id is left to the protobuf runtime
    assert _upb_send(command_bytes) == send


@settings(max_examples=1000, deadline=None)
@given(
    body=st.lists(st.tuples(st.integers(0, 0x4F), st.binary(min_size=0, max_size=11)), max_size=10),
    data=st.data(),
)
def test_fast_send_decoder_never_accepts_what_protobuf_rejects(
    body: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    from magnetar.protocol import _convert

    send = b"".join(bytes([key]) + value for key, value in body)
    if len(send) > 127:
        send = send[:127]
    command_bytes = b"\x08\x06\x32" + bytes([len(send)]) + send
    if data.draw(st.booleans()):
        command_bytes = b"\x08\x06\x32\x04\x08\x01\x10" + data.draw(
            st.binary(min_size=1, max_size=11)
        )
        command_bytes = command_bytes[:3] + bytes([len(command_bytes) - 4]) + command_bytes[4:]
    fast = _convert.send_from_command_bytes(command_bytes)
    if fast is not None:
        assert fast == _upb_send(command_bytes)


def _send(producer_id: int, sequence_id: int) -> bytes:
    return _frame_bytes(
        p.Send(producer_id=producer_id, sequence_id=sequence_id), b"%d" % sequence_id
    )


def test_consecutive_sends_come_as_runs_in_stream_order() -> None:
    events: list[Any] = []

    def on_sends(run: p.frame.SendRun) -> None:
        events.append([(fields[0], fields[1], bytes(entry.data)[-1:]) for fields, entry in run])

    def on_frame(frame: p.Frame) -> None:
        events.append(type(frame.command).__name__)

    decoder = p.FrameDecoder()
    stream = _send(1, 0) + _send(2, 1) + p.encode(p.Ping()) + _send(1, 2) + _send(1, 3)
    decoder.feed_each(stream + _send(1, 4)[:5], on_frame, on_sends)  # ends inside a frame
    decoder.feed_each(_send(1, 4)[5:] + _send(1, 5), on_frame, on_sends)
    assert events == [
        [(1, 0, b"0"), (2, 1, b"1")],
        "Ping",
        [(1, 2, b"2"), (1, 3, b"3")],
        "Send",  # completed from two reads: the general path, a run of its own
        [(1, 5, b"5")],
    ]


def test_sends_before_malformed_input_are_handed_over_once() -> None:
    runs: list[list[int]] = []

    def on_sends(run: p.frame.SendRun) -> None:
        runs.append([fields[1] for fields, _ in run])
        if len(runs) == 1:
            raise ProtocolError("unknown producer")  # as the connection does

    with pytest.raises(ProtocolError, match="unknown producer"):
        p.FrameDecoder().feed_each(_send(1, 0) + p.encode(p.Ping()), lambda f: None, on_sends)
    assert runs == [[0]]  # not handed over a second time
    runs.clear()
    runs.append([])  # the handler raises no more
    with pytest.raises(ProtocolError, match="lacks required fields"):
        p.FrameDecoder().feed_each(
            _send(1, 0) + _send(1, 1) + _raw_frame(b""), lambda f: None, on_sends
        )
    assert runs == [[], [0, 1]]


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def _malloc_in_use_bytes() -> int:
    """Bytes malloc has handed out and not had back (glibc): what protobuf's C arenas
    hold, which tracemalloc does not see."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().uordblks)


def test_a_decoder_holds_nothing_of_the_commands_it_decoded() -> None:
    # Parsing into one reused upb message grew its arena by ~200 B per command, kept for
    # the connection's life (megabytes on a connection that lives long).
    decoder = p.FrameDecoder()
    data = p.encode(p.Subscribe(topic="persistent://public/default/t", subscription="s",
                                sub_type=p.SubType.Exclusive, consumer_id=1, request_id=2))  # fmt: skip
    for _ in range(1_000):  # warm: first-use allocations
        decoder.feed(data)
    before = _malloc_in_use_bytes()
    for _ in range(20_000):
        decoder.feed(data)
    assert _malloc_in_use_bytes() - before < 1_000_000  # ~4 MB when it held them
