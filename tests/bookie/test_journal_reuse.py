"""Journal file reuse: a checkpointed file kept as a spare becomes the next file, written
over in place; its old records never replay, in the file it becomes or after a crash at
any point of the hand-over; files written before records carried their file's id still
replay, and are never reused."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
from pathlib import Path

import crc32c

from magnetar.bookie.journal import (
    ADD_ENTRY,
    HEADER_SIZE,
    SPARE_FILES_MAX,
    Journal,
    JournalPosition,
    journal_file_ids,
    release_files,
    replay,
    spare_paths,
)
from magnetar.bookie.journal_writer import journal_path
from magnetar.common.clock import SystemClock

FILE_BYTES = 16 * 1024
PAYLOAD = b"p" * 1000


def _add(j: Journal, ledger: int, entry: int) -> None:
    j.append(ADD_ENTRY, ledger, entry, entry - 1, crc32c.crc32c(PAYLOAD), PAYLOAD)


async def _durable(j: Journal) -> None:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    j.on_durable(lambda: done.set_result(None), done.set_exception)
    await asyncio.wait_for(done, 10)


def _journal(directory: Path, *, reuse: bool = True) -> Journal:
    j = Journal(
        directory,
        clock=SystemClock(),
        file_size_max_bytes=FILE_BYTES,
        prealloc_bytes=FILE_BYTES,
        reuse_files=reuse,
    )
    j.start()
    return j


async def _fill_to_file(j: Journal, ledger: int, file_id: int) -> list[int]:
    """Append entries of ``ledger`` until the journal writes file ``file_id``; returns
    their ids (all durable)."""
    entries = []
    while j.position.file_id < file_id:
        _add(j, ledger, len(entries))
        entries.append(len(entries))
    await _durable(j)
    return entries


def _file(directory: Path, file_id: int) -> Path:
    return Path(journal_path(str(directory), file_id))


def _spare(directory: Path, file_id: int) -> Path:
    return Path(journal_path(str(directory), file_id) + ".spare")


def _replayed(directory: Path, start: JournalPosition) -> list[tuple[int, int]]:
    return [(r.ledger_id, r.entry_id) for r in replay(directory, start)]


async def test_a_checkpointed_file_is_written_over_as_the_next_one_and_only_its_new_records_replay(
    tmp_path: Path,
) -> None:
    j = _journal(tmp_path)
    try:
        first = await _fill_to_file(j, 1, 2)
        # A checkpoint in file 2: file 1 becomes the spare.
        detached = j.detach_before(j.position)
        assert detached.removals == []
        release_files(detached)
        (spare,) = spare_paths(tmp_path)
        inode, size = spare.stat().st_ino, spare.stat().st_size
        assert size >= FILE_BYTES - len(PAYLOAD) - 64
        entries = await _fill_to_file(j, 2, 3)
        _add(j, 3, 0)
        await _durable(j)
    finally:
        await j.close()
    third = Path(journal_path(str(tmp_path), 3))
    assert spare_paths(tmp_path) == []
    assert (third.stat().st_ino, third.stat().st_size) == (inode, size), "file 3 is the spare"
    # File 3 holds its two records (the last of ledger 2's run rolled into it), then file
    # 1's old ones: those do not replay.
    assert _replayed(tmp_path, JournalPosition(3, 0)) == [(2, entries[-1]), (3, 0)]
    # Small requests get zeros ahead of them over the old records, as at a new file's end
    # (pages just written, so a partial page is never read from the disk first).
    data = third.read_bytes()
    end = 2 * (HEADER_SIZE + len(PAYLOAD))
    assert data[end : end + 4096] == bytes(4096)
    replayed = _replayed(tmp_path, JournalPosition(2, 0))
    assert replayed == [(1, first[-1])] + [(2, e) for e in entries] + [(3, 0)]


async def test_a_spare_renamed_into_place_before_any_record_reaches_it_replays_as_empty(
    tmp_path: Path,
) -> None:
    """A crash between the writer's rename and its first write: the file holds only records
    of another file."""
    j = _journal(tmp_path)
    try:
        await _fill_to_file(j, 1, 2)
    finally:
        await j.close()
    first = Path(journal_path(str(tmp_path), 1))
    assert len(_replayed(tmp_path, JournalPosition(1, 0))) > 10
    in_second = _replayed(tmp_path, JournalPosition(2, 0))
    assert in_second
    first.rename(journal_path(str(tmp_path), 3))
    assert _replayed(tmp_path, JournalPosition(0, 0)) == in_second
    assert _replayed(tmp_path, JournalPosition(3, 0)) == []


def _legacy_record(ledger: int, entry: int, payload: bytes) -> bytes:
    """A record as journals wrote them before ``hcrc`` covered the file's id."""
    crc = crc32c.crc32c(payload)
    fields = struct.pack("<BQqqI", ADD_ENTRY, ledger, entry, entry - 1, crc)
    return struct.pack("<II", len(payload), crc32c.crc32c(fields)) + fields + payload


async def test_files_of_the_earlier_format_replay_and_are_deleted_not_reused(
    tmp_path: Path,
) -> None:
    old = b"".join(_legacy_record(9, e, PAYLOAD) for e in range(5)) + bytes(4096)
    Path(journal_path(str(tmp_path), 1)).write_bytes(old)
    assert _replayed(tmp_path, JournalPosition(0, 0)) == [(9, e) for e in range(5)]
    j = _journal(tmp_path)  # starts at file 2: never appends to an existing file
    try:
        await _fill_to_file(j, 1, 3)
        detached = j.detach_before(j.position)
        assert detached.removals == [_file(tmp_path, 1)], "file 1 is not this journal's"
        release_files(detached)
        assert spare_paths(tmp_path) == [_spare(tmp_path, 2)]
    finally:
        await j.close()
    assert journal_file_ids(tmp_path) == [3]


async def test_spares_past_the_one_kept_and_all_without_reuse_are_handed_back_to_delete(
    tmp_path: Path,
) -> None:
    j = _journal(tmp_path)
    try:
        await _fill_to_file(j, 1, 4)
        detached = j.detach_before(j.position)  # files 1..3: one becomes a spare, the newest
        assert SPARE_FILES_MAX == 1
        assert detached.removals == [_file(tmp_path, 1), _file(tmp_path, 2)]
        assert detached.spares == [(_file(tmp_path, 3), _spare(tmp_path, 3))]
        release_files(detached)
        assert spare_paths(tmp_path) == [_spare(tmp_path, 3)]
    finally:
        await j.close()
    # A restart without reuse: the writer still takes the spare left (for file 4), and no
    # file is kept.
    j = _journal(tmp_path, reuse=False)
    try:
        await _fill_to_file(j, 2, 6)
        assert spare_paths(tmp_path) == []
        detached = j.detach_before(j.position)
        assert (detached.removals, detached.spares) == (
            [_file(tmp_path, 4), _file(tmp_path, 5)],
            [],
        )
        release_files(detached)
    finally:
        await j.close()
    assert (journal_file_ids(tmp_path), spare_paths(tmp_path)) == ([6], [])


async def test_a_file_made_spare_while_the_writer_still_owes_its_tail_keeps_those_records_out(
    tmp_path: Path,
) -> None:
    """A batch spans a rollover and a checkpoint in the new file ends before the writer
    wrote the batch: the old file becomes a spare under the writer. The writer writes the
    old file's tail (into that file, or a spare it takes back), then the new file; the new
    file's records replay and nothing of the old file's does in it."""
    j = _journal(tmp_path)
    writer: int | None = None
    try:
        await _fill_to_file(j, 1, 2)
        release_files(j.detach_before(j.position))  # file 1: the spare
        _add(j, 2, 0)
        await _durable(j)
        writer = j.writer_pid
        assert writer is not None
        os.kill(writer, signal.SIGSTOP)  # the next batch waits in the pipe
        entry = 1
        while j.position.file_id < 3:  # the end of file 2 and the start of file 3
            _add(j, 2, entry)
            entry += 1
        durable = asyncio.ensure_future(_durable(j))
        release_files(j.detach_before(j.position))  # file 2 becomes a spare; file 1's goes
        os.kill(writer, signal.SIGCONT)
        await durable
    finally:
        if writer is not None:
            os.kill(writer, signal.SIGCONT)
        await j.close()
    replayed = _replayed(tmp_path, JournalPosition(3, 0))
    assert replayed and replayed == [(2, e) for e in range(replayed[0][1], entry)]
