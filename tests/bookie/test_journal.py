"""The journal: durability callbacks, group commit, replay, torn tails, rolling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import crc32c

from magnetar.bookie.journal import (
    ADD_ENTRY,
    FENCE,
    Journal,
    JournalPosition,
    journal_file_ids,
    replay,
)
from magnetar.common.clock import SystemClock


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
    # A flipped byte inside a record's payload also ends the file's replay there.
    corrupt = bytearray(data)
    corrupt[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(corrupt))
    assert 0 < len(list(replay(tmp_path, JournalPosition(0, 0)))) < 10


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
    assert path.stat().st_size == 64 * 1024 > end
    assert path.read_bytes()[end:] == bytes(64 * 1024 - end)
    for i in range(300, 600):  # past the first chunk: the file grows by another
        _add(j, 4, i, b"z" * 120)
    await j.close()
    assert path.stat().st_size == 128 * 1024
    # A restart writes a new file; replay reads both up to their zeros.
    j2 = Journal(tmp_path, clock=SystemClock(), prealloc_bytes=64 * 1024)
    j2.start()
    _add(j2, 5, 0, b"after restart")
    await j2.close()
    records = list(replay(tmp_path, JournalPosition(0, 0)))
    assert [(r.ledger_id, r.entry_id) for r in records] == [(4, i) for i in range(600)] + [(5, 0)]
