"""The sans-IO parts: positions, offset specs, admission control, option checks."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client import AuthenticationBasic, AuthenticationToken
from magnetar.spark.admin_rest import auth_headers
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
from magnetar.spark.topic_catalog import client_authentication

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
    # A start inside an entry reads the rest of that entry: it counts.
    assert cap_end(Position(5, 9, 3), Position(5, 100), 10) == Position(5, 18)
    # Nothing new, or an empty partition: stay.
    assert cap_end(Position(5, 9), Position(5, 9), 10) == Position(5, 9)
    assert cap_end(EARLIEST, Position(5, -1), 10) == EARLIEST


def test_admission_control_across_ledgers_uses_the_ledger_list() -> None:
    ledgers = [(2, 10), (4, 0), (7, 10), (9, 10)]
    # 5 left in ledger 2, 0 in the empty ledger 4, then 5 of ledger 7.
    assert cap_end(Position(2, 4), Position(9, 3), 10, ledgers) == Position(7, 4)
    assert cap_end(EARLIEST, Position(9, 3), 10, ledgers) == Position(2, 9)
    assert cap_end(EARLIEST, Position(9, 3), 25, ledgers) == Position(9, 4 - 1)
    assert cap_end(EARLIEST, Position(9, 3), 24, ledgers) == Position(9, 3)
    assert cap_end(EARLIEST, Position(9, 3), 23, ledgers) == Position(9, 2)
    assert cap_end(Position(2, 9), Position(9, 3), 10, ledgers) == Position(7, 9)
    # A trimmed start ledger: counting begins at the first listed ledger after it.
    assert cap_end(Position(1, 50), Position(9, 3), 3, ledgers) == Position(2, 2)
    # A stale list that does not reach ``last`` never admits more than it can count.
    assert cap_end(Position(2, 4), Position(11, 3), 100, ledgers) == Position(9, 9)
    with pytest.raises(ValueError):
        cap_end(Position(2, 4), Position(9, 3), 10, None)


@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=6),
    st.integers(1, 12),
    st.data(),
)
def test_capped_ranges_cover_everything_once_in_steps_of_at_most_n(
    sizes: list[int], n: int, data: st.DataObject
) -> None:
    # Ledgers with ids 0, 3, 6, ... and the given entry counts; walk from earliest to the
    # last entry, one capped range at a time, counting each range's entries.
    ledgers = [(3 * i, size) for i, size in enumerate(sizes)]
    entries = [(lid, e) for lid, size in ledgers for e in range(size)]
    if not entries:
        return
    last = Position(*entries[-1])
    start = EARLIEST
    seen: list[tuple[int, int]] = []
    for _ in range(len(entries) + 1):
        end = cap_end(start, last, n, ledgers)
        if end == start:
            break
        batch = [p for p in entries if start.after(*p, -1) and end.covers(*p, -1)]
        assert 0 < len(batch) <= n
        seen.extend(batch)
        start = end
    assert seen == entries
    assert start == last


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
        {**ok, "max_entries_per_trigger": "5"},  # needs admin_url (ledger lists)
        {**ok, "admin_url": "pulsar://h:1"},
    ):
        with pytest.raises(OptionsError):
            parse_options(bad)


def test_authentication_options_reach_the_client_and_admin_requests() -> None:
    ok = {"service_url": "pulsar://h:1", "topic": "t"}
    assert client_authentication(parse_options(ok)) is None
    assert auth_headers(parse_options(ok)) == {}
    token = parse_options({**ok, "auth_token": "tok-123"})
    auth = client_authentication(token)
    assert isinstance(auth, AuthenticationToken)
    assert (auth.auth_method_name(), auth.auth_data()) == ("token", b"tok-123")
    assert auth_headers(token) == {"Authorization": "Bearer tok-123"}
    basic = parse_options({**ok, "auth_basic_user": "ann", "auth_basic_password": "pw"})
    auth = client_authentication(basic)
    assert isinstance(auth, AuthenticationBasic)
    assert (auth.auth_method_name(), auth.auth_data()) == ("basic", b"ann:pw")
    assert auth_headers(basic) == {"Authorization": "Basic " + base64.b64encode(b"ann:pw").decode()}
    with pytest.raises(OptionsError):
        parse_options({**ok, "auth_basic_user": "ann"})
