"""The journal: durability callbacks, group commit, replay, torn tails, rolling."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import crc32c
import pytest

from magnetar.bookie.errors import JournalCorrupt
from magnetar.bookie.journal import (
    ADD_ENTRY,
    FENCE,
    HEADER_SIZE,
    Journal,
    JournalPosition,
    RecordKind,
    ReplayStats,
    encode_record,
    journal_file_ids,
    replay,
)
from magnetar.common.clock import ManualClock, SystemClock
from magnetar.testing import wait_until_async


def _add(j: Journal, ledger: int, entry: int, payload: bytes) -> None:
    j.append(ADD_ENTRY, ledger, entry, entry - 1, crc32c.crc32c(payload), payload)


async def test_callbacks_after_sync_and_group_commit(tmp_path: Path) -> None:
    j = Journal(tmp_path, clock=SystemClock())
    j.start()
    done = asyncio.Event()
    seen: list[int] = []
    for i in range(2000):
        _add(j, 1, i, b"x" * 100)
        if i % 100 == 99:
            j.on_durable(lambda i=i: seen.append(i))
    j.on_durable(done.set)
    await asyncio.wait_for(done.wait(), 10)
    assert seen == list(range(99, 2000, 100))
    # Group commit: far fewer syncs than appends.
    assert 1 <= j.syncs < 50
    await j.close()
    records = list(replay(tmp_path, JournalPosition(0, 0)))
    assert [(r.ledger_id, r.entry_id) for r in records] == [(1, i) for i in range(2000)]
    assert all(r.payload == b"x" * 100 for r in records)


async def test_small_and_big_batches_alike_replay_as_appended(tmp_path: Path) -> None:
    """Batches go to the writer process as one joined buffer when small and as their
    records' own buffers when big; both, across file rollovers, replay byte for byte."""
    j = Journal(tmp_path, clock=SystemClock(), file_size_max_bytes=2 * 1024 * 1024)
    j.start()
    payloads = [bytes([i % 251]) * (300 if i % 7 else 700_000) for i in range(40)]
    for round_ in range(2):
        for i, payload in enumerate(payloads):
            _add(j, 4 + round_, i, payload)
        done = asyncio.Event()
        j.on_durable(done.set)
        await asyncio.wait_for(done.wait(), 30)
        for i in range(200):  # then many small batches, each synced before the next
            _add(j, 6 + round_, i, b"s%d" % i)
            if i % 20 == 19:
                synced = asyncio.Event()
                j.on_durable(synced.set)
                await asyncio.wait_for(synced.wait(), 30)
    done = asyncio.Event()
    j.on_durable(done.set)
    await asyncio.wait_for(done.wait(), 30)
    await j.close()
    assert len(journal_file_ids(tmp_path)) > 3
    records = [
        (r.ledger_id, r.entry_id, r.payload) for r in replay(tmp_path, JournalPosition(0, 0))
    ]
    expected = []
    for round_ in range(2):
        expected += [(4 + round_, i, p) for i, p in enumerate(payloads)]
        expected += [(6 + round_, i, b"s%d" % i) for i in range(200)]
    assert records == expected


async def test_torn_tail_ends_replay(tmp_path: Path) -> None:
    j = Journal(tmp_path, clock=SystemClock())
    j.start()
    for i in range(10):
        _add(j, 2, i, bytes([i]) * 50)
    j.append(FENCE, 2, -1, -1, 0, b"")
    end = j.position.offset
    await j.close()
    path = next(tmp_path.glob("*.jnl"))
    data = path.read_bytes()[:end]  # the records, without the zero-filled rest
    path.write_bytes(data[:-7] + b"\x00" * 3)  # torn: the last record cut short
    records = list(replay(tmp_path, JournalPosition(0, 0)))
    assert [r.entry_id for r in records] == list(range(10))
    # Garbage after the last intact record (a write cut short), then zeros: also the end.
    path.write_bytes(data[:-7] + b"\xab" * 5 + bytes(4096))
    assert [r.entry_id for r in replay(tmp_path, JournalPosition(0, 0))] == list(range(10))


async def test_files_roll_and_are_removed_before_a_checkpoint(tmp_path: Path) -> None:
    j = Journal(tmp_path, clock=SystemClock(), file_size_max_bytes=10_000)
    j.start()
    done = asyncio.Event()
    for i in range(100):
        _add(j, 3, i, b"y" * 1000)
    j.on_durable(done.set)
    await asyncio.wait_for(done.wait(), 10)
    ids = journal_file_ids(tmp_path)
    assert len(ids) >= 10
    pos = j.position
    assert j.remove_before(pos) == len(ids) - 1
    await j.close()
    assert journal_file_ids(tmp_path) == [pos.file_id]


async def test_files_are_zero_filled_ahead_and_replay_stops_at_the_zeros(tmp_path: Path) -> None:
    j = Journal(tmp_path, clock=SystemClock(), prealloc_bytes=64 * 1024)
    j.start()
    done = asyncio.Event()
    for i in range(300):  # ~45 KiB of records: one zero-filled chunk
        _add(j, 4, i, b"z" * 120)
    j.on_durable(done.set)
    await asyncio.wait_for(done.wait(), 10)
    end = j.position.offset
    path = next(tmp_path.glob("*.jnl"))
    assert path.stat().st_size >= 64 * 1024 > end
    # Between requests the writer fills on until 64 KiB past the last record are zeros.
    await wait_until_async(
        lambda: path.stat().st_size >= end + 64 * 1024,
        timeout_s=10,
        what="the file zero-filled 64 KiB past its last record",
    )
    size = path.stat().st_size
    assert path.read_bytes()[end:] == bytes(size - end)
    for i in range(300, 1000):  # ~150 KiB in all, past what was filled: the file grows
        _add(j, 4, i, b"z" * 120)
    await j.close()
    assert path.stat().st_size > size
    # A restart writes a new file; replay reads both up to their zeros.
    j2 = Journal(tmp_path, clock=SystemClock(), prealloc_bytes=64 * 1024)
    j2.start()
    _add(j2, 5, 0, b"after restart")
    await j2.close()
    records = list(replay(tmp_path, JournalPosition(0, 0)))
    assert [(r.ledger_id, r.entry_id) for r in records] == [(4, i) for i in range(1000)] + [(5, 0)]


def _records(*payloads: bytes, ledger: int = 7, file_id: int = 1) -> list[bytes]:
    """Encoded ADD_ENTRY records of journal file ``file_id``, one per payload (entry ids 0,
    1, ...)."""
    return [
        encode_record(file_id, RecordKind.ADD_ENTRY, ledger, i, i - 1, crc32c.crc32c(p), len(p)) + p
        for i, p in enumerate(payloads)
    ]


def _write_journal(directory: Path, data: bytes, file_id: int = 1) -> Path:
    path = directory / f"{file_id:020d}.jnl"
    path.write_bytes(data)
    return path


def test_replay_reads_a_zero_filled_end_as_the_end(tmp_path: Path) -> None:
    recs = _records(b"a" * 100, b"b" * 100, b"c" * 100)
    _write_journal(tmp_path, b"".join(recs) + bytes(64 * 1024))
    stats = ReplayStats()
    got = list(replay(tmp_path, JournalPosition(0, 0), stats=stats))
    assert [(r.type, r.entry_id, r.payload) for r in got] == [
        (RecordKind.ADD_ENTRY, 0, b"a" * 100),
        (RecordKind.ADD_ENTRY, 1, b"b" * 100),
        (RecordKind.ADD_ENTRY, 2, b"c" * 100),
    ]
    assert (stats.records, stats.corrupt_spans) == (3, 0)


def test_replay_refuses_a_damaged_record_followed_by_valid_ones(tmp_path: Path) -> None:
    """Issue 13.4: before, replay silently dropped the rest of the file at the bad record."""
    recs = _records(b"a" * 100, b"b" * 100, b"c" * 100, b"d" * 100)
    damaged = bytearray(recs[1])
    damaged[HEADER_SIZE + 10] ^= 0xFF  # a payload byte: the entry's checksum fails
    path = _write_journal(tmp_path, recs[0] + bytes(damaged) + recs[2] + recs[3] + bytes(4096))
    with pytest.raises(JournalCorrupt) as err:
        list(replay(tmp_path, JournalPosition(0, 0)))
    msg = str(err.value)
    assert f"{path} has a damaged record at offset {len(recs[0])}" in msg
    assert f"the next at offset {len(recs[0]) + len(recs[1])}" in msg
    assert "--journal-skip-invalid-records" in msg


def test_replay_skips_damaged_records_when_told_and_counts_them(tmp_path: Path) -> None:
    recs = _records(b"a" * 100, b"b" * 100, b"c" * 100, b"d" * 100)
    header_hit = bytearray(recs[1])
    header_hit[12] ^= 0x01  # the header's own checksum fails
    _write_journal(tmp_path, recs[0] + bytes(header_hit) + recs[2] + bytes(300) + recs[3])
    stats = ReplayStats()
    got = list(replay(tmp_path, JournalPosition(0, 0), skip_invalid=True, stats=stats))
    assert [r.entry_id for r in got] == [0, 2, 3]
    assert stats.corrupt_spans == 2  # the damaged record; the zeroed run between 2 and 3
    assert stats.corrupt_bytes == len(recs[1]) + 300


def test_replay_treats_an_unknown_record_kind_as_damage(tmp_path: Path) -> None:
    recs = _records(b"a" * 10, b"b" * 10)
    bad = encode_record(1, 9, 7, 5, 4, 0, 0)  # intact checksums, but no such kind
    _write_journal(tmp_path, recs[0] + bad + recs[1])
    with pytest.raises(JournalCorrupt):
        list(replay(tmp_path, JournalPosition(0, 0)))


async def test_runs_are_journaled_as_the_same_records_appended_one_at_a_time(
    tmp_path: Path,
) -> None:
    """``append_many`` writes the bytes ``append`` writes for each of its entries, whether
    the run stays in one file (C loops) or rolls to the next one mid-run; so does
    ``append_records`` (runs of many ledgers at once) given the same records."""
    journals = {
        name: Journal(tmp_path / name, clock=SystemClock(), file_size_max_bytes=256 * 1024)
        for name in ("runs", "ones", "records")
    }
    for j in journals.values():
        j.start()
    entry = 0
    for round_ in range(300):
        n = (1, 2, 25, 90)[round_ % 4]
        payloads = [bytes([(entry + i) % 251]) * (1 + (entry + i) * 37 % 3000) for i in range(n)]
        if round_ % 10 == 3:
            payloads[0] = b""  # an empty payload: a record without payload bytes
        checksums = [crc32c.crc32c(p) for p in payloads]
        journals["runs"].append_many(ADD_ENTRY, 3, entry, entry - 1, checksums, payloads)
        for i in range(n):
            journals["ones"].append(ADD_ENTRY, 3, entry + i, entry - 1, checksums[i], payloads[i])
        journals["records"].append_records(
            ADD_ENTRY, [3] * n, list(range(entry, entry + n)), [entry - 1] * n, checksums, payloads
        )
        entry += n
    for j in journals.values():
        done = asyncio.Event()
        j.on_durable(done.set)
        await asyncio.wait_for(done.wait(), 30)
        await j.close()
    ids = journal_file_ids(tmp_path / "runs")
    assert ids == journal_file_ids(tmp_path / "ones") and len(ids) > 3
    runs = [(r.entry_id, r.last_add_confirmed, r.checksum, r.payload)
            for r in replay(tmp_path / "runs", JournalPosition(0, 0))]  # fmt: skip
    ones = [(r.entry_id, r.last_add_confirmed, r.checksum, r.payload)
            for r in replay(tmp_path / "ones", JournalPosition(0, 0))]  # fmt: skip
    assert runs == ones and len(runs) == entry
    # file by file the same records (the zero-filled tails ahead of them may differ)
    files = {name: sorted((tmp_path / name).iterdir()) for name in journals}
    for other in ("runs", "records"):
        for a, b in zip(files[other], files["ones"], strict=True):
            assert a.name == b.name
            assert a.read_bytes().rstrip(b"\0") == b.read_bytes().rstrip(b"\0")


async def test_a_loaded_journal_is_paced_and_a_light_one_syncs_at_once(tmp_path: Path) -> None:
    # Each sync takes half of group_wait_ms on a manual clock: a journal with few records
    # pending when a sync comes back starts the next one at once, one with 128 or more
    # waits until group_wait_ms after the previous start. The records are appended while
    # the writer process is stopped, so they are pending when its sync comes back; the
    # sync's callback runs after the decision and sees whether the next one was taken.
    clock = ManualClock()
    j = Journal(tmp_path, clock=clock, group_wait_ms=1)
    j.start()
    warm = asyncio.Event()
    _add(j, 1, 0, b"w")
    j.on_durable(warm.set)
    await asyncio.wait_for(warm.wait(), 10)
    writer = j.writer_pid
    assert writer is not None
    taken_then: list[int] = []
    entry = 1

    async def sync_with_pending(records: int) -> asyncio.Event:
        nonlocal entry
        taken = j.groups_taken
        os.kill(writer, signal.SIGSTOP)
        try:
            _add(j, 1, entry, b"a")
            j.on_durable(lambda: taken_then.append(j.groups_taken))
            await wait_until_async(lambda: j.groups_taken == taken + 1, 10, what="a sync")
            for i in range(entry + 1, entry + 1 + records):
                _add(j, 1, i, b"b")
            entry += 1 + records
            done = asyncio.Event()
            j.on_durable(done.set)
            clock.advance(0.0005)
        finally:
            os.kill(writer, signal.SIGCONT)
        await wait_until_async(lambda: len(taken_then) == 1, 10, what="the sync's callback")
        return done

    light = await sync_with_pending(1)
    assert taken_then.pop() == 3  # the warm-up's, this one's, and the next at once
    await asyncio.wait_for(light.wait(), 10)

    loaded = await sync_with_pending(200)
    assert taken_then.pop() == 4  # the next one waits for the clock
    await wait_until_async(lambda: clock.sleepers == 1, 10, what="the flusher to pace")
    assert not loaded.is_set()
    clock.advance(0.0005)
    await asyncio.wait_for(loaded.wait(), 10)
    await j.close()
    records = list(replay(tmp_path, JournalPosition(0, 0)))
    assert [r.entry_id for r in records] == list(range(entry))


async def test_a_raising_callback_is_logged_and_the_journal_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A defect in a caller's callback must not stop the syncs: the sync's other callbacks
    # still run, later records are still synced, and the error is logged.
    j = Journal(tmp_path, clock=SystemClock())
    j.start()
    seen: list[str] = []

    def broken() -> None:
        raise RuntimeError("a caller's bug")

    _add(j, 1, 0, b"a")
    j.on_durable(broken)
    j.on_durable(lambda: seen.append("same sync"))
    await wait_until_async(lambda: seen == ["same sync"], 10, what="the sync's other callback")
    later = asyncio.Event()
    _add(j, 1, 1, b"b")
    j.on_durable(later.set)
    await asyncio.wait_for(later.wait(), 10)
    await j.close()
    assert [r.entry_id for r in replay(tmp_path, JournalPosition(0, 0))] == [0, 1]
    assert any(
        "callback after a sync raised" in r.getMessage() and r.exc_info for r in caplog.records
    )
