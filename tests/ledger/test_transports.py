"""The two bookie transports (TCP ``BookieClient``, in-process ``LocalBookieTransport``)
against one real bookie: same answers and refusals, acknowledgements only for entries the
journal has written and synced, the same failures when the bookie stops or stalls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import crc32c
import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.bookie.entry_log import HEADER_SIZE
from magnetar.bookie.journal import ADD_ENTRY, JournalPosition, replay
from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.bookie_protocol.errors import BookieUnavailable, StatusError
from magnetar.common.clock import SystemClock
from magnetar.common.errors import PersistenceError
from magnetar.ledger.bookie_client import BookiePool
from magnetar.ledger.local_transport import LocalBookieTransport
from magnetar.ledger.transport import AddRun, BookieTransport
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async

Answer = tuple[int | None, str, BaseException | None]


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await connect("memory:")
    yield s
    await s.close()


@pytest.fixture
async def bookie(tmp_path: Path, store: MetadataStore) -> AsyncIterator[Bookie]:
    b = Bookie(
        BookieConfig(
            data_dir=tmp_path / "b", port=0, disk_free_min_bytes=0, entry_size_max_bytes=4096
        ),
        store,
    )
    await b.start()
    yield b
    await b.stop()


@pytest.fixture(params=["tcp", "local"])
async def pool(request: pytest.FixtureRequest, bookie: Bookie) -> AsyncIterator[BookiePool]:
    p = BookiePool(SystemClock(), request_timeout_ms=500)
    if request.param == "local":
        p.add_local(LocalBookieTransport(bookie, SystemClock(), 500))
    yield p
    await p.close()


def add_request(pool: BookiePool, ledger: int, entry: int, payload: bytes, **kw: object) -> AddRun:
    return AddRun(
        pool.next_request_id(),
        ledger,
        entry,
        entry - 1,
        [crc32c.crc32c(payload)],
        [payload],
        **kw,  # type: ignore[arg-type]
    )


def answer_of(error: PersistenceError | None) -> Answer:
    """An add's answer as ``(status, message, error)``: the bookie's status and message
    (OK when stored), or ``(None, "", error)`` when the bookie could not answer."""
    if error is None:
        return Status.OK, "", None
    if isinstance(error, BookieUnavailable):
        return None, "", error
    assert isinstance(error, StatusError), error
    return error.status, str(error), None


async def add(transport: BookieTransport, request: AddRun) -> Answer:
    fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    called_inside = True

    def done(error: PersistenceError | None) -> None:
        assert not called_inside, "callback ran inside add()"
        assert not fut.done(), "callback ran twice"
        fut.set_result(answer_of(error))

    transport.add(request, done)
    called_inside = False
    return await asyncio.wait_for(fut, 10)


def journaled(bookie: Bookie) -> set[tuple[int, int]]:
    return {
        (r.ledger_id, r.entry_id)
        for r in replay(bookie._data_dir / "journal", JournalPosition(0, 0))
        if r.type == ADD_ENTRY
    }


async def test_acks_come_after_the_journal_wrote_and_synced_the_entry(
    pool: BookiePool, bookie: Bookie
) -> None:
    transport = await pool.get(bookie.bookie_id)
    assert bookie.journal is not None
    seen: list[tuple[int, bool, int]] = []
    futs = []
    on_disk: set[tuple[int, int]] = set()  # read back from the journal; only grows

    def is_journaled(entry: int) -> bool:
        # Re-read the journal only when an entry is not yet known on disk: once per sync
        # group rather than once per entry (300 full replays made this test quadratic).
        if (7, entry) not in on_disk:
            on_disk.update(journaled(bookie))
        return (7, entry) in on_disk

    for i in range(300):
        req = add_request(pool, 7, i, b"e%d" % i)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        syncs_before = bookie.journal.syncs

        def done(
            error: PersistenceError | None,
            i: int = i,
            fut: asyncio.Future[None] = fut,
            syncs_before: int = syncs_before,
        ) -> None:
            assert error is None
            assert bookie.journal is not None
            # On disk when acknowledged, and a sync finished after it was appended.
            seen.append((i, is_journaled(i), bookie.journal.syncs - syncs_before))
            fut.set_result(None)

        transport.add(req, done)
        futs.append(fut)
        if i % 50 == 0:
            await asyncio.sleep(0)  # let some groups go to the journal meanwhile
    await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert [i for i, _, _ in seen] == list(range(300))
    assert all(on_disk for _, on_disk, _ in seen)
    assert all(syncs >= 1 for _, _, syncs in seen)


async def test_reads_and_refusals_are_the_same_over_both_transports(
    pool: BookiePool, bookie: Bookie
) -> None:
    transport = await pool.get(bookie.bookie_id)
    assert await add(transport, add_request(pool, 1, 0, b"zero")) == (Status.OK, "", None)
    resp, payload = await pool.call(
        bookie.bookie_id, Request(op=OpType.READ_ENTRY, ledger_id=1, entry_id=0)
    )
    assert (resp.status, payload, resp.checksum) == (Status.OK, b"zero", crc32c.crc32c(b"zero"))
    resp, _ = await pool.call(
        bookie.bookie_id, Request(op=OpType.READ_ENTRY, ledger_id=1, entry_id=5)
    )
    assert (resp.status, resp.message) == (Status.NO_SUCH_ENTRY, "no entry 1:5")
    resp, _ = await pool.call(bookie.bookie_id, Request(op=OpType.READ_LAC, ledger_id=99))
    assert resp.status == Status.NO_SUCH_LEDGER

    bad_crc = AddRun(pool.next_request_id(), 1, 1, 0, [12345], [b"one"])
    assert await add(transport, bad_crc) == (Status.BAD_REQUEST, "payload checksum mismatch", None)
    too_big = add_request(pool, 1, 1, b"x" * 5000)
    assert await add(transport, too_big) == (
        Status.TOO_LARGE,
        "entry of 5000 bytes exceeds 4096",
        None,
    )
    assert await add(transport, add_request(pool, 1, -3, b"neg")) == (
        Status.BAD_REQUEST,
        "bad entry id -3",
        None,
    )

    resp, _ = await pool.call(bookie.bookie_id, Request(op=OpType.FENCE, ledger_id=1))
    assert (resp.status, resp.fenced, resp.last_entry_id) == (Status.OK, True, 0)
    assert await add(transport, add_request(pool, 1, 1, b"late")) == (
        Status.FENCED,
        "ledger 1 is fenced",
        None,
    )
    recovery = add_request(pool, 1, 1, b"recovered", recovery=True)
    assert await add(transport, recovery) == (Status.OK, "", None)

    await bookie.set_readonly(True)
    assert await add(transport, add_request(pool, 2, 0, b"ro")) == (
        Status.READ_ONLY,
        f"bookie {bookie.bookie_id} is read-only",
        None,
    )
    resp, payload = await pool.call(
        bookie.bookie_id, Request(op=OpType.READ_ENTRY, ledger_id=1, entry_id=1)
    )
    assert (resp.status, payload) == (Status.OK, b"recovered")


async def test_only_checksums_a_caller_computed_in_this_process_go_unchecked(
    pool: BookiePool, bookie: Bookie, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose checksums its caller computed from its payloads (a ledger handle's adds)
    is taken by an in-process bookie without computing them again; over TCP, and for any
    other run, the bookie checks every checksum (the journal's replay relies on them)."""
    from magnetar.bookie import request_processor

    computed: list[int] = []

    def counting_crc(data: bytes, value: int = 0) -> int:
        computed.append(len(data))
        return int(crc32c.crc32c(data, value))

    # the bookie's own name for the module (the journal's checksums are not counted)
    monkeypatch.setattr(request_processor, "crc32c", SimpleNamespace(crc32c=counting_crc))
    transport = await pool.get(bookie.bookie_id)
    local = isinstance(transport, LocalBookieTransport)
    payloads = [b"a" * 100, b"b" * 200]
    checksums = [crc32c.crc32c(p) for p in payloads]
    run = AddRun(pool.next_request_ids(2), 30, 0, -1, checksums, payloads, checksums_computed=True)
    assert await add(transport, run) == (Status.OK, "", None)
    assert computed == ([] if local else [100, 200])
    computed.clear()
    assert await add(transport, add_request(pool, 30, 2, b"c" * 300)) == (Status.OK, "", None)
    assert computed == [300]
    bad = AddRun(pool.next_request_id(), 30, 3, 1, [12345], [b"bad"])
    assert await add(transport, bad) == (Status.BAD_REQUEST, "payload checksum mismatch", None)
    for entry, payload in enumerate([*payloads, b"c" * 300]):
        resp, data = await pool.call(
            bookie.bookie_id, Request(op=OpType.READ_ENTRY, ledger_id=30, entry_id=entry)
        )
        assert (resp.status, data, resp.checksum) == (Status.OK, payload, crc32c.crc32c(payload))


async def test_adds_to_many_ledgers_in_one_loop_turn_are_each_answered_as_alone(
    pool: BookiePool, bookie: Bookie
) -> None:
    """The local transport hands one loop turn's runs to the bookie together: each run
    still gets its own answer, a refused one refuses only itself, and what is taken is
    journaled, stored and readable like a run added alone."""
    transport = await pool.get(bookie.bookie_id)
    assert await add(transport, add_request(pool, 20, 0, b"first")) == (Status.OK, "", None)
    resp, _ = await pool.call(bookie.bookie_id, Request(op=OpType.FENCE, ledger_id=20))
    assert resp.status == Status.OK
    payloads = [b"a" * 10, b"b" * 20, b"c" * 30]
    runs = [
        AddRun(pool.next_request_ids(3), 21, 0, -1, [crc32c.crc32c(p) for p in payloads],
               payloads),
        add_request(pool, 20, 1, b"fenced"),
        add_request(pool, 22, 0, b"twenty-two"),
        AddRun(pool.next_request_id(), 23, 0, -1, [12345], [b"bad crc"]),
        add_request(pool, 21, 3, b"d" * 40),
    ]  # fmt: skip
    answers = await asyncio.gather(*(add(transport, run) for run in runs))
    assert answers == [
        (Status.OK, "", None),
        (Status.FENCED, "ledger 20 is fenced", None),
        (Status.OK, "", None),
        (Status.BAD_REQUEST, "payload checksum mismatch", None),
        (Status.OK, "", None),
    ]
    # an empty payload among them (the journal then writes record by record)
    runs = [add_request(pool, 24, 0, b""), add_request(pool, 22, 1, b"x")]
    answers = await asyncio.gather(*(add(transport, run) for run in runs))
    assert answers == [(Status.OK, "", None)] * 2
    stored = {(21, 0): payloads[0], (21, 1): payloads[1], (21, 2): payloads[2],
              (22, 0): b"twenty-two", (21, 3): b"d" * 40, (24, 0): b"", (22, 1): b"x"}  # fmt: skip
    for (ledger, entry), payload in stored.items():
        resp, data = await pool.call(
            bookie.bookie_id, Request(op=OpType.READ_ENTRY, ledger_id=ledger, entry_id=entry)
        )
        assert (resp.status, data, resp.checksum) == (Status.OK, payload, crc32c.crc32c(payload))
    on_disk = journaled(bookie)
    assert set(stored) <= on_disk
    assert (20, 1) not in on_disk and (23, 0) not in on_disk


async def test_a_stopping_bookie_fails_what_is_pending_and_what_follows(
    pool: BookiePool, bookie: Bookie
) -> None:
    transport = await pool.get(bookie.bookie_id)
    answers: list[Answer] = []
    for i in range(50):
        transport.add(add_request(pool, 3, i, b"p"), lambda error: answers.append(answer_of(error)))
    await bookie.stop()
    await asyncio.sleep(0)  # refusals are delivered on a later loop turn
    assert len(answers) == 50
    # Each add is either acknowledged (it was synced) or failed as unavailable.
    for status, _, exc in answers:
        assert status == Status.OK or isinstance(exc, BookieUnavailable)
    assert transport.closed
    assert pool.cached(bookie.bookie_id) is None
    late = await add(transport, add_request(pool, 3, 50, b"late"))
    assert late[0] is None and isinstance(late[2], BookieUnavailable)
    with pytest.raises(BookieUnavailable):
        await pool.get(bookie.bookie_id)


async def test_a_stalled_journal_times_requests_out(pool: BookiePool, bookie: Bookie) -> None:
    transport = await pool.get(bookie.bookie_id)
    assert bookie.journal is not None and bookie.journal._task is not None
    # The disk stops answering: the flusher never syncs again.
    bookie.journal._task.cancel()
    status, _, exc = await add(transport, add_request(pool, 4, 0, b"stuck"))
    assert status is None and isinstance(exc, BookieUnavailable)
    assert "timed out" in str(exc)
    assert transport.in_flight == 0


async def test_local_transport_needs_a_serving_bookie(tmp_path: Path) -> None:
    b = Bookie(BookieConfig(data_dir=tmp_path / "x", port=0, disk_free_min_bytes=0), None)
    with pytest.raises(BookieUnavailable):
        LocalBookieTransport(b, SystemClock(), 1000)


@contextlib.asynccontextmanager
async def _small_write_cache_bookie(
    tmp_path: Path, store: MetadataStore, cache_bytes: int
) -> AsyncIterator[tuple[Bookie, LocalBookieTransport, BookiePool]]:
    """A started bookie with a write cache of ``cache_bytes`` and no timed checkpoints (only
    a full cache starts one), its in-process transport and a pool to build requests with."""
    b = Bookie(
        BookieConfig(
            data_dir=tmp_path / "b",
            port=0,
            disk_free_min_bytes=0,
            entry_size_max_bytes=8192,
            write_cache_max_bytes=cache_bytes,
            checkpoint_interval_ms=600_000,
        ),
        store,
    )
    await b.start()
    transport = LocalBookieTransport(b, SystemClock(), 30_000)
    try:
        yield b, transport, BookiePool(SystemClock(), request_timeout_ms=30_000)
    finally:
        transport.close()
        await b.stop()


async def test_checkpoints_are_behind_from_a_cache_filled_again_while_one_writes(
    tmp_path: Path, store: MetadataStore
) -> None:
    """Past the write cache while a checkpoint still writes (before any add waits for
    room), the checkpoints are behind: the entry logs are synced in bigger pieces until a
    checkpoint ends with less than the cache buffered."""
    cache_bytes = 16 * 1024
    payload = b"p" * 4000
    async with _small_write_cache_bookie(tmp_path, store, cache_bytes) as (b, transport, pool):
        storage = b.storage
        assert storage is not None
        logger = storage.entry_logger
        entry = 0
        while logger.buffered_bytes <= cache_bytes // 2:  # no checkpoint wanted yet
            assert (await add(transport, add_request(pool, 1, entry, payload)))[0] == 0
            entry += 1
        assert not logger.behind
        async with b.checkpointer.lock:  # a checkpoint still writing (a slow disk)
            while logger.buffered_bytes <= cache_bytes:
                assert not logger.behind
                assert (await add(transport, add_request(pool, 1, entry, payload)))[0] == 0
                entry += 1
            assert logger.behind and not b.checkpointer.write_cache_full
        await wait_until_async(lambda: not logger.behind, 30, what="a checkpoint caught up")
        assert logger.buffered_bytes <= cache_bytes


async def test_local_acks_wait_for_the_checkpoint_once_the_write_cache_is_full(
    tmp_path: Path, store: MetadataStore
) -> None:
    """Adds go on while a checkpoint writes; past a quarter more than the write cache, the
    in-process transport acknowledges only once that checkpoint ends, so the callers' windows
    stop further adds (the write buffers grew without bound while a slow checkpoint ran).
    While adds wait, the entry logs are written in the bigger pieces of a checkpoint that is
    behind."""
    cache_bytes = 16 * 1024
    payload = b"p" * 4000
    async with _small_write_cache_bookie(tmp_path, store, cache_bytes) as (b, transport, pool):
        async with b.checkpointer.lock:  # a checkpoint that cannot write yet (a slow disk)
            storage = b.storage
            assert storage is not None
            entry = 0  # acknowledged at once up to a quarter more than the cache
            full_bytes = b.checkpointer.write_cache_full_bytes
            assert full_bytes == cache_bytes * 5 // 4
            while storage.entry_logger.buffered_bytes + HEADER_SIZE + len(payload) <= full_bytes:
                assert (await add(transport, add_request(pool, 1, entry, payload)))[0] == 0
                entry += 1
            assert (
                not b.checkpointer.write_cache_full
                and entry > full_bytes // (len(payload) + HEADER_SIZE) - 1
            )
            answers: list[int | None] = []
            transport.add(
                add_request(pool, 1, entry, payload),
                lambda error: answers.append(answer_of(error)[0]),
            )
            synced = asyncio.Event()
            journal = b.journal
            assert journal is not None
            journal.on_durable(synced.set)  # after the transport's own callback of that sync
            await asyncio.wait_for(synced.wait(), 30)
            assert b.checkpointer.write_cache_full
            assert answers == []  # in the journal, not acknowledged while the cache is full
            assert storage.entry_logger.behind
        await wait_until_async(lambda: answers == [0], 30, what="the add acknowledged")
        assert not b.checkpointer.write_cache_full
        assert not storage.entry_logger.behind
