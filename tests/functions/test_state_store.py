"""The state store core: counters as one register per instance, values, the call's writes
(visible at once, published together, dropped when the call fails), effectively-once
positions, and tolerance of records it does not understand."""

from __future__ import annotations

import pytest

from magnetar.functions.state_store import (
    STATE_VALUE_BYTES_MAX,
    STATE_WRITES_PER_MESSAGE_MAX,
    StateError,
    StateStore,
)


def replay(into: StateStore, source: list[tuple[str, bytes]]) -> StateStore:
    for key, payload in source:
        into.apply(key, payload)
    return into


def test_counters_of_parallel_instances_add_up_and_never_overwrite_each_other() -> None:
    log: list[tuple[str, bytes]] = []
    a, b = StateStore(0), StateStore(1)
    for _ in range(3):
        a.incr_counter("w", 1)
        log += [(r.key, r.payload) for r in a.take_writes()]
    b.incr_counter("w", 5)  # b has not read a's writes yet
    log += [(r.key, r.payload) for r in b.take_writes()]
    assert replay(StateStore(7), log).get_counter("w") == 8
    # Applying the log twice changes nothing: values are absolute.
    assert replay(replay(StateStore(7), log), log).get_counter("w") == 8


def test_writes_are_visible_to_the_call_and_dropped_when_it_fails() -> None:
    store = StateStore(0)
    store.put_state("k", b"v1")
    store.incr_counter("n", 2)
    assert (store.get_state("k"), store.get_counter("n")) == (b"v1", 2)
    store.discard_writes()
    assert (store.get_state("k"), store.get_counter("n")) == (None, 0)
    store.put_state("k", b"v2")
    store.del_state("k")
    records = store.take_writes()
    assert [(r.key, r.payload) for r in records] == [("v/k", b"")]
    assert store.get_state("k") is None


def test_del_counter_removes_every_contribution() -> None:
    store = replay(StateStore(0), [("c/n/0", b'{"c": 2}'), ("c/n/3", b'{"c": 4}')])
    store.del_counter("n")
    writes = store.take_writes()
    assert sorted(r.key for r in writes) == ["c/n/0", "c/n/3"]
    assert store.get_counter("n") == 0


def test_positions_and_unknown_records() -> None:
    store = StateStore(0)
    store.record_position("persistent://t/n/in", (5, 7, -1))
    store.take_writes()
    assert store.position("persistent://t/n/in") == (5, 7, -1)
    for key, payload in [("v/x", b"not json"), ("c/n/notanumber", b'{"c": 1}'),
                         ("zz/other", b"{}"), ("p/t", b'{"p": [1]}')]:  # fmt: skip
        store.apply(key, payload)
    assert (store.get_state("x"), store.get_counter("n"), store.position("t")) == (None, 0, None)


def test_limits() -> None:
    store = StateStore(0)
    with pytest.raises(StateError, match="exceeds"):
        store.put_state("big", b"x" * (STATE_VALUE_BYTES_MAX + 1))
    with pytest.raises(StateError, match="non-empty"):
        store.get_counter("")
    with pytest.raises(StateError, match="must be an int"):
        store.incr_counter("n", 1.5)  # type: ignore[arg-type]
    for i in range(STATE_WRITES_PER_MESSAGE_MAX):
        store.incr_counter(f"k{i}", 1)
    store.incr_counter("k0", 1)  # the same key again is no new write
    with pytest.raises(StateError, match="state keys written by one message"):
        store.incr_counter("one-too-many", 1)
