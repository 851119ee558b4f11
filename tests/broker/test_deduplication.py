"""Per-producer dedup state machine (reference §6.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.deduplication import DeduplicationState, DupStatus, SnapshotError
from magnetar.common.clock import ManualClock


def new_state(clock: ManualClock | None = None) -> DeduplicationState:
    return DeduplicationState(clock or ManualClock(), producer_inactivity_timeout_ms=60_000)


def send(state: DeduplicationState, seq: int, name: str = "p") -> DupStatus:
    status = state.check(name, seq)
    if status is DupStatus.NOT_DUP:
        state.record_persisted(name, seq)
    return status


def test_pytest_producer_deduplication_scenario() -> None:
    # [pytest] test_producer_deduplication: re-sending seq 1 and 2 yields receipts (Dup),
    # and after re-creation last_sequence_id == 2.
    state = new_state()
    assert state.last_sequence_id("p") == -1
    assert [send(state, s) for s in (0, 1, 2)] == [DupStatus.NOT_DUP] * 3
    assert [send(state, s) for s in (1, 2)] == [DupStatus.DUP] * 2
    assert state.last_sequence_id("p") == 2


def test_pushed_but_not_persisted_is_unknown() -> None:
    # "otherwise it is Unknown: reply SEND_ERROR PersistenceError ... the retry is then a Dup"
    state = new_state()
    assert state.check("p", 5) is DupStatus.NOT_DUP
    assert state.check("p", 5) is DupStatus.UNKNOWN
    state.record_persisted("p", 5)
    assert state.check("p", 5) is DupStatus.DUP


def test_highest_sequence_id_and_failed_write() -> None:
    state = new_state()
    assert state.check("p", 10, highest_sequence_id=14) is DupStatus.NOT_DUP
    assert state.last_sequence_id("p") == 14
    state.reset_pushed()  # the write failed
    assert state.last_sequence_id("p") == -1
    assert state.check("p", 10, highest_sequence_id=14) is DupStatus.NOT_DUP
    state.record_persisted("p", 10, highest_sequence_id=14)
    assert state.check("p", 12) is DupStatus.DUP


def test_only_last_chunk_is_checked() -> None:
    # "Only the last chunk (chunk_id == num_chunks_from_msg - 1) is checked and recorded."
    state = new_state()
    for chunk in range(3):
        assert state.check("p", 7, chunk_id=chunk, num_chunks=3) is DupStatus.NOT_DUP
        state.record_persisted("p", 7, chunk_id=chunk, num_chunks=3)
    assert state.check("p", 7, chunk_id=0, num_chunks=3) is DupStatus.NOT_DUP
    assert state.check("p", 7, chunk_id=2, num_chunks=3) is DupStatus.DUP


def test_snapshot_restore_and_replay() -> None:
    clock = ManualClock()
    state = new_state(clock)
    for s in range(3):
        send(state, s, "a")
    send(state, 41, "b")
    data = state.snapshot()
    restored = new_state(clock)
    restored.restore(data)
    assert restored.last_sequence_id("a") == 2 and restored.last_sequence_id("b") == 41
    assert restored.check("a", 2) is DupStatus.DUP
    restored.replay_entry("a", 3)
    assert restored.check("a", 3) is DupStatus.DUP
    assert restored.snapshot() != data
    for bad in (b"", b"{", b'{"v":2}', b'{"v":1,"persisted":{"a":"x"}}', b"\xff"):
        with pytest.raises(SnapshotError):
            restored.restore(bad)


def test_snapshot_is_bounded() -> None:
    state = DeduplicationState(ManualClock(), max_producers_in_snapshot=2)
    for name in ("c", "a", "b"):
        send(state, 1, name)
    restored = new_state()
    restored.restore(state.snapshot())
    assert [restored.last_sequence_id(n) for n in ("a", "b", "c")] == [1, 1, -1]


def test_purge_inactive_producers() -> None:
    clock = ManualClock()
    state = new_state(clock)
    send(state, 1, "gone")
    send(state, 1, "back")
    state.producer_removed("gone")
    state.producer_removed("back")
    clock.advance(30)
    state.producer_added("back")
    assert state.purge_inactive() == []
    clock.advance(31)
    assert state.purge_inactive() == ["gone"]
    assert state.last_sequence_id("gone") == -1 and state.last_sequence_id("back") == 1


@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), max_size=40))
def test_against_direct_rules(ops: list[tuple[int, bool]]) -> None:
    state = new_state()
    pushed: int | None = None
    persisted: int | None = None
    for seq, persist in ops:
        status = state.check("p", seq)
        if pushed is not None and seq <= pushed:
            expected = (
                DupStatus.DUP if persisted is not None and seq <= persisted else DupStatus.UNKNOWN
            )
        else:
            expected = DupStatus.NOT_DUP
            pushed = seq
        assert status is expected
        if status is DupStatus.NOT_DUP and persist:
            state.record_persisted("p", seq)
            persisted = seq
        assert state.last_sequence_id("p") == (-1 if pushed is None else pushed)
