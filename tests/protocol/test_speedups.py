"""The compiled codec functions (``magnetar.protocol._cframe``) give exactly what the
pure-Python functions they stand in for give, on generated inputs, errors included; the
test environment builds them; ``MAGNETAR_PURE_PYTHON`` turns them off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
