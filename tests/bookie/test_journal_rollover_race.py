"""A checkpoint that ends while the journal's writer process is still to write the tail of
the previous journal file (a batch that spans a file rollover) removes that file under the
writer: the batch still completes, its records go to no other file, and the later file's
records replay."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import crc32c

from magnetar.bookie.journal import Journal, JournalPosition, RecordKind, release_files, replay
from magnetar.common.clock import SystemClock

RECORD_PAYLOAD = b"r" * 1000


def _append(j: Journal, entry: int) -> None:
    j.append(
        RecordKind.ADD_ENTRY, 7, entry, entry - 1, crc32c.crc32c(RECORD_PAYLOAD), RECORD_PAYLOAD
    )


async def _synced(j: Journal) -> asyncio.Future[BaseException | None]:
    outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    j.on_durable(lambda: outcome.set_result(None), outcome.set_result)
    return outcome


async def test_removing_a_journal_file_the_writer_still_writes_keeps_its_records_out_of_other_files(
    tmp_path: Path,
) -> None:
    journal_dir = tmp_path / "journal"
    j = Journal(
        journal_dir,
        clock=SystemClock(),
        file_size_max_bytes=16 * 1024,
        prealloc_bytes=16 * 1024,
    )
    j.start()
    writer: int | None = None
    try:
        _append(j, 0)
        assert await asyncio.wait_for(await _synced(j), 10) is None
        writer = j.writer_pid
        assert writer is not None
        os.kill(writer, signal.SIGSTOP)  # the next batch waits in the pipe
        # One batch: the end of file 1 and the start of file 2 (appended in one loop turn).
        for entry in range(1, 25):
            _append(j, entry)
        assert j.position.file_id == 2
        outcome = await _synced(j)
        # A checkpoint that began at the journal's end (in file 2) has just ended: file 1
        # is wholly before it and goes, while the writer has yet to write its tail.
        release_files(j.detach_before(j.position))
        other = tmp_path / "index.idx"
        other.write_bytes(b"")
        os.kill(writer, signal.SIGCONT)
        assert await asyncio.wait_for(outcome, 10) is None  # every record synced
        assert other.read_bytes() == b"", "journal records were written into another file"
    finally:
        if writer is not None:
            os.kill(writer, signal.SIGCONT)
        await j.close()
    # File 2's records replay, in order, up to the last.
    entries = [r.entry_id for r in replay(journal_dir, JournalPosition(2, 0))]
    assert entries and entries == list(range(entries[0], 25))
