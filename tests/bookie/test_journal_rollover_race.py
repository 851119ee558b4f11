"""A checkpoint that ends while the journal's writer thread is still writing the tail of the
previous journal file (a batch that spans a file rollover) removes that file, but must not
close the writer's descriptor under it: the number could be reused by a file the storage
thread opens next (an entry log, the index, ``checkpoint.tmp``), and the journal's records
would be written into that file."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import crc32c
import pytest

from magnetar.bookie import journal as journal_module
from magnetar.bookie.journal import Journal, JournalPosition, RecordKind, replay, unlink_all
from magnetar.common.clock import SystemClock

RECORD_PAYLOAD = b"r" * 1000


async def test_removing_a_journal_file_the_writer_still_writes_keeps_its_records_out_of_other_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_dir = tmp_path / "journal"
    writing_first_file = threading.Event()
    release = threading.Event()
    original: Callable[..., None] = journal_module.pwritev_all

    def pausing_pwritev(fd: int, bufs: Sequence[bytes], offset: int, **kw: Any) -> None:
        # The writer thread, about to write the first file's records: let the test act.
        if os.readlink(f"/proc/self/fd/{fd}").endswith("00000000000000000001.jnl"):
            writing_first_file.set()
            assert release.wait(10)
        original(fd, bufs, offset, **kw)

    monkeypatch.setattr(journal_module, "pwritev_all", pausing_pwritev)
    j = Journal(
        journal_dir,
        clock=SystemClock(),
        file_size_max_bytes=16 * 1024,
        prealloc_bytes=16 * 1024,
    )
    j.start()
    try:
        # One batch: the end of file 1 and the start of file 2 (appended in one loop turn).
        for entry in range(25):
            j.append(
                RecordKind.ADD_ENTRY, 7, entry, entry - 1, crc32c.crc32c(RECORD_PAYLOAD),
                RECORD_PAYLOAD,
            )  # fmt: skip
        assert j.position.file_id == 2
        outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        j.on_durable(lambda: outcome.set_result(None), outcome.set_result)
        await asyncio.to_thread(writing_first_file.wait, 10)
        # A checkpoint that began at the journal's end (in file 2) has just ended: file 1
        # is wholly before it and goes, while the writer is still on it.
        unlink_all(j.detach_before(j.position))
        # The storage thread opens a file next (the smallest free descriptor number).
        other = tmp_path / "index.idx"
        fd = os.open(other, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            release.set()
            assert await asyncio.wait_for(outcome, 10) is None  # every record synced
        finally:
            os.close(fd)
        assert other.read_bytes() == b"", "journal records were written into another file"
    finally:
        release.set()
        await j.close()
    # File 2's records replay; file 1 was removed (its records were checkpointed).
    entries = [r.entry_id for r in replay(journal_dir, JournalPosition(0, 0))]
    assert entries and entries == list(range(entries[0], 25))
