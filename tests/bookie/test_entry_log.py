"""The entry logger's write buffers: an entry is stored where its location says.

Found by the cluster failover benchmark (docs/cluster.md, Performance): after a garbage
collection rolled the active log, the buffer left empty by the previous checkpoint (of the
old log) was the last one again once the new log's buffer was flushed, and the next adds went
into it. Their locations named the new log, their bytes went to the old log's file (recreated
as a sparse file after compaction had removed it): reads failed with "truncated entry
header" and a broker taking over the topic could not open it until the client's backoff ran
out several times.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import random
import threading
from pathlib import Path
from typing import Any

import crc32c
import pytest

from magnetar.bookie import Bookie, BookieConfig, ledger_storage
from magnetar.bookie.entry_log import (
    HEADER_SIZE,
    INLINE_MAX_BYTES,
    SEGMENT_POOL_MAX,
    EntryLogger,
    log_of,
)
from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.metadata import MetadataStore, connect

from .test_bookie import RawConnection


def _add(logger: EntryLogger, ledger: int, entry: int) -> tuple[int, bytes]:
    payload = f"{ledger}:{entry}".encode() * 10
    return logger.add(ledger, entry, entry - 1, crc32c.crc32c(payload), payload), payload


def _checkpoint(logger: EntryLogger) -> None:
    frozen = logger.freeze()
    logger.write_frozen(frozen)
    logger.release(frozen)


def test_adds_after_a_roll_and_two_checkpoints_are_stored_where_their_location_says(
    tmp_path: Path,
) -> None:
    logger = EntryLogger(tmp_path)
    _add(logger, 1, 0)
    _checkpoint(logger)  # leaves an empty buffer of log 1 at the end
    log_1_bytes = logger.path(1).stat().st_size
    logger.roll()  # log 2 is active
    first, first_payload = _add(logger, 1, 1)
    _checkpoint(logger)
    second, second_payload = _add(logger, 1, 2)
    assert log_of(first) == log_of(second) == 2
    # still buffered: served from the buffer
    buffered = logger.read_buffered(second)
    assert buffered is not None and buffered.payload == second_payload
    _checkpoint(logger)
    assert logger.read_buffered(second) is None
    for location, payload in ((first, first_payload), (second, second_payload)):
        stored = logger.read_file(location)
        assert stored.payload == payload
    # nothing went to the old log's file after it was rolled
    assert logger.path(1).stat().st_size == log_1_bytes
    logger.close()


def test_a_buffer_of_an_older_log_never_takes_adds(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path)
    sizes = []
    for round_ in range(3):
        _add(logger, 1, round_)
        _checkpoint(logger)
        sizes.append(logger.path(logger.active_log_id).stat().st_size)
        logger.roll()
    for _ in range(3):
        location, payload = _add(logger, 2, 0)
        _checkpoint(logger)
        assert logger.read_file(location).payload == payload
    # the rolled logs were not written to after they were rolled
    assert [logger.path(i).stat().st_size for i in (1, 2, 3)] == sizes
    logger.close()


def test_a_log_removed_during_a_read_of_it_is_closed_only_once_the_read_ends(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A read holds a location taken before compaction moved its entry, and the old log is
    removed meanwhile (the removal has a thread of its own). Closed under the read, the
    descriptor's number went to the next file opened, here another log with a different
    entry at the same offset, and the read returned that entry."""
    from magnetar.bookie import entry_log

    logger = EntryLogger(tmp_path / "a")
    location, payload = _add(logger, 1, 0)
    _checkpoint(logger)
    other = EntryLogger(tmp_path / "b")
    imposter = other.add(1, 0, -1, 0, b"another entry at the same offset")
    assert imposter == location
    _checkpoint(other)
    reading = threading.Event()
    go_on = threading.Event()
    real_pread = os.pread

    def held_pread(fd: int, length: int, offset: int) -> bytes:
        if not reading.is_set():
            reading.set()
            assert go_on.wait(10)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(entry_log.os, "pread", held_pread)
    result: list[bytes] = []
    reader = threading.Thread(target=lambda: result.append(logger.read_file(location).payload))
    reader.start()
    assert reading.wait(10)
    logger.remove(1)
    opened = os.open(other.path(1), os.O_RDONLY)  # the lowest free descriptor number
    try:
        go_on.set()
        reader.join(10)
        assert result == [payload]
    finally:
        go_on.set()
        os.close(opened)
        logger.close()
        other.close()


async def test_a_bookie_serves_entries_added_after_a_garbage_collection_that_rolled_its_log(
    tmp_path: Path,
) -> None:
    """The same through a bookie and its protocol: a deleted ledger makes the active log
    mostly garbage, so the collection rolls it and compacts it away; entries added after
    that (as a new owner's ledger recovery re-adds them) are read back after checkpoints."""
    store, bookie = await _bookie_collected_by_hand(tmp_path)
    conn = await RawConnection.open(bookie.port)
    rid = 0

    async def call(op: OpType, ledger: int, entry: int, payload: bytes = b"") -> tuple[Any, bytes]:
        nonlocal rid
        rid += 1
        request = Request(
            request_id=rid,
            op=op,
            ledger_id=ledger,
            entry_id=entry,
            last_add_confirmed=entry - 1,
            checksum=crc32c.crc32c(payload),
        )
        return await conn.call(request, payload)

    try:
        written: dict[int, bytes] = {}
        for entry in range(20):
            for ledger in (1, 2):
                payload = f"{ledger}:{entry}".encode() * (1 if ledger == 1 else 50)
                resp, _ = await call(OpType.ADD_ENTRY, ledger, entry, payload)
                assert resp.status == Status.OK, resp.message
                if ledger == 1:
                    written[entry] = payload
        await bookie.checkpoint()  # ledger 2 (never in the store: deleted) is most of log 1
        await bookie.collect_garbage()
        assert bookie.storage is not None and bookie.storage.entry_logger.active_log_id == 2
        for entry in range(20, 24):
            written[entry] = f"1:{entry}".encode()
            resp, _ = await call(OpType.ADD_ENTRY, 1, entry, written[entry])
            assert resp.status == Status.OK, resp.message
            await bookie.checkpoint()
        for entry, payload in written.items():
            resp, data = await call(OpType.READ_ENTRY, 1, entry)
            assert (resp.status, data) == (Status.OK, payload), (entry, resp.message)
    finally:
        conn.close()
        await bookie.stop()
        await store.close()


async def test_compaction_writes_moved_entries_out_a_write_cache_at_a_time(
    tmp_path: Path,
) -> None:
    """Compaction moves a sparse log's live entries to the active log through the write
    buffers; they are written out whenever the buffers pass ``write_cache_max_bytes``, as
    adds are. Before, a sparse log's whole live data (up to half a log) waited in memory
    until the collection's last checkpoint: 2 MB here, with a 64 KiB cache. The entries are
    still read back."""
    cache_bytes = 64 * 1024
    store, bookie = await _bookie_collected_by_hand(tmp_path, write_cache_max_bytes=cache_bytes)
    conn = await RawConnection.open(bookie.port)
    entry_bytes = 10_000
    written: dict[int, bytes] = {}
    try:
        for entry in range(200):
            for ledger, size in ((1, entry_bytes), (2, 3 * entry_bytes)):
                payload = f"{ledger}:{entry}:".encode().ljust(size, b"x")
                request = Request(
                    request_id=entry * 2 + ledger,
                    op=OpType.ADD_ENTRY,
                    ledger_id=ledger,
                    entry_id=entry,
                    last_add_confirmed=entry - 1,
                    checksum=crc32c.crc32c(payload),
                )
                resp, _ = await conn.call(request, payload)
                assert resp.status == Status.OK, resp.message
                if ledger == 1:
                    written[entry] = payload
        await bookie.checkpoint()  # ledger 2 (not in the store: deleted) is 3/4 of the log
        storage = bookie.storage
        assert storage is not None
        seen: list[int] = []
        done = False

        async def watch() -> None:
            while not done:
                seen.append(storage.entry_logger.buffered_bytes)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            await bookie.collect_garbage()
        finally:
            done = True
            await watcher
        assert 2 not in storage.ledgers
        assert max(seen) <= cache_bytes + entry_bytes + 64, max(seen)
        for entry, payload in written.items():
            request = Request(request_id=10_000 + entry, op=OpType.READ_ENTRY, ledger_id=1,
                              entry_id=entry)  # fmt: skip
            resp, data = await conn.call(request, b"")
            assert (resp.status, data) == (Status.OK, payload), (entry, resp.message)
    finally:
        conn.close()
        await bookie.stop()
        await store.close()


async def _bookie_collected_by_hand(tmp_path: Path, **config: Any) -> tuple[MetadataStore, Bookie]:
    """A started bookie whose checkpoints, disk checks and collections the test runs itself,
    over an in-memory store holding ledger 1."""
    store = await connect("memory:")
    await store.put("/ledgers/L0000000001", b"")
    never_ms = 3_600_000
    bookie = Bookie(
        BookieConfig(
            data_dir=tmp_path,
            port=0,
            disk_free_min_bytes=0,
            checkpoint_interval_ms=never_ms,
            disk_check_interval_ms=never_ms,
            gc_interval_ms=never_ms,
            **config,
        ),
        store,
    )
    await bookie.start()
    return store, bookie


def test_a_checkpoint_that_adds_wait_for_syncs_in_bigger_pieces_from_its_next_piece_on(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A checkpoint syncs 512 KiB at a time; once the owner marks it behind (adds wait for
    write-cache room, or the cache filled again meanwhile), 2 MiB at a time from the next
    piece on, and every entry is in the file either way."""
    from magnetar.bookie import entry_log

    logger = EntryLogger(tmp_path, direct_writes=False)  # the pieces as they are
    payload = b"x" * 1200
    added = [logger.add(1, e, e - 1, crc32c.crc32c(payload), payload) for e in range(12_000)]
    assert logger.buffered_bytes > 6 * entry_log.SYNC_CHUNK_BYTES_BEHIND
    real_fdatasync = os.fdatasync
    synced_at: list[int] = []
    frozen = logger.freeze()
    (buf,) = frozen

    def recording_sync(fd: int) -> None:
        real_fdatasync(fd)
        synced_at.append(os.fstat(fd).st_size)
        if len(synced_at) == 2:  # adds start waiting while the third piece is cut
            logger.behind = True

    monkeypatch.setattr(os, "fdatasync", recording_sync)
    logger.write_frozen(frozen)
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)
    pieces = [b - a for a, b in zip([0, *synced_at], synced_at, strict=False)]
    assert pieces[:2] == [pytest.approx(entry_log.SYNC_CHUNK_BYTES, abs=2000)] * 2
    assert pieces[2:-1] == [pytest.approx(entry_log.SYNC_CHUNK_BYTES_BEHIND, abs=2000)] * (
        len(pieces) - 3
    )
    assert len(pieces) > 4 and synced_at[-1] == buf.size
    logger.release(frozen)
    assert logger.read_file(added[-1]).payload == payload


def test_a_checkpoint_drops_big_payloads_as_they_are_synced_and_a_retry_writes_only_the_rest(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A checkpoint's write syncs a log a chunk at a time; each synced chunk's big payloads
    leave memory (read from the file from then on; small ones live in the buffer's bytes
    until the checkpoint ends). A write that fails midway hands back only what was not
    synced, the retry starts there, and adds meanwhile go to a new buffer."""
    from magnetar.bookie import entry_log, file_io

    logger = EntryLogger(tmp_path, direct_writes=False)  # the pieces as they are
    added = []
    big_bytes = 0
    for entry in range(1500):
        size = entry_log.INLINE_MAX_BYTES + 2000 if entry % 3 == 0 else 1200
        payload = (entry.to_bytes(4, "big") * size)[:size]
        added.append((logger.add(5, entry, entry - 1, crc32c.crc32c(payload), payload), payload))
        if entry % 3 == 0:
            big_bytes += HEADER_SIZE + size
    total = logger.buffered_bytes
    assert total > 6 * entry_log.SYNC_CHUNK_BYTES
    real_fdatasync = os.fdatasync
    syncs = 0

    def failing_third_sync(fd: int) -> None:
        nonlocal syncs
        syncs += 1
        if syncs == 3:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", failing_third_sync)
    frozen = logger.freeze()
    with pytest.raises(OSError):
        logger.write_frozen(frozen)
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)
    (buf,) = frozen
    released = buf.released
    assert 0 < released < len(added)
    synced_big = sum(
        HEADER_SIZE + len(p) for e, (_, p) in enumerate(added[:released]) if e % 3 == 0
    )
    assert buf.released_bytes == synced_big > entry_log.SYNC_CHUNK_BYTES
    assert logger.buffered_bytes == total - synced_big
    for entry, (location, payload) in enumerate(added):
        buffered = logger.read_buffered(location)
        if entry < released and entry % 3 == 0:
            assert buffered is None
        else:
            assert buffered is not None and buffered.payload == payload
        if entry < released:
            assert logger.read_file(location).payload == payload

    logger.unfreeze(frozen)
    late_payload = b"late" * 100
    late = logger.add(5, 1500, 1499, crc32c.crc32c(late_payload), late_payload)
    assert buf.find(late & entry_log.OFFSET_MASK) is None  # a new buffer took it
    writes: list[int] = []
    real_pwritev_all = file_io.pwritev_all

    def recording(fd: int, bufs: Any, offset: int) -> None:
        writes.append(offset)
        real_pwritev_all(fd, bufs, offset)

    monkeypatch.setattr(file_io, "pwritev_all", recording)
    _checkpoint(logger)
    assert writes[0] == added[released][0] & entry_log.OFFSET_MASK
    assert writes == sorted(writes) and len(writes) > 1
    assert logger.buffered_bytes == 0
    for location, payload in [*added, (late, late_payload)]:
        assert logger.read_buffered(location) is None
        assert logger.read_file(location).payload == payload
    logger.close()


async def test_a_bookie_serves_reads_and_adds_of_a_ledger_whose_index_was_spilled(
    tmp_path: Path,
) -> None:
    """An idle ledger's index leaves memory; reads and adds over the protocol bring it back
    with the same answers; a spill file that cannot be read back fails that read with an
    error (the bookie keeps serving), and a restart rebuilds the index from its files."""
    store, bookie = await _bookie_collected_by_hand(tmp_path, index_spill_interval_ms=0)
    n = ledger_storage.SPILL_ENTRIES_MIN
    payloads = [f"entry {i}".encode() for i in range(n)]
    refusal = bookie.processor.admit_adds(
        1, 0, -1, [crc32c.crc32c(p) for p in payloads], payloads, False
    )
    assert refusal is None, refusal
    await bookie.checkpoint()
    storage = bookie.storage
    assert storage is not None
    for _ in range(3):
        await bookie.spill_idle_indexes()
    assert storage.ledgers[1].entries.spilled
    conn = await RawConnection.open(bookie.port)
    rid = 0

    async def call(op: OpType, entry: int, payload: bytes = b"") -> tuple[Any, bytes]:
        nonlocal rid
        rid += 1
        request = Request(
            request_id=rid,
            op=op,
            ledger_id=1,
            entry_id=entry,
            last_add_confirmed=entry - 1,
            checksum=crc32c.crc32c(payload),
        )
        return await conn.call(request, payload)

    try:
        for entry in (0, n // 2, n - 1):
            resp, data = await call(OpType.READ_ENTRY, entry)
            assert (resp.status, data) == (Status.OK, payloads[entry])
        assert not storage.ledgers[1].entries.spilled
        for _ in range(3):
            await bookie.spill_idle_indexes()
        assert storage.ledgers[1].entries.spilled
        resp, _ = await call(OpType.ADD_ENTRY, n, b"one more")
        assert resp.status == Status.OK, resp.message
        resp, data = await call(OpType.READ_ENTRY, n)
        assert (resp.status, data) == (Status.OK, b"one more")
        await bookie.checkpoint()
        for _ in range(3):
            await bookie.spill_idle_indexes()
        spill = storage.ledgers[1].entries.spill_file
        assert spill is not None and storage.ledgers[1].entries.spilled
        spill.path.write_bytes(b"broken")
        resp, _ = await call(OpType.READ_ENTRY, 5)
        assert resp.status == Status.INTERNAL_ERROR and "unreadable" in resp.message
        resp, _ = await call(OpType.ADD_ENTRY, n + 1, b"refused")
        assert resp.status == Status.INTERNAL_ERROR
        resp, _ = await call(OpType.READ_LAC, 0)
        assert resp.status == Status.OK  # still serving
    finally:
        conn.close()
        await bookie.stop()
    again = Bookie(dataclasses.replace(bookie.config, port=bookie.port), store)
    await again.start()
    try:
        assert again.storage is not None
        assert not any((tmp_path / "index-spill").iterdir())
        assert again.storage.location(1, n) is not None
        assert len(again.storage.ledgers[1].entries) == n + 1
    finally:
        await again.stop()
        await store.close()


def test_segments_of_written_buffers_are_reused_and_hold_only_the_new_records(
    tmp_path: Path,
) -> None:
    """A written buffer's segments go to a small pool and take later adds over the old
    bytes: every record reads back as added, from the buffer and then from the file, and
    the pool stays bounded."""
    logger = EntryLogger(tmp_path)
    rng = random.Random(7)
    written: dict[int, bytes] = {}
    entry = 0
    for _round in range(4):
        for _ in range(3000):  # ~3 segments of mixed small, inline-max and big payloads
            size = rng.choice([1, 100, 1000, INLINE_MAX_BYTES, INLINE_MAX_BYTES + 1, 9000])
            payload = bytes([entry % 251]) * size
            location = logger.add(1, entry, entry - 1, crc32c.crc32c(payload), payload)
            written[location] = payload
            stored = logger.read_buffered(location)
            assert stored is not None and stored.payload == payload
            entry += 1
        _checkpoint(logger)
        assert 0 < len(logger._segment_pool) <= SEGMENT_POOL_MAX
    for location, payload in written.items():
        assert logger.read_file(location).payload == payload
    logger.close()


def test_runs_are_stored_as_the_same_records_added_one_at_a_time(tmp_path: Path) -> None:
    """A run takes the same locations and writes the same bytes as its entries added one
    by one, whichever way it is stored (C loops for a run of copied payloads in one
    segment; record by record across segments, rolls and big payloads)."""
    rng = random.Random(11)
    by_run = EntryLogger(tmp_path / "runs", log_size_max_bytes=3 * 1024 * 1024)
    by_one = EntryLogger(tmp_path / "ones", log_size_max_bytes=3 * 1024 * 1024)
    entry = 0
    locations: dict[int, bytes] = {}
    for round_ in range(400):
        n = rng.choice([1, 2, 3, 30, 200])
        sizes = [1, 100, 1000, INLINE_MAX_BYTES] + ([INLINE_MAX_BYTES + 1] if round_ % 9 else [])
        payloads = [bytes([(entry + i) % 251]) * rng.choice(sizes) for i in range(n)]
        checksums = [crc32c.crc32c(p) for p in payloads]
        lac = entry - 1
        got = by_run.add_run(1, entry, lac, checksums, payloads)
        want = [by_one.add(1, entry + i, lac, checksums[i], payloads[i]) for i in range(n)]
        assert got == want
        for location, payload in zip(got, payloads, strict=True):
            stored = by_run.read_buffered(location)
            assert stored is not None and stored.payload == payload
            locations[location] = payload
        entry += n
        if round_ % 50 == 49:
            _checkpoint(by_run)
            _checkpoint(by_one)
    _checkpoint(by_run)
    _checkpoint(by_one)
    assert by_run.log_ids() == by_one.log_ids() and len(by_run.log_ids()) > 2
    for log_id in by_run.log_ids():
        assert by_run.path(log_id).read_bytes() == by_one.path(log_id).read_bytes()
    for location, payload in locations.items():
        assert by_run.read_file(location).payload == payload
    by_run.close()
    by_one.close()


def test_records_of_many_ledgers_are_stored_as_the_same_records_added_one_at_a_time(
    tmp_path: Path,
) -> None:
    """``add_records`` (the runs of many ledgers at once) takes the same locations and
    writes the same bytes as its records added one by one; a batch with a payload it does
    not copy, or that would roll the log, is declined (``None``) and nothing is added."""
    rng = random.Random(12)
    log_max = 3 * 1024 * 1024
    by_records = EntryLogger(tmp_path / "records", log_size_max_bytes=log_max)
    by_one = EntryLogger(tmp_path / "ones", log_size_max_bytes=log_max)
    next_entry = dict.fromkeys(range(1, 6), 0)
    declined = 0
    for round_ in range(300):
        ledger_ids: list[int] = []
        entry_ids: list[int] = []
        for _ in range(rng.choice([1, 2, 5, 40])):
            ledger = rng.randrange(1, 6)
            ledger_ids.append(ledger)
            entry_ids.append(next_entry[ledger])
            next_entry[ledger] += 1
        lacs = [e - 1 for e in entry_ids]
        sizes = [0, 1, 100, 1000, INLINE_MAX_BYTES] + (
            [INLINE_MAX_BYTES + 1] if round_ % 7 == 3 else []
        )
        payloads = [bytes([e % 251]) * rng.choice(sizes) for e in entry_ids]
        checksums = [crc32c.crc32c(p) for p in payloads]
        size_before = by_records.buffered_bytes
        got = by_records.add_records(ledger_ids, entry_ids, lacs, checksums, payloads)
        if got is None:
            declined += 1
            assert by_records.buffered_bytes == size_before  # nothing added
            got = [by_records.add(*record) for record in
                   zip(ledger_ids, entry_ids, lacs, checksums, payloads, strict=True)]  # fmt: skip
        want = [by_one.add(*record) for record in
                zip(ledger_ids, entry_ids, lacs, checksums, payloads, strict=True)]  # fmt: skip
        assert got == want
        for location, payload in zip(got, payloads, strict=True):
            stored = by_records.read_buffered(location)
            assert stored is not None and stored.payload == payload
        if round_ % 50 == 49:
            _checkpoint(by_records)
            _checkpoint(by_one)
    assert declined
    _checkpoint(by_records)
    _checkpoint(by_one)
    assert by_records.log_ids() == by_one.log_ids() and len(by_records.log_ids()) > 1
    for log_id in by_records.log_ids():
        assert by_records.path(log_id).read_bytes() == by_one.path(log_id).read_bytes()
    by_records.close()
    by_one.close()
