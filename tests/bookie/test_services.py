"""A bookie's background services (checkpoint, garbage collection, index spill, disk
monitor): each loop runs on the injected clock from ``start()`` on, and ``stop()`` ends every
one of them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import crc32c
import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.common.clock import ManualClock
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async

SERVICES = 4  # checkpoint, disk monitor, garbage collection, index spill


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await connect("memory:")
    yield s
    await s.close()


def _config(data_dir: Path) -> BookieConfig:
    return BookieConfig(
        data_dir=data_dir,
        port=0,
        disk_free_min_bytes=0,
        journal_group_wait_ms=0,  # the journal's pacing would sleep on the manual clock
        checkpoint_interval_ms=1_000,
        gc_interval_ms=60_000,
        index_spill_interval_ms=5_000,
        disk_check_interval_ms=5_000,
    )


async def test_the_services_run_on_the_injected_clock_and_stop_with_the_bookie(
    tmp_path: Path, store: MetadataStore
) -> None:
    clock = ManualClock()
    bookie = Bookie(_config(tmp_path / "b"), store, clock=clock)
    await bookie.start()
    try:
        await wait_until_async(lambda: clock.sleepers == SERVICES, 10, what="every loop asleep")
        assert bookie.gc_runs == 0
        refusal = bookie.processor.admit_adds(1, 0, -1, [crc32c.crc32c(b"e")], [b"e"], False)
        assert refusal is None, refusal
        clock.advance(60)  # every interval has passed: a checkpoint, a collection, ...
        await wait_until_async(lambda: bookie.gc_runs == 1, 10, what="one garbage collection")
        # Ledger 1 has no metadata node: collected.
        storage = bookie.storage
        assert storage is not None and 1 not in storage.ledgers
        await wait_until_async(lambda: clock.sleepers == SERVICES, 10, what="asleep again")
    finally:
        await bookie.stop()
    assert clock.sleepers == 0
    assert not bookie.serving


async def test_a_bookie_without_a_store_runs_no_collection(tmp_path: Path) -> None:
    clock = ManualClock()
    bookie = Bookie(_config(tmp_path / "b"), None, clock=clock)
    await bookie.start()
    try:
        await wait_until_async(lambda: clock.sleepers == SERVICES - 1, 10, what="loops asleep")
        with pytest.raises(RuntimeError):
            await bookie.collect_garbage()
    finally:
        await bookie.stop()
    assert clock.sleepers == 0
