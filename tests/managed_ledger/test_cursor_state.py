"""CursorState against a naive model (a set of acknowledged positions), with hypothesis.

The model knows nothing about mark-delete positions or ranges: it keeps, per entry, the set
of acknowledged batch indexes. Every step compares acknowledgement state, first unacked
entry, and backlog in entries and messages.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.managed_ledger.cursor import (
    CursorSnapshot,
    CursorState,
    bits_to_words,
    words_to_bits,
)
from magnetar.managed_ledger.errors import InvalidCursorPosition
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.position import Position
from tests.call_count import calls_made


class Model:
    def __init__(self) -> None:
        self.ledgers = LedgerList([LedgerSegment(10)])
        self.batch: dict[Position, int] = {}
        self.acked: dict[Position, set[int]] = {}  # index sets; full = all indexes

    def log(self) -> list[Position]:
        return [Position(s.ledger_id, e) for s in self.ledgers for e in range(s.entries)]

    def append(self, sizes: list[int], new_ledger: bool) -> None:
        if new_ledger:
            last = self.ledgers.last_segment
            assert last is not None
            last.closed_ms = 1
            self.ledgers.add_ledger(LedgerSegment(last.ledger_id + 1 + len(sizes) % 3))
        seg = self.ledgers.last_segment
        assert seg is not None
        for size in sizes:
            pos = Position(seg.ledger_id, seg.entries)
            self.ledgers.record_append(seg.ledger_id, seg.entries, 10, size)
            self.batch[pos] = size

    def full(self, p: Position) -> bool:
        return len(self.acked.get(p, ())) == self.batch[p]

    def ack_full(self, p: Position) -> None:
        self.acked[p] = set(range(self.batch[p]))


def check(model: Model, cursor: CursorState) -> None:
    log = model.log()
    for p in log:
        assert cursor.is_acked(p) == model.full(p), p
        if not model.full(p) and model.acked.get(p):
            words = cursor.batch_ack_set(p)
            assert words is not None
            unacked = {i for i in range(model.batch[p]) if i not in model.acked[p]}
            assert {i for i in range(model.batch[p]) if words_to_bits(words) >> i & 1} == unacked
    unacked = [p for p in log if not model.full(p)]
    assert cursor.backlog_entries == len(unacked)
    assert cursor.backlog_messages == sum(
        model.batch[p] - len(model.acked.get(p, ())) for p in unacked
    )
    expected_first = unacked[0] if unacked else model.ledgers.end_position
    assert cursor.first_unacked() == expected_first
    assert model.ledgers.normalize(cursor.read_position) >= expected_first
    assert cursor.mark_delete < expected_first


op = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(1, 5), max_size=6), st.booleans()),
    st.tuples(st.just("ack"), st.integers(0, 10_000)),
    st.tuples(st.just("ack"), st.integers(0, 10_000)),
    st.tuples(st.just("ack"), st.integers(0, 10_000)),
    st.tuples(st.just("cumulative"), st.integers(0, 10_000)),
    st.tuples(st.just("batch"), st.integers(0, 10_000), st.sets(st.integers(0, 4), max_size=3)),
    st.tuples(st.just("skip"), st.integers(0, 6)),
    st.tuples(st.just("reset"), st.integers(0, 10_000)),
    st.tuples(st.just("restore"), st.none()),
    st.tuples(st.just("many"), st.lists(st.integers(0, 10_000), max_size=12), st.integers(0, 2)),
    st.tuples(st.just("many"), st.lists(st.integers(0, 10_000), max_size=12), st.integers(0, 2)),
)


def invalid_position(model: Model, kind: int) -> Position | None:
    """None (kind 0), after the last entry (1), or in a ledger id the log lacks (2)."""
    ids = [s.ledger_id for s in model.ledgers]
    if kind == 2:
        gaps = [i for i in range(ids[0], ids[-1]) if i not in ids]
        if gaps:
            return Position(gaps[0], 0)
    if kind == 0:
        return None
    last = model.ledgers.last_segment
    assert last is not None
    return Position(last.ledger_id, last.entries + 1)


@settings(max_examples=400, deadline=None)
@given(st.lists(op, max_size=60))
def test_cursor_matches_naive_model(script: list[tuple]) -> None:
    model = Model()
    model.append([1, 2, 3], False)
    cursor = CursorState("sub", model.ledgers, Position(10, -1))
    check(model, cursor)
    for step in script:
        kind = step[0]
        log = model.log()
        if kind == "append":
            model.append(step[1], step[2])
        elif kind == "restore":
            snap = CursorSnapshot.decode(cursor.snapshot().encode())
            cursor = CursorState.from_snapshot("sub", model.ledgers, snap)
        elif not log:
            continue
        elif kind == "ack":
            p = log[step[1] % len(log)]
            changed = cursor.ack(p)
            assert changed == (not model.full(p))
            model.ack_full(p)
        elif kind == "cumulative":
            p = log[step[1] % len(log)]
            cursor.ack_cumulative(p)
            for q in log:
                if q <= p:
                    model.ack_full(q)
        elif kind == "batch":
            p = log[step[1] % len(log)]
            idx = {i for i in step[2] if i < model.batch[p]}
            cursor.ack_batch_indexes(p, model.batch[p], idx)
            if not model.full(p):
                model.acked.setdefault(p, set()).update(idx)
        elif kind == "skip":
            n = cursor.skip(step[1])
            todo = [p for p in log if not model.full(p)][: step[1]]
            assert n == len(todo)
            if todo:
                for q in log:
                    if q <= todo[-1]:
                        model.ack_full(q)
        elif kind == "many":
            # one pass over a client's grouped acknowledgement: as ack() one at a time in
            # log order, stopping at the first position that does not exist
            named = [log[i % len(log)] for i in step[1]]
            bad = invalid_position(model, step[2])
            todo = sorted(set(named))
            if bad is not None:
                named.append(bad)
                if bad <= cursor.mark_delete:
                    bad = None  # acknowledged already, as ack() takes it: no error
                else:
                    todo = [q for q in todo if q < bad]
            expected = len({q for q in todo if not model.full(q)})
            messages = sum(model.batch[q] for q in todo)
            if bad is None:
                assert cursor.ack_positions(named) == (expected, messages)
            else:
                with pytest.raises(InvalidCursorPosition):
                    cursor.ack_positions(named)
            for q in todo:
                model.ack_full(q)
        elif kind == "reset":
            p = log[step[1] % len(log)]
            cursor.reset(p)
            assert cursor.read_position == p
            for q in log:
                if q < p:
                    model.ack_full(q)
                else:
                    model.acked.pop(q, None)
        check(model, cursor)


def test_mark_delete_jumps_ledger_boundaries_and_empty_ledgers() -> None:
    ledgers = LedgerList([LedgerSegment(1)])
    for e in range(3):
        ledgers.record_append(1, e, 1, 1)
    ledgers.add_ledger(LedgerSegment(2))  # stays empty
    ledgers.add_ledger(LedgerSegment(4))
    for e in range(2):
        ledgers.record_append(4, e, 1, 1)
    c = CursorState("c", ledgers, Position(1, -1))
    c.ack(Position(4, 0))
    c.ack(Position(1, 1))
    c.ack(Position(1, 2))
    assert c.mark_delete == Position(1, -1)
    c.ack(Position(1, 0))
    assert c.mark_delete == Position(4, 0)
    assert c.read_position == Position(4, 1)
    assert c.backlog_entries == 1
    assert len(c.acked) == 0


def test_ack_of_missing_entry_is_rejected() -> None:
    ledgers = LedgerList([LedgerSegment(1)])
    ledgers.record_append(1, 0, 1, 1)
    c = CursorState("c", ledgers, Position(1, -1))
    with pytest.raises(InvalidCursorPosition):
        c.ack(Position(1, 5))
    with pytest.raises(InvalidCursorPosition):
        c.ack_cumulative(Position(1, 5))


def test_bitset_words_follow_java_bitset() -> None:
    # BitSet with bits 0 and 63 set -> one word 0x8000000000000001 (negative as a long)
    assert bits_to_words((1 << 63) | 1, 64) == [-(2**63) + 1]
    assert words_to_bits([-(2**63) + 1]) == (1 << 63) | 1
    assert bits_to_words(1 << 64, 100) == [0, 1]
    assert bits_to_words(0, 100) == []


def test_estimated_message_counts_add_up() -> None:
    """A ledger known only from metadata has exact totals and additive span estimates."""
    seg = LedgerSegment(5, entries=7, messages=100, closed_ms=1)
    ledgers = LedgerList([seg])
    c = CursorState("c", ledgers, Position(5, -1))
    assert c.backlog_messages == 100
    for e in (6, 2, 3):
        c.ack(Position(5, e))
    spans = seg.messages_in(0, 1) + seg.messages_in(4, 5)
    assert c.backlog_messages == spans
    for e in (0, 1, 4, 5):
        c.ack(Position(5, e))
    assert c.backlog_messages == 0
    assert c.backlog_entries == 0


def test_one_message_entries_keep_no_prefix_array_and_count_exactly() -> None:
    """Unbatched appends keep no per-entry array; the first batch builds it, and every span
    counts the same as a naive sum before and after."""
    seg = LedgerSegment(3)
    ledgers = LedgerList([seg])
    counts: list[int] = []

    def append(messages: list[int]) -> None:
        ledgers.record_appends(3, seg.entries, 10 * len(messages), messages)
        counts.extend(messages)

    def spans_agree() -> None:
        for first in range(len(counts)):
            for last in range(first, len(counts)):
                assert seg.messages_in(first, last) == sum(counts[first : last + 1])

    append([1])
    append([1, 1, 1])
    assert seg.message_prefix is None
    spans_agree()
    append([1, 5, 1])
    assert seg.message_prefix is not None
    assert list(seg.message_prefix) == [0, 1, 2, 3, 4, 5, 10, 11]
    append([1])
    spans_agree()
    assert seg.messages == sum(counts) and seg.entries == len(counts)


def test_a_grouped_ack_costs_the_same_calls_for_10_or_1000_entries() -> None:
    """A client's grouped acknowledgement of consecutive entries (in any order) is one run
    for the cursor: the calls it costs do not grow with its length."""

    def cost(n: int) -> int:
        ledgers = LedgerList([LedgerSegment(10)])
        for e in range(2 * n):
            ledgers.record_append(10, e, 10, 1)
        cursor = CursorState("sub", ledgers, Position(10, -1))
        cursor.ack(Position(10, 0))
        positions = [Position(10, e) for e in range(n + 1, 2 * n)][::-1]
        calls = calls_made(lambda: cursor.ack_many(positions))
        assert cursor.backlog_entries == n
        assert cursor.first_unacked() == Position(10, 1)
        return calls

    assert cost(10) == cost(1000)
