"""Crash points of a checkpoint: a SIGKILL before any step of a checkpoint (delta or a
garbage collection's rewrite with compaction), in the middle of any write, or after a step
that failed with ``ENOSPC`` and during the checkpoint that retries it, loses no
acknowledged entry and no fence (see "Crash points of a checkpoint" in docs/storage.md).

How: every file operation of a checkpoint goes through :mod:`magnetar.bookie.file_io`.
The test wraps those functions: before each one it copies the data directory — a SIGKILL
keeps exactly what reached the page cache, so the copy is what a bookie killed at that
instant finds on restart — and for writes and removals it also copies after doing half of
the work. A run may fail the n-th operation with ``ENOSPC``; the bookie then retries the
checkpoint, as it does once the disk has room again. Each copy is then started as a new
bookie (same bookie id) and must serve every entry acknowledged before the copy was taken,
byte for byte, and keep every fence."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pytest

from magnetar.bookie import Bookie, BookieConfig, file_io
from magnetar.bookie.direct_write import BLOCK_BYTES
from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.common.clock import ManualClock
from magnetar.metadata import connect
from magnetar.testing import wait_until_async

from .test_bookie import RawConnection

KEPT_LEDGERS = (0, 1)
DELETED_LEDGER = 2
"""Written, then deleted from the metadata store: garbage collection drops it (a rewrite)."""


@dataclass(frozen=True)
class Snapshot:
    path: Path
    step: str
    acked: dict[tuple[int, int], bytes]
    fenced: frozenset[int]


class CrashPoints:
    """Wraps the checkpoint's file operations (see the module docstring)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, data_dir: Path, out_dir: Path) -> None:
        self.data_dir = data_dir
        self.out_dir = out_dir
        self.acked: dict[tuple[int, int], bytes] = {}
        self.fenced: set[int] = set()
        self.snapshots: list[Snapshot] = []
        self.recording = False
        self.operations = 0
        self.fail_at: int | None = None
        self.failed_step = ""
        for name, half in (
            ("pwritev_all", self._half_pwritev),
            ("write_file_synced", self._half_write),
            ("write_chunks_synced", self._half_chunks),
            ("write_at_synced", self._half_write_at),
            ("fsync_dir", None),
            ("replace", None),
            ("unlink", None),
            ("remove_gradually", self._half_remove),
        ):
            original = getattr(file_io, name)
            monkeypatch.setattr(file_io, name, self._wrap(name, original, half))

    def _wrap(
        self, name: str, original: Callable[..., Any], half: Callable[..., None] | None
    ) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if name == "write_chunks_synced":  # written (half, then whole) more than once
                args = (args[0], [b"".join(args[1])])
            if not self.recording:
                return original(*args, **kwargs)
            n = self.operations
            self.operations += 1
            step = f"{n:03d}-{name}-{_describe(args[0])}"
            self.snapshot(f"{step}-before")
            if half is not None:
                half(original, *args, **kwargs)
                self.snapshot(f"{step}-half-done")
            if n == self.fail_at:
                self.failed_step = step
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            return original(*args, **kwargs)

        return wrapped

    @staticmethod
    def _half_pwritev(
        original: Callable[..., Any], fd: int, bufs: Sequence[bytes], offset: int, **kw: Any
    ) -> None:
        # whole blocks, from the buffer itself (a direct write's length and memory are
        # block-aligned)
        data = memoryview(bufs[0] if len(bufs) == 1 else b"".join(bufs))
        half = len(data) // 2 // BLOCK_BYTES * BLOCK_BYTES
        original(fd, [data[:half]], offset, **kw)

    @staticmethod
    def _half_write(original: Callable[..., Any], path: Path, data: bytes) -> None:
        original(path, data[: len(data) // 2])

    @staticmethod
    def _half_chunks(original: Callable[..., Any], path: Path, chunks: list[bytes]) -> None:
        (data,) = chunks
        original(path, [data[: len(data) // 2]])

    @staticmethod
    def _half_write_at(original: Callable[..., Any], path: Path, data: bytes, offset: int) -> None:
        original(path, data[: len(data) // 2], offset)

    @staticmethod
    def _half_remove(_original: Callable[..., Any], path: Path) -> None:
        if path.exists():
            os.truncate(path, path.stat().st_size // 2)

    def snapshot(self, step: str) -> None:
        target = self.out_dir / step
        shutil.copytree(self.data_dir, target)
        self.snapshots.append(Snapshot(target, step, dict(self.acked), frozenset(self.fenced)))


class Writer:
    """Adds and fences over the bookie protocol, recording what was acknowledged."""

    def __init__(self, conn: RawConnection, points: CrashPoints) -> None:
        self.conn = conn
        self.points = points
        self.rid = 0

    def _next_rid(self) -> int:
        self.rid += 1
        return self.rid

    async def add(self, ledger: int, entry: int, *, recovery: bool = False, tag: str = "") -> None:
        payload = f"{ledger}:{entry}:{tag}:".encode() * 40
        request = Request(
            request_id=self._next_rid(),
            op=OpType.ADD_ENTRY,
            ledger_id=ledger,
            entry_id=entry,
            last_add_confirmed=entry - 1,
            checksum=crc32c.crc32c(payload),
            recovery=recovery,
        )
        resp, _ = await self.conn.call(request, payload)
        assert resp.status == Status.OK, resp.message
        self.points.acked[(ledger, entry)] = payload

    async def fence(self, ledger: int) -> None:
        resp, _ = await self.conn.call(
            Request(request_id=self._next_rid(), op=OpType.FENCE, ledger_id=ledger)
        )
        assert resp.status == Status.OK, resp.message
        self.points.fenced.add(ledger)


def _config(data_dir: Path, port: int) -> BookieConfig:
    never_ms = 3_600_000  # no background checkpoint or collection: the test runs them
    return BookieConfig(
        data_dir=data_dir,
        port=port,
        disk_free_min_bytes=0,
        checkpoint_interval_ms=never_ms,
        disk_check_interval_ms=never_ms,
        gc_interval_ms=never_ms,
        entry_log_size_max_bytes=32 * 1024,  # several logs: compaction and dead logs
        # several journal files: the checkpoint makes one a spare and deletes the others,
        # and later files reuse spares (the copies replay over their old records)
        journal_file_size_max_bytes=16 * 1024,
    )


def _describe(arg: object) -> str:
    return Path(arg).name if isinstance(arg, Path) else "fd"


async def _run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    collect: bool,
    fail_at: int | None,
    direct: bool = False,
) -> tuple[CrashPoints, int]:
    """The scenario: ledger 0 written and checkpointed first (it sits at the start of the
    index), then fenced and re-written by a recovery (its first copies become garbage),
    ledger 1 written and fenced, ledger 2 written and deleted; then the checkpoint under
    test — a plain one, or a garbage collection (rewrite, compaction, dead logs) — with
    its crash points recorded; then adds acknowledged after it (only in the journal).
    ``direct``: the checkpoint under test writes its pieces with ``O_DIRECT``, as one that
    adds waited for does."""
    data_dir = tmp_path / "bookie"
    points = CrashPoints(monkeypatch, data_dir, tmp_path / "crashes")
    points.fail_at = fail_at
    store = await connect("memory:")
    for ledger in KEPT_LEDGERS:
        await store.create(f"/ledgers/L{ledger:010d}", b"")
    bookie = Bookie(_config(data_dir, 0), store)
    await bookie.start()
    conn = await RawConnection.open(bookie.port)
    w = Writer(conn, points)
    try:
        for entry in range(30):
            await w.add(0, entry)
            await w.add(DELETED_LEDGER, entry)
        await bookie.checkpoint()
        await w.fence(0)
        for entry in range(30):
            await w.add(0, entry, recovery=True, tag="recovered")
            await w.add(1, entry)
            await w.add(DELETED_LEDGER, 30 + entry)
        await w.fence(1)
        if direct:
            assert bookie.storage is not None
            bookie.storage.entry_logger.adds_waited = True
        points.recording = True
        try:
            if collect:
                await bookie.collect_garbage()
            else:
                await bookie.checkpoint()
        except OSError:
            assert fail_at is not None, "only an injected failure may fail the checkpoint"
            # The disk has room again: the retry of the disk loop.
            await bookie.checkpoint()
        for entry in range(30, 35):
            await w.add(1, entry, recovery=True)
        points.snapshot(f"{points.operations:03d}-end")
        points.recording = False
    finally:
        conn.close()
        await bookie.stop()
        await store.close()
    return points, bookie.port


async def _check(snapshot: Snapshot, port: int) -> list[str]:
    """Start a bookie on the copy; what it lost (empty: nothing)."""
    bookie = Bookie(_config(snapshot.path, port), None)
    await bookie.start()
    lost: list[str] = []
    conn = await RawConnection.open(bookie.port)
    try:
        rid = 0
        for (ledger, entry), payload in sorted(snapshot.acked.items()):
            if ledger == DELETED_LEDGER:
                continue  # deleted: whether a copy still holds it does not matter
            rid += 1
            resp, got = await conn.call(
                Request(request_id=rid, op=OpType.READ_ENTRY, ledger_id=ledger, entry_id=entry)
            )
            if resp.status != Status.OK or got != payload:
                lost.append(f"entry {ledger}:{entry} ({Status.Name(resp.status)} {resp.message})")
        for ledger in sorted(snapshot.fenced):
            rid += 1
            payload = b"late"
            resp, _ = await conn.call(
                Request(
                    request_id=rid,
                    op=OpType.ADD_ENTRY,
                    ledger_id=ledger,
                    entry_id=1000,
                    checksum=crc32c.crc32c(payload),
                ),
                payload,
            )
            if resp.status != Status.FENCED:
                lost.append(f"fence of ledger {ledger} ({Status.Name(resp.status)})")
    finally:
        conn.close()
        await bookie.stop()
    return lost


async def _check_all(points: CrashPoints, port: int, after: int = 0) -> None:
    problems = []
    for snapshot in points.snapshots[after:]:
        lost = await _check(snapshot, port)
        if lost:
            problems.append(f"killed at {snapshot.step}: lost {len(lost)}: {lost[:3]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("collect", "direct"),
    [(False, False), (True, False), (False, True)],
    ids=["checkpoint", "garbage-collection", "checkpoint-direct"],
)
async def test_a_kill_at_any_step_of_a_checkpoint_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collect: bool, direct: bool
) -> None:
    points, port = await _run(tmp_path, monkeypatch, collect=collect, fail_at=None, direct=direct)
    assert points.operations >= (8 if collect else 5), [s.step for s in points.snapshots]
    await _check_all(points, port)


@pytest.mark.parametrize("collect", [False, True], ids=["checkpoint", "garbage-collection"])
async def test_a_failed_step_then_a_kill_at_any_later_step_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collect: bool
) -> None:
    """Each step of the checkpoint fails in turn (``ENOSPC``); the bookie retries, and a
    kill anywhere from the failure on loses nothing."""
    with monkeypatch.context() as patch:
        clean, _ = await _run(tmp_path / "clean", patch, collect=collect, fail_at=None)
    for fail_at in range(clean.operations):
        run_dir = tmp_path / f"fail-{fail_at:03d}"
        with monkeypatch.context() as patch:
            points, port = await _run(run_dir, patch, collect=collect, fail_at=fail_at)
        assert points.failed_step, f"operation {fail_at} never ran"
        first = next(
            i for i, s in enumerate(points.snapshots) if s.step.startswith(points.failed_step)
        )
        await _check_all(points, port, after=first)
        shutil.rmtree(run_dir)


async def test_a_garbage_collection_whose_checkpoint_fails_logs_one_line_and_turns_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Like a failed checkpoint of the checkpoint loop: an operating error, one log line
    (no traceback), and the bookie read-only until a retried checkpoint works."""
    clock = ManualClock()
    store = await connect("memory:")
    config = _config(tmp_path / "bookie", 0)
    config.gc_interval_ms = 1_000
    config.journal_group_wait_ms = 0  # the journal paces syncs on the (manual) clock
    bookie = Bookie(config, store, clock=clock)
    await bookie.start()
    try:

        def no_space(*_args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(file_io, "write_file_synced", no_space)
        caplog.set_level(logging.ERROR, logger="magnetar.bookie")
        await wait_until_async(lambda: clock.sleepers >= 3, what="the bookie's loops asleep")
        clock.advance(1.0)

        def gc_failures() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "garbage collection failed" in r.getMessage()]

        (record,) = await wait_until_async(gc_failures, what="the collection failing")
        assert record.exc_info is None, "a traceback for an expected operating error"
        assert "No space left on device" in record.getMessage()
        assert bookie.readonly and "checkpoint failed" in (bookie.storage_fault or "")
    finally:
        monkeypatch.undo()
        await bookie.stop()
        await store.close()
