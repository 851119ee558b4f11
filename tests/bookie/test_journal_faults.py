"""The journal on a disk that fills up and empties again (issue 14.2): a failed write fails
the records it carried, and later writes work without a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from magnetar.bookie.journal import (
    Journal,
    JournalPosition,
    RecordKind,
    journal_file_ids,
    replay,
)
from magnetar.common.clock import SystemClock
from magnetar.testing.disk import Tmpfs, fill_disk


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Tmpfs]:
    with Tmpfs(tmp_path / "journal", 4) as disk:
        yield disk


def _append(j: Journal, entry: int) -> None:
    payload = b"p" * 1000
    j.append(RecordKind.ADD_ENTRY, 1, entry, entry - 1, crc32c.crc32c(payload), payload)


async def _sync(j: Journal) -> BaseException | None:
    """Register a callback now; the outcome of the write that covers it."""
    outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    j.on_durable(lambda: outcome.set_result(None), outcome.set_result)
    return await asyncio.wait_for(outcome, 10)


async def test_a_failed_write_fails_its_records_and_later_writes_work_again(
    tiny_disk: Tmpfs,
) -> None:
    failures: list[BaseException] = []
    j = Journal(
        tiny_disk.path,
        clock=SystemClock(),
        prealloc_bytes=64 * 1024,
        on_write_failure=failures.append,
    )
    j.start()
    try:
        _append(j, 0)
        assert await _sync(j) is None
        filler = tiny_disk.path / "filler"
        fill_disk(filler)
        for entry in range(1, 200):  # beyond the zero-filled part: needs new blocks
            _append(j, entry)

        def broken(exc: BaseException) -> None:  # a caller's defect: logged, not fatal
            raise RuntimeError("a caller's bug")

        j.on_durable(lambda: None, broken)
        error = await _sync(j)
        assert isinstance(error, OSError) and "No space left" in str(error)
        assert j.failed is error and failures == [error]
        filler.unlink()
        _append(j, 500)
        assert await _sync(j) is None  # no restart needed
        assert j.failed is None
    finally:
        await j.close()
    # The failed records were never acknowledged; what was synced replays, in order, and the
    # failed file's torn end is an end, not corruption.
    assert len(journal_file_ids(tiny_disk.path)) == 2
    got = [r.entry_id for r in replay(tiny_disk.path, JournalPosition(0, 0))]
    assert got[0] == 0 and got[-1] == 500
    assert got == sorted(got)
