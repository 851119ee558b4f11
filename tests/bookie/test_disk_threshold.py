"""The free-disk threshold stops a fast writer before the disk fills.

The bookie looked at free space only every ``disk_check_interval_ms`` (5 s by default):
a writer filling the disk faster than that met ``ENOSPC`` first (the journal write failed,
the bookie turned read-only on the error and logged "storage still failing" on every
retry), so the threshold was not what stopped the writes. It also looks after every
quarter of the threshold written now.

A real bookie in this process writes to a small tmpfs (mounting needs root, as in CI);
the timed check is set far beyond the test's length, so only the byte count can trigger it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.bookie_protocol.errors import BookieReadOnly
from magnetar.common.clock import SystemClock
from magnetar.common.errors import PersistenceError
from magnetar.ledger.local_transport import LocalBookieTransport
from magnetar.ledger.transport import AddRun
from magnetar.testing.disk import Tmpfs

MIB = 1024 * 1024
DISK_MIB = 48
THRESHOLD_BYTES = 16 * MIB
HOUR_MS = 3_600_000
PAYLOAD = bytes(64 * 1024)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Tmpfs]:
    with Tmpfs(tmp_path / "disk", DISK_MIB) as disk:
        yield disk


async def _add(transport: LocalBookieTransport, request: AddRun) -> PersistenceError | None:
    """One add; once the bookie answered, None (stored) or why not."""
    fut: asyncio.Future[PersistenceError | None] = asyncio.get_running_loop().create_future()

    def done(error: PersistenceError | None) -> None:
        fut.set_result(error)

    transport.add(request, done)
    return await asyncio.wait_for(fut, 30)


async def test_the_threshold_turns_the_bookie_read_only_before_the_disk_fills(
    small_disk: Tmpfs,
) -> None:
    bookie = Bookie(
        BookieConfig(
            data_dir=small_disk.path / "bookie",
            port=0,
            disk_free_min_bytes=THRESHOLD_BYTES,
            disk_check_interval_ms=HOUR_MS,
        ),
        None,
    )
    await bookie.start()
    transport = LocalBookieTransport(bookie, SystemClock(), request_timeout_ms=30_000)
    try:
        assert not bookie.readonly
        # twice the disk: the writes must stop long before that, one way or the other
        for entry_id in range(2 * DISK_MIB * MIB // len(PAYLOAD)):
            request = AddRun(
                entry_id, 1, entry_id, entry_id - 1, (crc32c.crc32c(PAYLOAD),), (PAYLOAD,)
            )
            error = await _add(transport, request)
            if error is not None:
                break
        else:
            pytest.fail("the bookie took twice its disk's size")
        assert bookie.storage_fault is None, f"writes met the full disk: {bookie.storage_fault}"
        assert isinstance(error, BookieReadOnly), error
        assert str(error) == f"bookie {bookie.bookie_id} is read-only"
        problem = bookie.write_problem()
        assert problem is not None and "disk full" in problem, problem
        assert small_disk.free_bytes() > 0
    finally:
        transport.close()
        await bookie.stop()
