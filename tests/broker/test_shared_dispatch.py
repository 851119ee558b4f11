"""Shared round-robin by permits with priority levels (reference §6.6)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.shared_dispatch import SharedConsumerRing


def test_java_javadoc_example() -> None:
    # Java AbstractDispatcherMultipleConsumers: C1..C3 priority 0 with permits 2,1,1;
    # C4, C5 priority 1 with permits 2,1 -> C1, C2, C3, C1, C4, C5, C4.
    ring = SharedConsumerRing()
    for cid, prio, permits in [(1, 0, 2), (2, 0, 1), (3, 0, 1), (4, 1, 2), (5, 1, 1)]:
        ring.add(cid, prio)
        ring.add_permits(cid, permits)
    picks: list[int] = []
    for _ in range(8):
        nxt = ring.next_consumer()
        if nxt is None:
            break
        ring.consume_permits(nxt, 1)
        picks.append(nxt)
    assert picks == [1, 2, 3, 1, 4, 5, 4]


def test_whole_entries_may_overdraw_permits() -> None:
    # "It dispatches whole entries while permits > 0 ... Permits may therefore go negative."
    ring = SharedConsumerRing()
    ring.add(1)
    ring.add_permits(1, 3)
    assert ring.assign([10, 1]) == [(1, [0])]
    assert ring.permits(1) == -7
    assert ring.next_consumer() is None
    ring.add_permits(1, 8)
    assert ring.assign([1]) == [(1, [0])]


def test_higher_priority_preferred_then_fallback() -> None:
    ring = SharedConsumerRing()
    ring.add(10, priority_level=1)
    ring.add(20, priority_level=0)
    assert ring.order == [20, 10]
    ring.add_permits(10, 5)
    assert ring.next_consumer() == 10  # the higher level has no permits
    ring.add_permits(20, 1)
    assert ring.next_consumer() == 20  # back to the higher level as soon as it can take
    ring.set_blocked(20, True)
    ring.add_permits(20, 1)
    assert ring.next_consumer() == 10


def test_batch_limit_per_pick() -> None:
    ring = SharedConsumerRing(max_round_robin_batch_entries=2)
    ring.add(1)
    ring.add(2)
    ring.add_permits(1, 100)
    ring.add_permits(2, 100)
    assert ring.assign([1] * 5) == [(1, [0, 1]), (2, [2, 3]), (1, [4])]


@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=6),
    st.lists(st.integers(1, 3), max_size=30),
)
def test_invariants(specs: list[tuple[int, int]], entries: list[int]) -> None:
    ring = SharedConsumerRing(max_round_robin_batch_entries=1)
    permits: dict[int, int] = {}
    prio: dict[int, int] = {}
    for i, (p, k) in enumerate(specs):
        ring.add(i, p)
        ring.add_permits(i, k)
        permits[i], prio[i] = k, p
    for count in entries:
        cid = ring.next_consumer()
        available = [c for c in permits if permits[c] > 0]
        if cid is None:
            assert not available
            break
        # Only a consumer with permits, and none of a strictly better level has permits.
        assert permits[cid] > 0
        assert all(prio[c] >= prio[cid] for c in available)
        permits[cid] -= count
        ring.consume_permits(cid, count)
    assert all(ring.permits(c) == permits[c] for c in permits)


@given(st.integers(1, 6), st.integers(1, 40))
def test_round_robin_within_a_level(n: int, picks: int) -> None:
    ring = SharedConsumerRing()
    for cid in range(n):
        ring.add(cid)
        ring.add_permits(cid, 1000)
    assert [ring.next_consumer() for _ in range(picks)] == [i % n for i in range(picks)]
