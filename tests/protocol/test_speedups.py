"""The compiled codec functions (``magnetar.protocol._cframe``) give exactly what the
pure-Python functions they stand in for give, on generated inputs, errors included; the
test environment builds them; ``MAGNETAR_PURE_PYTHON`` turns them off."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import magnetar.protocol as p
import magnetar.protocol.frame as frame_module
from magnetar.common.errors import ProtocolError
from magnetar.protocol import _convert, hand_encoders, speedups
from magnetar.protocol.varint import encode_varint

CFRAME = speedups.CFRAME
U64 = st.integers(0, (1 << 64) - 1)
I64_BITS = st.integers(-(1 << 63), (1 << 64) - 1)
SMALL = st.integers(-1, 1 << 22)


def test_the_test_environment_builds_the_compiled_module() -> None:
    # make test installs the package with a compiler at hand: a build that silently fell
    # back to pure Python would leave the compiled functions untested.
    assert CFRAME is not None
    assert hand_encoders.encode_send_receipt_at is CFRAME.send_receipt_at
    assert _convert.send_fields_from_command_bytes is CFRAME.send_fields


def test_pure_python_is_chosen_by_the_environment_variable() -> None:
    code = (
        "from magnetar.protocol import hand_encoders, _convert, speedups;"
        "print(speedups.CFRAME is None,"
        " hand_encoders.encode_send_receipt_at is hand_encoders.py_encode_send_receipt_at,"
        " _convert.send_fields_from_command_bytes is _convert.py_send_fields_from_command_bytes)"
    )
    env = {**os.environ, speedups.PURE_PYTHON_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True", "True"]


send_field = st.tuples(st.integers(1, 8), st.one_of(st.integers(0, 300), U64)).map(
    lambda f: bytes([f[0] << 3]) + encode_varint(f[1])
)


@settings(max_examples=2000, deadline=None)
@given(
    body=st.lists(
        st.one_of(
            send_field,  # well-formed fields, in any order, repeated
            st.tuples(st.integers(0, 0x4F), st.binary(max_size=11)).map(
                lambda kv: bytes([kv[0]]) + kv[1]
            ),  # anything
        ),
        max_size=10,
    ),
    length_delta=st.sampled_from([0, 0, 0, -1, 1]),
    head=st.sampled_from([b"\x08\x06\x32", b"\x08\x07\x32", b"\x08\x06\x3a", b""]),
)
def test_send_fields_agree(body: list[bytes], length_delta: int, head: bytes) -> None:
    assert CFRAME is not None
    send = b"".join(body)[:127]
    data = head + bytes([max(0, min(255, len(send) + length_delta))]) + send
    got = CFRAME.send_fields(data)
    want = _convert.py_send_fields_from_command_bytes(data)
    assert got == want
    if want is not None:
        assert [type(v) for v in got or ()] == [type(v) for v in want]


def _outcome(fn: object, *args: object) -> tuple[str, object]:
    try:
        return "ok", fn(*args)  # type: ignore[operator]
    except (ValueError, OverflowError) as exc:
        return "error", type(exc)


@given(
    producer_id=st.one_of(st.integers(0, 20_000), U64, st.integers(-5, -1)),
    sequence_id=st.one_of(st.integers(0, 20_000), U64),
    ledger_id=st.one_of(SMALL, I64_BITS, st.just(1 << 64)),
    entry_id=st.one_of(SMALL, I64_BITS),
    highest=st.one_of(st.just(0), U64, st.just(1 << 64)),
)
def test_send_receipts_agree(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
) -> None:
    assert CFRAME is not None
    args = (producer_id, sequence_id, ledger_id, entry_id, highest)
    assert _outcome(CFRAME.send_receipt_at, *args) == _outcome(
        hand_encoders.py_encode_send_receipt_at, *args
    )


ids = st.one_of(st.integers(0, 200), st.integers(-1, (1 << 63) - 1), st.just(1 << 63))


@given(
    consumer_id=st.one_of(st.integers(0, 300), U64, st.just(1 << 63)),
    partition=st.one_of(st.integers(-2, 300), st.integers(-1, 1 << 31), st.just(1 << 63)),
    positions=st.lists(st.tuples(ids, ids), max_size=8),
    redelivery=st.booleans(),
    as_view=st.booleans(),
    data=st.data(),
)
def test_message_runs_agree(
    consumer_id: int,
    partition: int,
    positions: list[tuple[int, int]],
    redelivery: bool,
    as_view: bool,
    data: st.DataObject,
) -> None:
    entries: list[bytes] = [data.draw(st.binary(max_size=40)) for _ in positions]
    passed = [memoryview(e) if as_view else e for e in entries]
    sizes = [len(e) for e in entries]
    counts = [data.draw(st.integers(0, 3)) for _ in positions] if redelivery else None
    got = hand_encoders.encode_messages_at(consumer_id, partition, positions, passed, sizes, counts)  # type: ignore[arg-type]
    want = hand_encoders.py_encode_messages_at(
        consumer_id, partition, positions, passed, sizes, counts
    )  # type: ignore[arg-type]
    assert [bytes(x) for x in got] == [bytes(x) for x in want]
    assert all(a is b for a, b in zip(got[1::2], passed, strict=True))  # entries uncopied


def test_message_runs_check_their_arguments() -> None:
    assert CFRAME is not None
    with pytest.raises(ValueError, match="differ in length"):
        CFRAME.messages_at(1, -1, [(1, 2)], [b"x", b"y"], [1])
    with pytest.raises(TypeError):
        CFRAME.messages_at(1, -1, [(1, 2, 3)], [b"x"], [1])


def test_a_compiled_module_not_built_falls_back_quietly(caplog: pytest.LogCaptureFixture) -> None:
    assert speedups.load("magnetar.protocol._not_built") is None
    assert not caplog.records


def test_a_compiled_module_that_fails_to_load_falls_back_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # as a module built for another Python, or one whose import cycles back through
    # speedups, does: it is there, and importing it raises ImportError
    (tmp_path / "broken_speedup.py").write_text("raise ImportError('built for another ABI')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert speedups.load("broken_speedup") is None
    assert "compiled module broken_speedup not loaded: built for another ABI" in caplog.text


_METADATA = p.encode_metadata(p.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1))


def _send_frame(pid: int, seq: int, checksum: bool, batch: int | None, size: int) -> bytes:
    return b"".join(
        p.encode_send(pid, seq, _METADATA, b"x" * size, num_messages=batch, checksum=checksum)
    )


_frames = st.one_of(
    st.builds(
        _send_frame,
        st.integers(0, 1 << 40),
        U64,
        st.booleans(),
        st.one_of(st.none(), st.integers(-5, 500)),
        st.integers(0, 300),
    ),
    st.builds(  # a SEND carrying broker entry metadata: left to the Python loop
        lambda seq: b"".join(
            p.encode_payload_command(
                p.Send(producer_id=1, sequence_id=seq),
                p.build_entry(_METADATA, b"y"),
                p.BrokerEntryMetadata(index=seq),
            )
        ),
        st.integers(0, 1000),
    ),
    st.sampled_from([p.encode(p.Ping()), p.encode(p.Flow(consumer_id=1, message_permits=5))]),
    st.binary(max_size=40).map(lambda b: len(b).to_bytes(4, "big") + b),  # anything
)


def _damaged(frame: bytes, at: int, value: int) -> bytes:
    """``frame`` with the byte at ``at`` (taken modulo its length) set to ``value``."""
    i = at % len(frame)
    return frame[:i] + bytes([value]) + frame[i + 1 :]


def _decode(stream: bytes, cuts: list[int], scan: object) -> list[object]:
    """What FrameDecoder.feed_each hands over for ``stream`` read in pieces at ``cuts``,
    with the decoder's SEND loop ``scan`` (None: the Python loop)."""
    events: list[object] = []

    def on_sends(run: list[tuple[object, p.Entry]]) -> None:
        events.append(
            [
                (fields, bytes(e.data), e.checksum, e.metadata_bytes.tobytes(), e.verify_checksum())
                for fields, e in run
            ]
        )

    def on_frame(frame: p.Frame) -> None:
        entry = None if frame.entry is None else bytes(frame.entry.data)
        events.append((repr(frame.command), entry, repr(frame.broker_entry_metadata)))

    saved = frame_module._SCAN_SENDS
    frame_module._SCAN_SENDS = scan
    try:
        decoder = p.FrameDecoder(max_frame_size_bytes=2000)
        bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
        for start, end in itertools.pairwise(bounds):
            try:
                decoder.feed_each(stream[start:end], on_frame, on_sends)
            except ProtocolError as exc:
                events.append(("error", type(exc).__name__, str(exc)))
                break
        events.append(("left", decoder.buffered_bytes, decoder.partial_frames_started))
    finally:
        frame_module._SCAN_SENDS = saved
    return events


@settings(max_examples=1500, deadline=None)
@given(
    frames=st.lists(
        st.tuples(
            _frames, st.one_of(st.none(), st.tuples(st.integers(0, 80), st.integers(0, 255)))
        ),
        max_size=12,
    ),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=4),
)
def test_the_send_loop_agrees_with_the_python_loop(
    frames: list[tuple[bytes, tuple[int, int] | None]], cuts: list[int]
) -> None:
    stream = b"".join(f if d is None else _damaged(f, *d) for f, d in frames)
    assert CFRAME is not None
    assert _decode(stream, cuts, CFRAME.scan_sends) == _decode(stream, cuts, None)


def test_the_send_loop_checks_its_arguments() -> None:
    assert CFRAME is not None
    with pytest.raises(TypeError):
        CFRAME.scan_sends(bytearray(b"x"), memoryview(b"x"), 0, 10, [], p.Entry)
    with pytest.raises(ValueError):
        CFRAME.scan_sends(b"x", memoryview(b"x"), 5, 10, [], p.Entry)


def test_the_send_loop_takes_whole_sends_and_stops_at_anything_else() -> None:
    assert CFRAME is not None
    sends_part = _send_frame(7, 1, True, None, 10) + _send_frame(7, 2, False, 3, 0)
    stream = sends_part + p.encode(p.Ping()) + _send_frame(7, 3, True, None, 5)[:-1]
    run: list[tuple[object, p.Entry]] = []
    pos = CFRAME.scan_sends(stream, memoryview(stream), 0, 2000, run, p.Entry)
    assert pos == len(sends_part)  # stopped at the PING
    assert [fields[:3] for fields, _ in run] == [(7, 1, 1), (7, 2, 3)]
    for (_, entry), checksum in zip(run, (True, False), strict=True):
        assert type(entry) is p.Entry and (entry.checksum is not None) is checksum
        assert entry.verify_checksum() and entry.metadata.producer_name == "p"
    ping_end = pos + len(p.encode(p.Ping()))
    assert CFRAME.scan_sends(stream, memoryview(stream), ping_end, 2000, run, p.Entry) == ping_end
    assert len(run) == 2  # the last SEND is not whole
