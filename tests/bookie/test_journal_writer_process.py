"""The journal's writer process (:mod:`magnetar.bookie.journal_writer`): it lives as long
as its journal, a dead one fails only what it had not answered and is replaced by the next
write, and it ends by itself when its bookie is killed."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import crc32c
import pytest

from magnetar.bookie import journal
from magnetar.bookie.journal import ADD_ENTRY, Journal, JournalPosition, replay
from magnetar.common.clock import SystemClock
from magnetar.testing import wait_until, wait_until_async


def _add(j: Journal, entry: int, size: int = 0) -> None:
    payload = b"w%d" % entry + bytes(size)
    j.append(ADD_ENTRY, 1, entry, entry - 1, crc32c.crc32c(payload), payload)


async def _sync(j: Journal) -> BaseException | None:
    outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    j.on_durable(lambda: outcome.set_result(None), outcome.set_result)
    return await asyncio.wait_for(outcome, 10)


async def _started(path: Path, **kw: Any) -> tuple[Journal, int]:
    """A started journal whose writer process runs (after one synced record)."""
    j = Journal(path, clock=SystemClock(), **kw)
    j.start()
    _add(j, 0)
    assert await _sync(j) is None
    pid = j.writer_pid
    assert pid is not None
    return j, pid


def _alive(pid: int) -> bool:
    """Running (a zombie left for an init that does not reap counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_the_writer_process_ends_with_its_journal(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", clock=SystemClock())
    j.start()
    assert j.writer_pid is None  # started by the first write
    _add(j, 0)
    assert await _sync(j) is None
    pid = j.writer_pid
    assert pid is not None and _alive(pid)
    await j.close()
    assert j.writer_pid is None
    assert not _alive(pid)  # reaped, not a zombie


@pytest.mark.parametrize("size", [0, 300 * 1024], ids=["down-the-pipe", "in-the-ring"])
async def test_a_killed_writer_fails_what_it_had_and_the_next_write_starts_another(
    tmp_path: Path, size: int
) -> None:
    failures: list[BaseException] = []
    j, first = await _started(tmp_path / "j", on_write_failure=failures.append)
    try:
        os.kill(first, signal.SIGSTOP)  # holds the next batch unanswered
        taken = j.groups_taken
        _add(j, 1, size)
        pending = asyncio.ensure_future(_sync(j))
        # Handed to the stopped writer (down its pipe), and not answered.
        await wait_until_async(lambda: j.groups_taken > taken, 10, what="the batch handed over")
        assert not pending.done()
        os.kill(first, signal.SIGKILL)
        error = await pending
        assert isinstance(error, OSError) and "journal writer process exited" in str(error)
        assert failures == [error] and j.failed is error
        _add(j, 2, size)
        assert await _sync(j) is None
        assert j.failed is None
        assert j.writer_pid not in (None, first)
    finally:
        await j.close()
    # Entry 1 was never acknowledged; 0 and 2 replay.
    assert [r.entry_id for r in replay(tmp_path / "j", JournalPosition(0, 0))] == [0, 2]


async def test_the_writer_ignores_an_interrupt_meant_for_the_terminal(tmp_path: Path) -> None:
    j, pid = await _started(tmp_path / "j")
    try:
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        _add(j, 1)
        assert await _sync(j) is None
        assert j.writer_pid == pid
    finally:
        await j.close()


def test_the_writer_of_a_killed_bookie_ends_by_itself(tmp_path: Path) -> None:
    """SIGKILL the process that owns the journal: its writer reads the end of its input
    and exits (nothing to reap it: it is re-parented, so look for it gone)."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        import crc32c
        from magnetar.bookie.journal import ADD_ENTRY, Journal
        from magnetar.common.clock import SystemClock

        async def main():
            j = Journal(__import__("pathlib").Path({str(tmp_path / "j")!r}), clock=SystemClock())
            j.start()
            done = asyncio.get_running_loop().create_future()
            j.append(ADD_ENTRY, 1, 0, -1, crc32c.crc32c(b"x"), b"x")
            j.on_durable(lambda: done.set_result(None))
            await done
            print(j.writer_pid, flush=True)
            await asyncio.Event().wait()  # until killed

        asyncio.run(main())
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert owner.stdout is not None
        writer = int(owner.stdout.readline())
        assert _alive(writer)
    finally:
        owner.kill()
        owner.wait()
    wait_until(lambda: not _alive(writer), timeout_s=10, what="the writer process gone")


HELD_OUT_OF_THE_WRITER = ("typing", "contextlib", "signal", "enum", "collections", "functools")
"""Modules the writer process does without: each would be resident memory it holds for the
life of its bookie (together about 1.5 MB)."""


def test_the_writer_process_imports_no_module_that_loads_others() -> None:
    from magnetar.bookie import journal_writer

    path = journal_writer.__file__
    code = (  # as the process starts (-I -S), importing nothing else to look
        "import sys\n"
        f"exec(compile(open({path!r}).read(), {path!r}, 'exec'), {{'__name__': 'w'}})\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(done.stdout.split())
    assert "_signal" in loaded
    assert sorted(loaded & set(HELD_OUT_OF_THE_WRITER)) == []


def test_the_writer_fills_zeros_around_a_request_never_under_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Records are written over whatever is under them in the same sync: zeros there are
    work for nothing (a request past the fill's size wrote all of itself twice). A small
    request that outruns the fill fills one piece past its records (here ``prealloc``, the
    smaller); a request of a piece or more fills nothing (zeros ahead of it doubled what
    its sync wrote); a gap before the records is filled."""
    from magnetar.bookie import journal_writer

    filled: list[tuple[int, int]] = []
    real_fill = journal_writer.zero_fill

    def recording_fill(fd: int, start: int, end: int) -> int:
        filled.append((start, end))
        return real_fill(fd, start, end)

    monkeypatch.setattr(journal_writer, "zero_fill", recording_fill)
    piece = 64 * 1024
    writer = journal_writer.Writer(str(tmp_path), 1 << 30, piece)
    path = Path(journal_writer.journal_path(str(tmp_path), 1))

    def request(offset: int, data: bytes) -> None:
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)  # the whole request fits
            os.write(w, data)
            assert writer.write(r, 1, offset, len(data)) is None
        finally:
            os.close(r)
            os.close(w)

    small, mid = b"s" * 1000, b"m" * 50_000
    request(0, small)  # outruns the (empty) fill: a piece of zeros after it
    assert filled == [(1000, 1000 + piece)]
    request(1000, mid)  # inside the fill: nothing to do
    assert len(filled) == 1
    request(51_000, mid)  # past the fill's end: zeros only past the records
    assert filled[1:] == [(101_000, 101_000 + piece)]
    big = b"b" * journal_writer.PIECE_BYTES
    request(101_000, big)  # a piece or more: no zeros at all, the file grows with it
    assert len(filled) == 2
    big_end = 101_000 + len(big)
    assert writer.allocated[1] == big_end
    request(big_end + 9000, small)  # a gap before the records (not made by the journal)
    assert filled[2:] == [(big_end, big_end + 9000), (big_end + 10_000, big_end + 10_000 + piece)]
    data = path.read_bytes()
    assert data[:1000] == small and data[1000:101_000] == mid * 2
    assert data[101_000:big_end] == big and data[big_end : big_end + 9000] == bytes(9000)
    assert data[big_end + 9000 : big_end + 10_000] == small
    assert data[big_end + 10_000 :] == bytes(piece)
    for fd in writer.fds.values():
        os.close(fd)


@pytest.mark.parametrize(
    ("payload_bytes", "run"),
    [(48 * 1024, 24), (12 * 1024, 64)],
    ids=["records-as-buffers", "runs-encoded-where-they-go"],
)
async def test_big_batches_go_through_the_shared_ring_and_replay_byte_for_byte(
    tmp_path: Path, monkeypatch: Any, payload_bytes: int, run: int
) -> None:
    """Batches bigger than the pipe's share (batched publishing) are copied into the
    shared ring, several in flight, round it more than once and across a journal file's
    end; small ones still go down the pipe between them. Every record replays as
    written: big payloads appended one by one (headers and payloads as they are), and runs
    of payloads small enough for the compiled encoder (encoded into the ring, or into bytes
    for the pipe)."""
    from magnetar.bookie import journal_process

    taken: list[int | None] = []
    real_take = journal_process.WriterProcess._ring_take

    def recording_take(self: journal_process.WriterProcess, size: int) -> int | None:
        at = real_take(self, size)
        taken.append(at)
        return at

    monkeypatch.setattr(journal_process.WriterProcess, "_ring_take", recording_take)
    encoded: list[str] = []
    for name in ("encode", "encode_into"):
        real = getattr(journal_process.RecordRun, name)

        def recording(self: Any, *args: Any, real: Any = real, name: str = name) -> Any:
            encoded.append(name)
            return real(self, *args)

        monkeypatch.setattr(journal_process.RecordRun, name, recording)
    j = Journal(tmp_path / "j", clock=SystemClock(), file_size_max_bytes=16 * 1024 * 1024)
    j.start()
    written: dict[int, bytes] = {}
    syncs = []
    entry = 0
    try:
        for batch in range(30):
            count = 3 if batch % 5 == 4 else run  # a small batch now and then
            payloads = [os.urandom(payload_bytes + (entry + i) % 977) for i in range(count)]
            checksums = list(map(crc32c.crc32c, payloads))
            if payload_bytes > journal.COPY_MAX_BYTES:
                for i, payload in enumerate(payloads):
                    j.append(ADD_ENTRY, 1, entry + i, entry + i - 1, checksums[i], payload)
            else:
                j.append_many(ADD_ENTRY, 1, entry, entry - 1, checksums, payloads)
            written.update(zip(range(entry, entry + count), payloads, strict=True))
            entry += count
            syncs.append(asyncio.ensure_future(_sync(j)))
            await asyncio.sleep(0)  # handed over: a batch each, up to three unanswered
            if batch % 3 == 2:
                assert await asyncio.gather(*syncs) == [None] * len(syncs)
                syncs.clear()
        assert await asyncio.gather(*syncs) == [None] * len(syncs)
    finally:
        await j.close()
    placed = [at for at in taken if at is not None]
    assert len(placed) >= 15 and placed.count(0) >= 2, taken  # in the ring, round it
    if payload_bytes <= journal.COPY_MAX_BYTES:
        assert "encode_into" in encoded and "encode" in encoded  # the ring's, the pipe's
    else:
        assert not encoded
    replayed = {r.entry_id: r.payload for r in replay(tmp_path / "j", JournalPosition(0, 0))}
    assert replayed == written
    assert len(list((tmp_path / "j").glob("*.jnl"))) >= 2


def test_the_ring_places_a_batch_after_the_newest_never_over_one_unanswered() -> None:
    from magnetar.bookie.journal_process import RING_BYTES, WriterProcess

    writer = WriterProcess(Path("/nonexistent"), 1 << 20, 1 << 20)
    writer._ring = memoryview(bytearray(0))  # only its presence counts here
    spans = writer._ring_spans
    mib = 1024 * 1024
    assert writer._ring_take(RING_BYTES + 1) is None
    assert writer._ring_take(RING_BYTES) == 0  # empty: from the start
    spans.extend([(2 * mib, 5 * mib)])
    assert writer._ring_take(3 * mib) == 5 * mib  # after the newest
    assert writer._ring_take(mib) == 5 * mib
    assert writer._ring_take(RING_BYTES - 5 * mib + 1) is None  # nor before the oldest
    spans.append((5 * mib, RING_BYTES))  # up to the end: round to the start
    assert writer._ring_take(mib) == 0
    assert writer._ring_take(2 * mib) is None  # would reach the oldest
    spans.append((0, mib))  # wrapped: between the newest and the oldest
    assert writer._ring_take(mib - 1) == mib
    assert writer._ring_take(mib) is None
    spans.popleft()  # the oldest answered: the next oldest starts at 5 MiB
    assert writer._ring_take(4 * mib - 1) == mib
    assert writer._ring_take(4 * mib) is None


@pytest.mark.parametrize("payload_bytes", [100, 12 * 1024], ids=["down-the-pipe", "in-the-ring"])
async def test_a_run_that_cannot_be_encoded_fails_its_batch_and_the_journal_goes_on(
    tmp_path: Path, payload_bytes: int
) -> None:
    """Runs are encoded only when their batch is handed to the writer: one that cannot be
    (a checksum wider than 32 bits) fails that batch's syncs like a failed write, and the
    writer's books stay right for the batches after it, in the ring and down the pipe."""
    failures: list[BaseException] = []
    j, pid = await _started(tmp_path / "j", on_write_failure=failures.append)
    try:
        payloads = [os.urandom(payload_bytes) for _ in range(30)]
        checksums = list(map(crc32c.crc32c, payloads))
        checksums[7] = 1 << 40
        j.append_many(ADD_ENTRY, 1, 1, 0, checksums, payloads)
        error = await _sync(j)
        assert isinstance(error, OverflowError), error
        assert failures == [error]
        for first in (1, 31):  # the same entries again, then more: each batch answered
            good = [os.urandom(payload_bytes) for _ in range(30)]
            j.append_many(ADD_ENTRY, 1, first, 0, list(map(crc32c.crc32c, good)), good)
            assert await _sync(j) is None
        assert j.writer_pid == pid
    finally:
        await j.close()
    replayed = [r.entry_id for r in replay(tmp_path / "j", JournalPosition(0, 0))]
    assert replayed == [0, *range(1, 61)]
