"""Sans-IO consumer cores: ack grouping, ack timeout, negative acks, receive queue permits,
chunk splitting and reassembly, partition routing, backoff."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.ack_grouping import AckGroupingTracker
from magnetar.client.backoff import Backoff
from magnetar.client.chunk_reassembler import ChunkReassembler
from magnetar.client.message_builder import build_sends
from magnetar.client.message_id import MessageId
from magnetar.client.negative_ack_tracker import NegativeAckTracker
from magnetar.client.receive_queue import ReceiveQueue, Run
from magnetar.client.routing import (
    HashingScheme,
    PartitionRouter,
    PartitionsRoutingMode,
    boost_hash,
    java_string_hash,
)
from magnetar.client.unacked_tracker import UnackedMessageTracker
from magnetar.common.murmur3 import pulsar_hash_str
from magnetar.protocol import AckType, CompressionType, decode_metadata
from magnetar.protocol import MessageId as WireId

# ------------------------------------------------------------------ ack grouping


def test_individual_acks_are_grouped_and_flush_empties() -> None:
    t = AckGroupingTracker(7, group_max_size=3)
    assert not t.add_individual(1, 1)
    assert not t.add_individual(1, 2)
    assert t.add_individual(1, 3)  # full
    [ack] = t.flush()
    assert ack.consumer_id == 7 and ack.ack_type == AckType.Individual
    assert [m.position for m in ack.message_id] == [(1, 1), (1, 2), (1, 3)]
    assert t.flush() == []


def test_batch_entry_acked_only_when_every_index_is_acked() -> None:
    t = AckGroupingTracker(1)
    for i in (2, 0):
        t.add_individual(5, 9, i, 3)
    assert t.flush() == []
    t.add_individual(5, 9, 1, 3)
    [ack] = t.flush()
    assert ack.message_id == (WireId(5, 9),)


def test_batch_index_ack_sends_ack_set_with_unacked_bits() -> None:
    t = AckGroupingTracker(1, batch_index_ack_enabled=True)
    t.add_individual(5, 9, 1, 3)
    [ack] = t.flush()
    assert ack.message_id == (WireId(5, 9, ack_set=(0b101,)),)
    t.add_individual(5, 9, 0, 3)
    t.add_individual(5, 9, 2, 3)
    [ack] = t.flush()
    assert ack.message_id == (WireId(5, 9),)


def test_cumulative_keeps_highest_and_mid_batch_steps_back() -> None:
    t = AckGroupingTracker(1)
    t.add_individual(3, 1)
    t.add_cumulative(3, 4)
    t.add_cumulative(3, 2)  # lower: ignored
    t.add_individual(3, 9)
    acks = t.flush()
    assert acks[0].ack_type == AckType.Cumulative and acks[0].message_id == (WireId(3, 4),)
    assert acks[1].message_id == (WireId(3, 9),)  # (3,1) was covered by the cumulative ack
    t.add_cumulative(4, 10, 1, 5)
    [ack] = t.flush()
    assert ack.message_id == (WireId(4, 9),)
    t.add_cumulative(4, 10, 4, 5)  # last index: the whole entry
    assert t.flush()[0].message_id == (WireId(4, 10),)


# ------------------------------------------------------------------ timeouts


def test_unacked_tracker_expires_in_order_and_forgets_acked() -> None:
    t = UnackedMessageTracker(1000)
    t.add((1, 1), 0)
    t.add((1, 2), 10)
    t.add((1, 3), 20)
    t.remove((1, 2))
    assert t.tick(999) == []
    assert t.tick(1015) == [(1, 1)]
    t.remove_up_to((1, 5))
    assert t.tick(10_000) == [] and len(t) == 0


def test_negative_ack_tracker_deadlines_and_renack() -> None:
    t = NegativeAckTracker(100)
    t.add((1, 1), 0)
    t.add((1, 2), 0, delay_ms=10)
    t.add((1, 1), 50)  # moves to 150
    assert t.next_deadline_ms() == 10
    assert t.tick(100) == [(1, 2)]
    assert t.tick(149) == []
    assert t.tick(150) == [(1, 1)]
    t.add((2, 2), 0)
    t.remove((2, 2))
    assert t.tick(10**6) == [] and len(t) == 0


# ------------------------------------------------------------------ receive queue


@given(st.integers(1, 200), st.lists(st.sampled_from(["push", "pop", "drop"]), max_size=400))
def test_permits_never_exceed_the_window(size: int, ops: list[str]) -> None:
    """Model: the broker may have outstanding at most `size` messages; permits returned
    plus messages queued plus messages owed never exceed what was granted."""
    q: ReceiveQueue[int] = ReceiveQueue(size)
    granted = q.initial_permits()
    delivered = 0
    for op in ops:
        if op == "push" and delivered < granted:
            q.push(delivered)
            delivered += 1
        elif op == "pop":
            _, permits = q.pop()
            granted += permits
        elif op == "drop" and delivered < granted:
            delivered += 1  # a message the client discards itself
            granted += q.dropped(1)
        assert granted - delivered <= size
        assert len(q) <= size


class _Counting(Run[int]):
    """A run of consecutive ints, built as taken."""

    def __init__(self, first: int, count: int) -> None:
        super().__init__(count)
        self.next = first

    def take(self) -> int:
        self.remaining -= 1
        self.next += 1
        return self.next - 1


@given(
    st.integers(1, 60),
    st.lists(
        st.tuples(st.sampled_from(["push", "run", "pop", "pop_many", "clear"]), st.integers(0, 7)),
        max_size=300,
    ),
)
def test_runs_pop_like_their_items_pushed_one_by_one(size: int, ops: list[tuple[str, int]]) -> None:
    """Model: a run of k items behaves exactly as k items pushed one by one (order, length,
    permits), including when a partly taken run is cleared."""
    runs: ReceiveQueue[int] = ReceiveQueue(size)
    plain: ReceiveQueue[int] = ReceiveQueue(size)
    runs.initial_permits()
    plain.initial_permits()
    pushed = 0
    for op, k in ops:
        if op == "push":
            runs.push(pushed)
            plain.push(pushed)
            pushed += 1
        elif op == "run":
            runs.push_run(_Counting(pushed, k))
            plain.push_many(list(range(pushed, pushed + k)))
            pushed += k
        elif op == "pop":
            assert runs.pop() == plain.pop()
        elif op == "pop_many":
            assert runs.pop_many(k) == plain.pop_many(k)
        else:
            left = [item.take_all() if isinstance(item, Run) else [item] for item in runs.clear()]
            assert [i for items in left for i in items] == plain.clear()
        assert len(runs) == len(plain)


def test_flow_sent_at_half_window() -> None:
    q: ReceiveQueue[int] = ReceiveQueue(10)
    assert q.initial_permits() == 10
    for i in range(10):
        q.push(i)
    permits = [q.pop()[1] for _ in range(10)]
    assert permits == [0, 0, 0, 0, 5, 0, 0, 0, 0, 5]
    assert q.pop() == (None, 0)


# ------------------------------------------------------------------ chunking


def test_chunks_split_and_reassemble() -> None:
    payload = bytes(range(256)) * 40
    ops = build_sends(
        payload,
        "h",
        producer_name="p",
        sequence_id=9,
        publish_time_ms=1,
        chunk_max_bytes=1000,
        compression=CompressionType.NONE,
    )
    assert len(ops) == 11
    assert [o.handles for o in ops] == [[]] * 10 + [["h"]]
    metas = [decode_metadata(o.metadata) for o in ops]
    assert {m.uuid for m in metas} == {"p-9"}
    assert [m.chunk_id for m in metas] == list(range(11))
    assert all(
        m.num_chunks_from_msg == 11 and m.total_chunk_msg_size == len(payload) for m in metas
    )
    r = ChunkReassembler()
    result = None
    for i, (o, m) in enumerate(zip(ops, metas, strict=True)):
        assert m.uuid is not None and m.num_chunks_from_msg and m.total_chunk_msg_size
        result, dropped = r.add(
            m.uuid,
            i,
            m.num_chunks_from_msg,
            m.total_chunk_msg_size,
            o.payload,
            MessageId(-1, 1, i),
            0,
        )
        assert dropped == []
    assert result is not None and result.payload == payload
    assert [c.entry_id() for c in result.chunk_ids] == list(range(11))


def test_small_message_is_not_chunked() -> None:
    [op] = build_sends(
        b"x" * 10, "h", producer_name="p", sequence_id=1, publish_time_ms=1, chunk_max_bytes=100
    )
    assert not op.is_chunk and decode_metadata(op.metadata).uuid is None


def test_reassembler_bounds_and_expiry() -> None:
    r = ChunkReassembler(max_pending_messages=2, expire_ms=100)
    ids = [MessageId(-1, 1, i) for i in range(10)]
    r.add("a", 0, 2, 10, b"12345", ids[0], 0)
    r.add("b", 0, 2, 10, b"12345", ids[1], 10)
    _, dropped = r.add("c", 0, 2, 10, b"12345", ids[2], 20)
    assert dropped == [ids[0]]  # oldest evicted
    _, dropped = r.add("b", 5, 2, 10, b"12345", ids[3], 30)  # out of order
    assert dropped == [ids[1], ids[3]]
    assert r.add("zz", 1, 2, 10, b"x", ids[4], 30) == (None, [ids[4]])
    assert r.expire(119) == []
    assert r.expire(120) == [ids[2]]
    assert len(r) == 0


# ------------------------------------------------------------------ routing


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == (-2147483648) & 0x7FFFFFFF
    assert java_string_hash("€") == 0x20AC


# Partitions (of 7) the official wheel 3.13 chose for these keys (its default BoostHash).
WHEEL_PARTITIONS_OF_7 = {
    "key-0": 3,
    "key-1": 2,
    "key-10": 5,
    "a": 4,
    "ab": 1,
    "abc": 4,
    "abcd": 5,
    "abcdefg": 3,
    "abcdefgh": 5,
    "abcdefghijklmnopq": 2,
    "héllo": 3,
}


def test_boost_hash_matches_the_official_wheel() -> None:
    for key, partition in WHEEL_PARTITIONS_OF_7.items():
        assert boost_hash(key) % 7 == partition, key
    assert 0 <= boost_hash("x" * 100) < 2**31


def test_router_modes() -> None:
    rr = PartitionRouter(switch_every=2, rng=random.Random(1))
    seq = [rr.choose(4, None) for _ in range(8)]
    assert seq[0] == seq[1] and seq[2] == seq[3] and len(set(seq)) == 4
    assert rr.choose(4, "key") == boost_hash("key") % 4
    j = PartitionRouter(hashing_scheme=HashingScheme.JavaStringHash)
    assert j.choose(4, "key") == java_string_hash("key") % 4
    m = PartitionRouter(hashing_scheme=HashingScheme.Murmur3_32Hash)
    assert m.choose(7, "key") == pulsar_hash_str("key") % 7
    single = PartitionRouter(PartitionsRoutingMode.UseSinglePartition, rng=random.Random(3))
    assert len({single.choose(5, None) for _ in range(20)}) == 1
    custom = PartitionRouter(PartitionsRoutingMode.CustomPartition, custom=lambda msg, n: n - 1)
    assert custom.choose(3, "k") == 2
    bad = PartitionRouter(PartitionsRoutingMode.CustomPartition, custom=lambda msg, n: n)
    with pytest.raises(ValueError):
        bad.choose(3, None)


def test_backoff_doubles_with_bounded_jitter_and_resets() -> None:
    b = Backoff(100, 1000, random.Random(5))
    delays = [b.next_ms() for _ in range(6)]
    for got, nominal in zip(delays, [100, 200, 400, 800, 1000, 1000], strict=True):
        assert nominal * 0.9 <= got <= nominal
    b.reset()
    assert 90 <= b.next_ms() <= 100
