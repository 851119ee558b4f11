"""A bookie publishes its free and total disk in its registration, and rewrites the figures
only once free space moved by more than 1 % of the disk.

A real :class:`BookieState` and :class:`DiskMonitor` on a small tmpfs (mounting needs root,
as in CI) and a real in-memory metadata store; free space is moved by writing files there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.bookie.disk_check import DiskSpace, DiskThresholds
from magnetar.bookie.disk_monitor import DiskMonitor
from magnetar.bookie.state import BookieState, disk_moved
from magnetar.bookie_protocol.layout import AVAILABLE_PATH
from magnetar.common.clock import SystemClock
from magnetar.metadata.embedded import EmbeddedStore
from magnetar.testing.disk import Tmpfs

MIB = 1024 * 1024
DISK_MIB = 16
BOOKIE = "127.0.0.1:3181"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Tmpfs]:
    with Tmpfs(tmp_path / "disk", DISK_MIB) as disk:
        yield disk


def test_disk_moved_by_more_than_one_percent_of_the_disk() -> None:
    before = DiskSpace(total_bytes=10_000, free_bytes=5_000)
    assert disk_moved(None, before)
    assert not disk_moved(before, DiskSpace(10_000, 5_100))
    assert not disk_moved(before, DiskSpace(10_000, 4_900))
    assert disk_moved(before, DiskSpace(10_000, 5_101))
    assert disk_moved(before, DiskSpace(10_000, 4_899))
    assert disk_moved(before, DiskSpace(20_000, 5_000))


async def test_the_registration_carries_the_disk_and_is_rewritten_only_when_it_moved(
    small_disk: Tmpfs,
) -> None:
    store = await EmbeddedStore.open("memory:")
    state = BookieState(
        BOOKIE, small_disk.path, store, thresholds=DiskThresholds(), check_every_bytes=0
    )
    monitor = DiskMonitor(state, _no_checkpoint, SystemClock(), interval_ms=60_000)
    path = f"{AVAILABLE_PATH}/{BOOKIE}"
    try:
        state.look_at_disk()
        await state.register()
        got = await store.get(path)
        body = json.loads(got.value)
        assert body["bookie_id"] == BOOKIE and body["readonly"] is False
        assert body["disk_total_bytes"] == DISK_MIB * MIB
        assert body["disk_free_bytes"] == small_disk.free_bytes()
        version = got.stat.version

        # Under 1 % of the disk moved: the check writes nothing.
        (small_disk.path / "small").write_bytes(bytes(64 * 1024))
        await monitor.check()
        assert (await store.get(path)).stat.version == version

        # More than 1 %: the next check rewrites the figures in place, once.
        (small_disk.path / "big").write_bytes(bytes(MIB))
        await monitor.check()
        got = await store.get(path)
        assert got.stat.version == version + 1
        assert got.stat.ephemeral_owner is not None
        assert json.loads(got.value)["disk_free_bytes"] == small_disk.free_bytes()
        await monitor.check()
        assert (await store.get(path)).stat.version == version + 1
    finally:
        await state.unregister()
        await store.close()


async def _no_checkpoint() -> None:
    return None
