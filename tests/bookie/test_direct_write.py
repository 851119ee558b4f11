"""Entry-log checkpoints written with ``O_DIRECT`` (once adds waited for room): pieces at any offset, and
between pieces written through the page cache, land byte for byte as through the page cache (the head of their first block kept or read back, the rest of
their last block zeros), entries read back, and a file system that refuses direct writes
gets page-cache writes instead."""

from __future__ import annotations

import errno
import logging
import os
import random
from pathlib import Path
from typing import Any

import crc32c
import pytest

from magnetar.bookie import direct_write
from magnetar.bookie.direct_write import BLOCK_BYTES, DirectLog, open_direct
from magnetar.bookie.entry_log import EntryLogger


def _fill(logger: EntryLogger, rnd: random.Random, count: int) -> list[tuple[int, bytes]]:
    """Adds of many sizes (some past the inline size, kept by reference); their locations."""
    out = []
    for i in range(count):
        payload = rnd.randbytes(rnd.choice((1, 37, 700, 4095, 5000, 70_000)))
        loc = logger.add(1, i, i - 1, crc32c.crc32c(payload), payload)
        out.append((loc, payload))
    return out


def _checkpoint(logger: EntryLogger) -> None:
    frozen = logger.freeze()
    logger.write_frozen(frozen)
    logger.release(frozen)


def test_direct_writes_land_as_page_cache_writes_and_read_back(tmp_path: Path) -> None:
    if open_direct(str(tmp_path / "probe")) is None:
        pytest.fail(f"{tmp_path} has no O_DIRECT: this test needs a file system with it")
    direct = EntryLogger(tmp_path / "direct")
    cached = EntryLogger(tmp_path / "cached", direct_writes=False)
    stored: list[tuple[int, bytes]] = []
    for round_ in range(8):  # checkpoints ending mid-block, one after another
        # direct while behind, through the page cache otherwise: both, into one log
        direct.adds_waited = round_ % 3 != 2
        rnd = random.Random(round_)
        stored += _fill(direct, rnd, 40 + round_)
        _fill(cached, random.Random(round_), 40 + round_)
        _checkpoint(direct)
        _checkpoint(cached)
    data_end = cached.path(1).stat().st_size
    written = direct.path(1).read_bytes()
    assert len(written) % BLOCK_BYTES == 0 and len(written) - data_end < BLOCK_BYTES
    assert written[:data_end] == cached.path(1).read_bytes()
    assert written[data_end:] == bytes(len(written) - data_end)
    for loc, payload in stored:
        assert direct.read_file(loc).payload == payload
    direct.close()
    cached.close()


def test_the_head_of_a_block_written_by_another_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "0000000001.log"
    before = random.Random(1).randbytes(3 * BLOCK_BYTES + 123)
    path.write_bytes(before)
    fd = os.open(path, os.O_RDWR)
    direct_fd = open_direct(str(path))
    assert direct_fd is not None
    try:
        DirectLog().write(1, direct_fd, fd, len(before), [b"new", bytearray(b"er")])
        os.fdatasync(fd)
    finally:
        os.close(fd)
        os.close(direct_fd)
    after = path.read_bytes()
    assert after[: len(before) + 5] == before + b"newer"
    assert after[len(before) + 5 :] == bytes(len(after) - len(before) - 5)


def test_a_file_system_refusing_direct_writes_gets_page_cache_writes(
    tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(*_args: Any) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(direct_write.DirectLog, "write", refused)
    logger = EntryLogger(tmp_path)
    logger.adds_waited = True  # direct writes are for checkpoints that adds wait for
    stored = _fill(logger, random.Random(7), 30)
    with caplog.at_level(logging.WARNING):
        _checkpoint(logger)
        stored += _fill(logger, random.Random(8), 30)
        _checkpoint(logger)
    assert [r.getMessage()[:45] for r in caplog.records] == [
        "entry logs: direct writes refused ([Errno 22]"
    ]
    for loc, payload in stored:
        assert logger.read_file(loc).payload == payload
    logger.close()
