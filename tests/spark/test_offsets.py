"""The sans-IO parts: positions, offset specs, admission control, option checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.spark.offsets import (
    EARLIEST,
    OffsetsError,
    Position,
    cap_end,
    decode_offsets,
    encode_offsets,
    parse_offset_spec,
)
from magnetar.spark.options import OptionsError, parse_options

P0 = "persistent://public/default/t-partition-0"


def test_position_round_trip_and_order() -> None:
    p = Position(5, 7, -1)
    assert Position.decode(p.encode()) == p
    assert Position.decode("5:7") == p
    assert decode_offsets(encode_offsets({P0: p})) == {P0: p}
    # The whole entry sorts after each of its messages.
    assert (
        Position(5, 7, 3).sort_key() < Position(5, 7, -1).sort_key() < Position(5, 8, 0).sort_key()
    )


def test_range_membership() -> None:
    start, end = Position(5, 7, -1), Position(6, 2, -1)
    assert not start.after(5, 7, 0)
    assert start.after(5, 8, -1)
    assert Position(5, 7, 1).after(5, 7, 2) and not Position(5, 7, 1).after(5, 7, 1)
    assert EARLIEST.after(0, 0, -1)
    assert end.covers(6, 2, 99) and end.covers(5, 9, -1) and not end.covers(6, 3, 0)
    assert Position(6, 2, 4).covers(6, 2, 4) and not Position(6, 2, 4).covers(6, 2, 5)


@given(
    st.tuples(st.integers(0, 3), st.integers(-1, 5), st.integers(-1, 3)),
    st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(-1, 3)),
)
def test_after_and_covers_agree_with_order(
    a: tuple[int, int, int], m: tuple[int, int, int]
) -> None:
    # A message is either after a position or covered by it, never both.
    pos = Position(*a)
    msg_batch = max(m[2], 0)
    assert pos.after(m[0], m[1], msg_batch) != pos.covers(m[0], m[1], msg_batch)


def test_offset_specs() -> None:
    assert parse_offset_spec(None, "latest").resolve(P0, Position(1, 2)) == Position(1, 2)
    assert parse_offset_spec("earliest", "latest").resolve(P0, Position(1, 2)) == EARLIEST
    spec = parse_offset_spec('{"t-partition-0": [3, 4], "x": "earliest", "y": "7:8:1"}', "latest")
    assert spec.resolve(P0, Position(9, 9)) == Position(3, 4, -1)
    assert spec.resolve("persistent://public/default/x", Position(9, 9)) == EARLIEST
    assert spec.resolve("persistent://public/default/y", Position(9, 9)) == Position(7, 8, 1)
    assert spec.resolve("persistent://public/default/z", Position(9, 9)) == Position(9, 9)
    dict_form = parse_offset_spec('{"t-partition-0": {"ledger": 3, "entry": 4}}', "latest")
    assert dict_form.resolve(P0, EARLIEST) == Position(3, 4, -1)


@pytest.mark.parametrize(
    "text",
    ["{not json", "[1, 2]", "{}", '{"t": [1]}', '{"t": "a:b"}', '{"t": true}', '{"a/b": [1, 2]}'],
)
def test_malformed_offsets_are_rejected(text: str) -> None:
    with pytest.raises(OffsetsError):
        parse_offset_spec(text, "latest")


def test_admission_control_caps_inside_a_ledger() -> None:
    assert cap_end(Position(5, 9), Position(5, 100), 10) == Position(5, 19)
    assert cap_end(Position(5, 9), Position(5, 12), 10) == Position(5, 12)
    assert cap_end(Position(5, 9), Position(5, 100), None) == Position(5, 100)
    # Across ledgers the entry count is unknown: no cap.
    assert cap_end(Position(4, 9), Position(5, 100), 10) == Position(5, 100)
    # Nothing new, or an empty partition: stay.
    assert cap_end(Position(5, 9), Position(5, 9), 10) == Position(5, 9)
    assert cap_end(EARLIEST, Position(5, -1), 10) == EARLIEST


def test_option_checks() -> None:
    ok = {"service_url": "pulsar://h:1", "topic": "t"}
    assert parse_options(ok).topics == ("t",)
    for bad in (
        {"topic": "t"},
        {"service_url": "http://h:1", "topic": "t"},
        {"service_url": "pulsar://h:1"},
        {**ok, "topics": "a,b"},
        {**ok, "value_format": "json"},
        {**ok, "max_entries_per_trigger": "0"},
        {**ok, "fail_on_data_loss": "maybe"},
        {"service_url": "pulsar://h:1", "topics_pattern": "("},
    ):
        with pytest.raises(OptionsError):
            parse_options(bad)
