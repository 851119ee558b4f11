"""Entry logs a garbage collection frees are removed after its checkpoint, in a thread of
their own: adds and checkpoints go on while a log is removed (removing a 512 MiB log a piece
at a time takes a second or more; inside the checkpoint it held the write cache full and
every add waiting for as long), and a removal that fails is retried by the next checkpoint."""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
from pathlib import Path
from typing import Any

import crc32c
import pytest

from magnetar.bookie import Bookie
from magnetar.bookie.entry_log import EntryLogger
from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.metadata import MetadataStore
from magnetar.testing import wait_until_async

from .test_bookie import RawConnection
from .test_entry_log import _bookie_collected_by_hand


class _Adder:
    def __init__(self, conn: RawConnection) -> None:
        self.conn = conn
        self.rid = 0

    async def add(self, ledger: int, entry: int) -> bytes:
        self.rid += 1
        payload = f"{ledger}:{entry}".encode() * 100
        request = Request(
            request_id=self.rid,
            op=OpType.ADD_ENTRY,
            ledger_id=ledger,
            entry_id=entry,
            last_add_confirmed=entry - 1,
            checksum=crc32c.crc32c(payload),
        )
        resp, _ = await self.conn.call(request, payload)
        assert resp.status == Status.OK, resp.message
        return payload

    async def read(self, ledger: int, entry: int) -> bytes:
        self.rid += 1
        request = Request(request_id=self.rid, op=OpType.READ_ENTRY, ledger_id=ledger,
                          entry_id=entry)  # fmt: skip
        resp, data = await self.conn.call(request, b"")
        assert resp.status == Status.OK, resp.message
        return data


async def _log_to_collect(tmp_path: Path) -> tuple[MetadataStore, Bookie, _Adder, EntryLogger]:
    """A bookie whose log 1 holds mostly ledger 2, which the store does not know (deleted):
    a collection rolls that log, compacts ledger 1's entries out of it and removes it."""
    store, bookie = await _bookie_collected_by_hand(tmp_path)
    adder = _Adder(await RawConnection.open(bookie.port))
    for entry in range(20):
        await adder.add(1, entry)
        for copy in range(5):
            await adder.add(2, entry * 5 + copy)
    await bookie.checkpoint()
    assert bookie.storage is not None
    return store, bookie, adder, bookie.storage.entry_logger


async def test_adds_and_checkpoints_go_on_while_a_collected_log_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, bookie, adder, logger = await _log_to_collect(tmp_path)
    started = threading.Event()
    release = threading.Event()
    remove = logger.remove

    def held(log_id: int) -> int:
        started.set()
        release.wait(30)
        return remove(log_id)

    monkeypatch.setattr(logger, "remove", held)
    collection = asyncio.create_task(bookie.collect_garbage())
    try:
        await wait_until_async(started.is_set, what="the removal of log 1 under way")
        assert logger.active_log_id == 2
        added = {entry: await adder.add(1, entry) for entry in range(20, 40)}
        await asyncio.wait_for(bookie.checkpointer.checkpoint(), 10)  # not behind it
        assert not collection.done() and logger.path(1).exists()
        release.set()
        assert await asyncio.wait_for(collection, 10) > 0
        assert not logger.path(1).exists()
        for entry, payload in added.items():
            assert await adder.read(1, entry) == payload
    finally:
        release.set()
        adder.conn.close()
        await bookie.stop()
        await store.close()


async def test_a_removal_that_fails_logs_one_line_and_the_next_checkpoint_retries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store, bookie, adder, logger = await _log_to_collect(tmp_path)
    remove = logger.remove
    failures = [OSError(errno.EIO, "Input/output error (injected)")]

    def failing_once(log_id: int) -> Any:
        if failures:
            raise failures.pop()
        return remove(log_id)

    monkeypatch.setattr(logger, "remove", failing_once)
    caplog.set_level(logging.INFO, logger="magnetar.bookie")
    try:
        await bookie.collect_garbage()
        (line,) = [r for r in caplog.records if "cannot remove entry logs" in r.getMessage()]
        assert line.exc_info is None and "Input/output error" in line.getMessage()
        assert logger.path(1).exists() and not bookie.readonly
        await bookie.checkpoint()
        await wait_until_async(lambda: not logger.path(1).exists(), what="log 1 removed")
        await wait_until_async(
            lambda: any("bytes freed" in r.getMessage() for r in caplog.records),
            what="the removal logged",
        )
        for entry in range(20):
            assert await adder.read(1, entry) == f"1:{entry}".encode() * 100
    finally:
        adder.conn.close()
        await bookie.stop()
        await store.close()
