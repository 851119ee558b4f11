"""PositionRangeSet against a naive set of positions (hypothesis), plus edge cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.range_set import PositionRangeSet

LEDGERS = (3, 5, 9)
ENTRIES = 40

positions = st.builds(Position, st.sampled_from(LEDGERS), st.integers(0, ENTRIES - 1))


def naive_ranges(members: set[Position]) -> list[tuple[Position, Position]]:
    out: list[tuple[Position, Position]] = []
    for p in sorted(members):
        if out and out[-1][1][0] == p[0] and out[-1][1][1] + 1 == p[1]:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return out


ops = st.one_of(
    st.tuples(st.just("add"), positions),
    st.tuples(st.just("add_range"), positions, st.integers(0, 12)),
    st.tuples(st.just("remove_up_to"), positions),
    st.tuples(st.just("pop"), positions),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=80), positions, positions)
def test_matches_naive_set(script: list[tuple], probe_a: Position, probe_b: Position) -> None:
    s = PositionRangeSet()
    naive: set[Position] = set()
    for op in script:
        if op[0] == "add":
            assert s.add(op[1]) == (op[1] not in naive)
            naive.add(op[1])
        elif op[0] == "add_range":
            first = op[1]
            last = Position(first[0], first[1] + op[2])
            new = {Position(first[0], e) for e in range(first[1], last[1] + 1)}
            assert s.add_range(first, last) == len(new - naive)
            naive |= new
        elif op[0] == "remove_up_to":
            removed = s.remove_up_to(op[1])
            gone = {p for p in naive if p <= op[1]}
            assert {Position(a[0], e) for a, b in removed for e in range(a[1], b[1] + 1)} == gone
            naive -= gone
        else:
            rng = naive_ranges(naive)
            starting = [r for r in rng if r[0] == op[1]]
            end = s.pop_range_starting_at(op[1])
            if starting:
                assert end == starting[0][1]
                naive -= {Position(op[1][0], e) for e in range(op[1][1], end[1] + 1)}
            else:
                assert end is None
        assert s.size == len(naive)
        assert list(s.ranges()) == naive_ranges(naive)
    for p in [probe_a, probe_b]:
        assert (p in s) == (p in naive)
    lo, hi = min(probe_a, probe_b), max(probe_a, probe_b)
    assert s.count_in(lo, hi) == sum(1 for p in naive if lo <= p <= hi)
    assert len(s) == len(naive_ranges(naive))
    assert s.first() == (min(naive) if naive else None)
    assert s.last() == (max(naive) if naive else None)
    back = PositionRangeSet.deserialize(s.serialize())
    assert list(back.ranges()) == list(s.ranges())


@settings(max_examples=200, deadline=None)
@given(
    st.sets(positions, max_size=60),
    st.lists(st.integers(0, ENTRIES), min_size=3, max_size=3),
)
def test_merged_spans_join_across_ledger_boundaries(
    members: set[Position], counts: list[int]
) -> None:
    ledgers = list(zip(LEDGERS, counts, strict=True))
    s = PositionRangeSet()
    for p in members:
        s.add(p)
    # naive: walk the log in order, joining consecutive acked entries
    log = [Position(lid, e) for lid, n in ledgers for e in range(n)]
    spans: list[tuple[Position, Position]] = []
    prev_acked = False
    for p in log:
        if p in members:
            if prev_acked:
                spans[-1] = (spans[-1][0], p)
            else:
                spans.append((p, p))
            prev_acked = True
        else:
            prev_acked = False
    assert list(s.merged_spans(ledgers)) == spans


def test_first_missing_after_uses_the_next_position_function() -> None:
    s = PositionRangeSet()
    s.add_range(Position(1, 5), Position(1, 9))  # ledger 1 has entries 0..9
    s.add_range(Position(2, 0), Position(2, 3))

    def nxt(p: Position) -> Position:
        if p[0] == 1 and p[1] == 9:
            return Position(2, 0)
        return Position(p[0], p[1] + 1)

    assert s.first_missing_after(Position(1, 4), nxt) == Position(2, 4)
    assert s.first_missing_after(Position(1, 2), nxt) == Position(1, 3)


def test_deserialize_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        PositionRangeSet.deserialize(b"not zlib")


def test_serialize_bound_keeps_oldest_ranges() -> None:
    s = PositionRangeSet()
    for e in range(0, 100, 2):
        s.add(Position(7, e))
    back = PositionRangeSet.deserialize(s.serialize(ranges_max=10))
    assert len(back) == 10
    assert back.last() == Position(7, 18)


def test_many_holes_stay_compact() -> None:
    s = PositionRangeSet()
    for e in range(0, 2_000_000, 2):
        s.add(Position(1, e))
    assert len(s) == 1_000_000
    assert s.count_in(Position(1, 0), Position(1, 1_999_999)) == 1_000_000
    # two int64 columns: 16 bytes per range (plus array slack)
    r = s._by_ledger[1]
    assert r.starts.itemsize * len(r.starts) + r.ends.itemsize * len(r.ends) == 16_000_000
    blob = s.serialize()
    assert len(blob) < 16_000_000
