"""A read's SENDs taken a slice per loop turn (magnetar.broker.read_slices): the cutting, the
backlog's order, and a broker that answers a sliced read exactly as a whole one."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker import connection as connection_module
from magnetar.broker.read_slices import (
    SLICE_SENDS,
    TURN_READ_BYTES,
    ReadBacklog,
    plan_read,
    producer_runs,
    send_slices,
)
from magnetar.broker.topic import Topic
from magnetar.protocol import (
    CloseProducer,
    MessageMetadata,
    SendReceipt,
    Success,
    encode,
    encode_send,
)
from magnetar.protocol.frame import SendRun

from .test_service_connection import AsyncRawClient, new_topic, producer_cmd, running_broker


def fake_run(producer_id: int, n: int, first: int = 0) -> SendRun:
    fields = ((producer_id, first + i, 1, None, None, None, False, None) for i in range(n))
    return [(f, None) for f in fields]  # type: ignore[misc]


def ids(run: SendRun) -> list[tuple[int, int]]:
    return [(f[0], f[1]) for f, _ in run]


@given(st.lists(st.integers(1, 40), max_size=12), st.integers(1, 16))
def test_slices_keep_order_bound_size_and_split_only_long_runs(
    lengths: list[int], size: int
) -> None:
    runs = [fake_run(pid, n) for pid, n in enumerate(lengths)]
    slices = send_slices(runs, size)
    flat = [ids(piece) for s in slices for piece in s]
    assert [x for piece in flat for x in piece] == [x for r in runs for x in ids(r)]
    assert all(0 < sum(map(len, s)) <= size for s in slices)
    whole = {tuple(ids(r)) for r in runs if len(r) <= size}
    pieces = [tuple(p) for p in flat]
    assert whole <= set(pieces), "a run that fits a slice was split"
    # packed: a slice is closed only when the next piece would not fit it
    for a, b in itertools.pairwise(slices):
        assert sum(map(len, a)) + len(b[0]) > size


def test_slices_of_one_long_run_and_of_many_short_ones() -> None:
    assert [[len(p) for p in s] for s in send_slices([fake_run(1, 300)], 128)] == [
        [128],
        [128],
        [44],
    ]
    runs = [fake_run(pid, 5) for pid in range(100)]
    assert [len(s) for s in send_slices(runs, 128)] == [25, 25, 25, 25]
    with pytest.raises(ValueError):
        send_slices(runs, 0)


def test_producer_runs_cut_where_the_producer_changes() -> None:
    sends = fake_run(1, 2) + fake_run(2, 1) + fake_run(1, 3, 2)
    assert [ids(r) for r in producer_runs(sends)] == [
        [(1, 0), (1, 1)],
        [(2, 0)],
        [(1, 2), (1, 3), (1, 4)],
    ]
    assert producer_runs([]) == []


class _OnTopic:
    def __init__(self, topic: str) -> None:
        self.topic = topic


def producers_on(topics: dict[int, str]) -> Any:
    """``producer_of`` for producer ids on the given topics; an unknown id raises."""

    def producer_of(pid: int) -> _OnTopic:
        if pid not in topics:
            raise LookupError(f"unknown producer {pid}")
        return _OnTopic(topics[pid])

    return producer_of


def test_a_read_is_planned_whole_unless_one_producer_has_more_than_a_slice() -> None:
    on = producers_on({1: "a", 2: "b", 3: "a"})
    short = fake_run(1, 2) + fake_run(2, 1) + fake_run(3, 1) + fake_run(1, 1, 2)
    now, later = plan_read(short, on)
    assert [ids(r) for r in now] == [[(1, 0), (1, 1)], [(3, 0)], [(1, 2)], [(2, 0)]]
    assert later == []
    many = [s for pid in range(1, 4) for s in fake_run(pid, SLICE_SENDS // 2)]
    now, later = plan_read(many, on)  # longer than a slice, every producer's run short
    assert sum(map(len, now)) == len(many) and later == []
    long = fake_run(2, 1) + fake_run(1, SLICE_SENDS + 5)
    now, later = plan_read(long, on)
    assert [ids(r) for r in now] == [[(2, 0)]]  # topic b came first; a's run is cut
    assert [[len(r) for r in s] for s in later] == [[SLICE_SENDS], [5]]
    with pytest.raises(LookupError):
        plan_read(fake_run(1, 1) + fake_run(9, 1), on)


def test_backlog_runs_a_turn_and_puts_what_an_item_queues_before_the_rest() -> None:
    backlog = ReadBacklog()
    done: list[str] = []

    def note(name: str) -> bool:
        done.append(name)
        return name.startswith("slice")

    def expand(name: str) -> bool:  # like a deferred read that decodes more frames
        done.append(name)
        backlog.append(note, f"{name}.frame")
        backlog.append(note, f"slice-of-{name}")
        backlog.append(note, f"{name}.after")
        return False

    backlog.append(note, "a")
    backlog.append(expand, "read2")
    backlog.append(note, "read3")
    backlog.run_turn()
    assert done == ["a", "read2", "read2.frame", "slice-of-read2"]
    backlog.run_turn()
    assert done[4:] == ["read2.after", "read3"]
    assert not backlog and len(backlog) == 0


def test_backlog_keeps_the_items_after_a_failing_one() -> None:
    backlog = ReadBacklog()

    def fail(_: object) -> bool:
        raise RuntimeError("boom")

    backlog.append(fail, None)
    backlog.append(lambda _: True, None)
    with pytest.raises(RuntimeError):
        backlog.run_turn()
    assert len(backlog) == 1


def count_appends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every run appended to a topic from now on, in order."""
    appends: list[int] = []
    publish_run = Topic.publish_run

    def counting(topic: Topic, datas: list[bytes], *args: Any) -> Any:
        appends.append(len(datas))
        return publish_run(topic, datas, *args)

    monkeypatch.setattr(Topic, "publish_run", counting)
    return appends


def raw_frames(*commands: Any) -> list[bytes]:
    return [encode(c) for c in commands]


def sends(producer_id: int, name: str, seqs: range) -> list[bytes]:
    frames: list[bytes] = []
    for seq in seqs:
        md = MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
        frames.extend(encode_send(producer_id, seq, md, b"m-%d" % seq))
    return frames


async def test_a_long_read_is_appended_in_slices_and_a_close_after_it_waits_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One read: 300 SENDs of one producer, then CLOSE_PRODUCER. The SENDs go to the topic
    in slices of SLICE_SENDS, every one is receipted in order, and the close is answered
    after the last receipt (taken in stream order, not ahead of the deferred slices)."""
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        await raw.request(producer_cmd(raw, new_topic(), 1, producer_name="p"))
        appends = count_appends(monkeypatch)
        close = CloseProducer(producer_id=1, request_id=raw.next_id())
        raw.writer.write(b"".join([*sends(1, "p", range(300)), *raw_frames(close)]))
        answers = []
        while len(answers) < 301:
            frame = await raw.wait_for(
                lambda f: isinstance(f.command, SendReceipt | Success), timeout_s=15
            )
            answers.append(frame.command)
        assert [a.sequence_id for a in answers[:300]] == list(range(300))  # type: ignore[attr-defined]
        assert isinstance(answers[300], Success)
        assert answers[300].request_id == close.request_id
        assert appends == [SLICE_SENDS, SLICE_SENDS, 300 - 2 * SLICE_SENDS]
        entry_ids = [a.message_id.entry_id for a in answers[:300]]  # type: ignore[attr-defined]
        assert entry_ids == sorted(entry_ids) and len(set(entry_ids)) == 300


def count_backlogs(monkeypatch: pytest.MonkeyPatch) -> list[ReadBacklog]:
    """Every backlog a connection starts (a read deferred in slices) from now on."""
    started: list[ReadBacklog] = []

    class Counted(ReadBacklog):
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    monkeypatch.setattr(connection_module, "ReadBacklog", Counted)
    return started


async def round_robin_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, producers: int, each: int
) -> tuple[list[int], dict[int, list[int]]]:
    """``producers`` producers on new topics, then one write of ``each`` SENDs per producer,
    round-robin: the size of every append it made, and each producer's receipted sequence
    ids in the order they came."""
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        for pid in range(producers):
            await raw.request(producer_cmd(raw, new_topic(), pid, producer_name=f"p{pid}"))
        appends = count_appends(monkeypatch)
        frames: list[bytes] = []
        for seq in range(each):
            for pid in range(producers):
                frames.extend(sends(pid, f"p{pid}", range(seq, seq + 1)))
        raw.writer.write(b"".join(frames))
        receipts: dict[int, list[int]] = {pid: [] for pid in range(producers)}
        for _ in range(producers * each):
            frame = await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))
            receipt = frame.command
            assert isinstance(receipt, SendReceipt)
            receipts[receipt.producer_id].append(receipt.sequence_id)
        return appends, receipts


async def test_a_read_over_many_topics_is_taken_whole_with_one_append_per_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 SENDs spread round-robin over 30 producers (10 each): no producer has more
    than a slice, so the read is taken in one turn (nothing deferred), each topic gets
    its 10 as one append, and each producer's receipts come in order."""
    backlogs = count_backlogs(monkeypatch)
    appends, receipts = await round_robin_read(tmp_path, monkeypatch, producers=30, each=10)
    assert appends == [10] * 30
    assert backlogs == []
    assert receipts == {pid: list(range(10)) for pid in range(30)}


async def test_a_read_where_one_of_many_producers_has_a_long_run_is_sliced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two producers, 150 SENDs each, interleaved in one read: each has more than a slice,
    so the read is deferred in slices; each topic gets its SENDs in order, in appends of
    at most SLICE_SENDS, and every one is receipted."""
    backlogs = count_backlogs(monkeypatch)
    appends, receipts = await round_robin_read(tmp_path, monkeypatch, producers=2, each=150)
    assert len(backlogs) == 1
    assert sum(appends) == 300 and max(appends) <= SLICE_SENDS
    assert receipts == {pid: list(range(150)) for pid in range(2)}


async def test_an_unknown_producer_in_a_deferred_read_closes_the_connection(
    tmp_path: Path,
) -> None:
    """A sliced read, then (same write) a SEND for a producer the connection does not have:
    found when the backlog reaches it, the connection is closed, and the broker serves on."""
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        await raw.request(producer_cmd(raw, new_topic(), 1, producer_name="p"))
        close = CloseProducer(producer_id=1, request_id=raw.next_id())
        frames = [*sends(1, "p", range(200)), *raw_frames(close), *sends(9, "x", range(1))]
        raw.writer.write(b"".join(frames))
        assert await raw.closed_by_broker()
        again = await AsyncRawClient.open(broker.port)
        await again.request(producer_cmd(again, new_topic(), 1, producer_name="q"))
        await again.close()


async def test_garbage_after_a_sliced_read_closes_only_that_connection(tmp_path: Path) -> None:
    """300 SENDs, then bytes that are no frame, in one write: the connection is closed (the
    slices not yet taken are dropped with it) and the broker serves on."""
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        await raw.request(producer_cmd(raw, new_topic(), 1, producer_name="p"))
        garbage = b"\xff\xff\xff\xff" + b"\x00" * 64
        raw.writer.write(b"".join([*sends(1, "p", range(300)), garbage]))
        assert await raw.closed_by_broker()
        again = await AsyncRawClient.open(broker.port)
        await again.request(producer_cmd(again, new_topic(), 1, producer_name="q"))
        await again.close()


async def test_reading_stops_for_two_loop_turns_after_a_mebibyte(tmp_path: Path) -> None:
    """uvloop reads a socket up to 32 times per readiness event: a window of big SENDs was
    decoded in one turn, before the bookie got any of it. Two reads that together pass
    TURN_READ_BYTES, handed in as uvloop hands them (one after the other, no turn
    between), stop reading for two loop turns; then the connection reads on, and every
    SEND is receipted."""
    async with running_broker(tmp_path) as broker:
        raw = await AsyncRawClient.open(broker.port)
        await raw.request(producer_cmd(raw, new_topic(), 1, producer_name="p"))
        (conn,) = broker._connections
        assert conn.transport is not None
        frames: list[bytes] = []
        count = TURN_READ_BYTES // 100_000 + 2
        for seq in range(count):
            md = MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
            frames.extend(encode_send(1, seq, md, bytes(100_000)))
        data = b"".join(frames)
        half = len(data) // 2
        conn.data_received(data[:half])
        assert conn.transport.is_reading()  # less than TURN_READ_BYTES so far
        conn.data_received(data[half:])
        assert not conn.transport.is_reading()
        await asyncio.sleep(0)  # the first turn: the SENDs go to the bookie
        assert not conn.transport.is_reading()
        await asyncio.sleep(0)  # the second: the journal's flusher starts the sync
        assert conn.transport.is_reading()
        for seq in range(count):
            frame = await raw.wait_for(lambda f: isinstance(f.command, SendReceipt))
            assert frame.command.sequence_id == seq  # type: ignore[attr-defined]
