"""A consumer's pending entries (sent, not acknowledged) against a plain dict, with runs
added and removed in one call each; and the calls those cost per entry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.consumer import PendingEntries
from magnetar.managed_ledger.entry_run import positions_of
from magnetar.managed_ledger.position import Position
from tests.call_count import calls_made

op = st.one_of(
    st.tuples(st.just("run"), st.integers(0, 2), st.integers(0, 30), st.integers(0, 8)),
    st.tuples(st.just("set"), st.integers(0, 2), st.integers(0, 40), st.integers(1, 5)),
    st.tuples(st.just("upto"), st.integers(0, 2), st.integers(-1, 40)),
    st.tuples(st.just("many"), st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)))),
    st.tuples(st.just("pop"), st.integers(0, 2), st.integers(0, 40)),
    st.tuples(
        st.just("clear"),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_pending_entries_match_a_plain_dict(script: list[tuple]) -> None:
    pending = PendingEntries()
    model: dict[Position, int] = {}
    for step in script:
        kind = step[0]
        if kind == "run":
            _, ledger, first, n = step
            positions = positions_of(ledger, first, n)
            counts = [(e % 3) + 1 for e in range(first, first + n)]
            pending.add_run(positions, counts, sum(counts))
            model.update(zip(positions, counts, strict=True))
        elif kind == "set":
            _, ledger, entry, count = step
            pending[Position(ledger, entry)] = count
            model[Position(ledger, entry)] = count
        elif kind == "upto":
            _, ledger, entry = step
            pending.remove_up_to(Position(ledger, entry))
            model = {p: c for p, c in model.items() if p > (ledger, entry)}
        elif kind == "many":
            positions = [Position(*p) for p in step[1]]
            pending.remove_many(positions)
            for p in positions:
                model.pop(p, None)
        elif kind == "pop":
            p = Position(step[1], step[2])
            assert pending.pop(p) == model.pop(p, None)
        else:
            pending.clear()
            model.clear()
        assert dict(pending) == model
        assert pending.messages == sum(model.values())
        if pending.ordered:
            assert list(pending) == sorted(pending)


def test_runs_come_and_go_at_a_cost_independent_of_their_length() -> None:
    def cost(n: int) -> tuple[int, int, int]:
        pending = PendingEntries()
        positions = positions_of(5, 0, 2 * n)
        counts = [1] * (2 * n)
        add = calls_made(lambda: pending.add_run(positions, counts, 2 * n))
        upto = calls_made(lambda: pending.remove_up_to(Position(5, n // 2)))
        many = calls_made(lambda: pending.remove_many(positions[n:]))
        assert pending.messages == len(pending) == n - n // 2 - 1
        return add, upto, many

    assert cost(10) == cost(2000)
