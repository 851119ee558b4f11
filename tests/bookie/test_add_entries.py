"""ADD_ENTRIES on a real bookie over loopback: a run of entries in one request, encoded as
the ledger client encodes it (:meth:`AddRun.frames`), answered once after the journal
sync, stored whole or not at all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import crc32c
import pytest

from magnetar.bookie import Bookie
from magnetar.bookie_protocol.codec import OpType, Request, Response, Status, encode_request
from magnetar.common.clock import SystemClock
from magnetar.ledger.bookie_client import BookiePool
from magnetar.ledger.transport import AddRun

from .test_bookie import RawConnection
from .test_read_entries import read_entries

LEDGER = 7


@pytest.fixture
async def conn(bookie: Bookie) -> AsyncIterator[RawConnection]:
    c = await RawConnection.open(bookie.port)
    yield c
    c.close()


def run_of(first: int, payloads: list[bytes], rid: int = 1, recovery: bool = False) -> AddRun:
    return AddRun(
        rid, LEDGER, first, first - 1, [crc32c.crc32c(p) for p in payloads], payloads, recovery
    )


async def send(conn: RawConnection, run: AddRun) -> tuple[int, str]:
    conn.writer.writelines(run.frames())
    await conn.writer.drain()
    resp, _ = await conn.next()
    assert resp.request_id == run.first_request_id
    return resp.status, resp.message


async def test_a_run_is_one_request_and_one_answer(conn: RawConnection) -> None:
    payloads = [b"%d:" % i + b"x" * (i * 53 % 700) for i in range(40)]
    run = run_of(0, payloads, rid=5)
    conn.writer.writelines(run.frames())
    await conn.writer.drain()
    resp, _ = await conn.next()
    assert (resp.request_id, resp.op, resp.status) == (5, OpType.ADD_ENTRIES, Status.OK)
    assert (resp.entry_id, resp.last_entry_id) == (0, 39)
    assert not conn.buffered  # one answer for the run

    _, stored = await read_entries(conn, 0, 39, ledger=LEDGER)
    assert stored == payloads


async def test_a_run_of_one_is_an_add_entry(conn: RawConnection) -> None:
    run = run_of(0, [b"only"])
    status, _ = await send(conn, run)
    assert status == Status.OK
    resp, body = await conn.call(
        Request(request_id=9, op=OpType.READ_ENTRY, ledger_id=LEDGER, entry_id=0)
    )
    assert (resp.op, resp.status, body) == (OpType.READ_ENTRY, Status.OK, b"only")


async def test_a_refused_entry_stores_none_of_the_run(conn: RawConnection) -> None:
    payloads = [b"a", b"b", b"c", b"d", b"e"]
    run = run_of(0, payloads)
    run.checksums[3] ^= 1  # type: ignore[index]  # a list: the run is not encoded yet
    status, message = await send(conn, run)
    assert status == Status.BAD_REQUEST
    assert "checksum" in message

    resp, _ = await conn.call(
        Request(request_id=9, op=OpType.READ_ENTRY, ledger_id=LEDGER, entry_id=0)
    )
    assert resp.status in (Status.NO_SUCH_LEDGER, Status.NO_SUCH_ENTRY)

    status, _ = await send(conn, run_of(0, payloads, rid=20))  # the connection still serves
    assert status == Status.OK


@pytest.mark.parametrize(
    ("sizes", "checksums", "payload"),
    [
        ([2, 2], [0, 0], b"abc"),  # sizes add up to more than the payload
        ([1, 1], [0], b"ab"),  # a checksum missing
        ([], [], b""),  # no entry at all
    ],
)
async def test_a_run_that_does_not_add_up_is_refused(
    conn: RawConnection, sizes: list[int], checksums: list[int], payload: bytes
) -> None:
    request = Request(
        request_id=3,
        op=OpType.ADD_ENTRIES,
        ledger_id=LEDGER,
        entry_id=0,
        entry_sizes=sizes,
        checksums=checksums,
    )
    resp, _ = await conn.call(request, payload)
    assert resp.status == Status.BAD_REQUEST
    assert "does not add up" in resp.message
    status, _ = await send(conn, run_of(0, [b"x", b"y"], rid=4))
    assert status == Status.OK


async def test_a_fenced_ledger_takes_recovery_runs_only(conn: RawConnection) -> None:
    status, _ = await send(conn, run_of(0, [b"a", b"b"]))
    assert status == Status.OK
    resp, _ = await conn.call(Request(request_id=2, op=OpType.FENCE, ledger_id=LEDGER))
    assert resp.status == Status.OK

    status, _ = await send(conn, run_of(2, [b"c", b"d"], rid=3))
    assert status == Status.FENCED
    status, _ = await send(conn, run_of(2, [b"c", b"d"], rid=5, recovery=True))
    assert status == Status.OK
    _, stored = await read_entries(conn, 0, 3, ledger=LEDGER)
    assert stored == [b"a", b"b", b"c", b"d"]


async def test_an_add_entry_beside_runs_still_works(conn: RawConnection) -> None:
    payload = b"single"
    request = Request(
        request_id=1,
        op=OpType.ADD_ENTRY,
        ledger_id=LEDGER,
        entry_id=0,
        checksum=crc32c.crc32c(payload),
    )
    conn.writer.writelines(encode_request(request, payload))
    conn.writer.writelines(run_of(1, [b"p", b"q"], rid=2).frames())
    await conn.writer.drain()
    first, _ = await conn.next()
    second, _ = await conn.next()
    assert (first.request_id, first.status) == (1, Status.OK)
    assert (second.request_id, second.status) == (2, Status.OK)


async def test_a_bookie_without_add_entries_gets_runs_entry_by_entry(bookie: Bookie) -> None:
    """A bookie of an older version answers ADD_ENTRIES as an unknown operation (what its
    request processor answers any op it does not know): the client sends those runs again
    as ADD_ENTRY requests, and every later run on that connection too, and every run is
    stored and answered once."""
    processor = bookie._parts.processor  # type: ignore[union-attr]
    handle = processor.handle
    seen: list[int] = []

    def as_an_older_bookie(request: Request, payload: bytes, conn: Any, durable: Any) -> None:
        seen.append(request.op)
        if request.op == OpType.ADD_ENTRIES:
            conn.reply(
                Response(
                    request_id=request.request_id,
                    op=request.op,
                    status=Status.BAD_REQUEST,
                    message=f"unknown operation {request.op}",
                    ledger_id=request.ledger_id,
                    entry_id=request.entry_id,
                )
            )
            return
        handle(request, payload, conn, durable)

    processor.handle = as_an_older_bookie
    pool = BookiePool(SystemClock(), request_timeout_ms=10_000)
    try:
        client = await pool.get(bookie.bookie_id)
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[object]] = []
        first = 0
        for count in (3, 4, 5):  # the first two in flight together, the third after
            payloads = [b"entry %d" % i for i in range(first, first + count)]
            run = run_of(first, payloads, rid=pool.next_request_ids(count))
            fut: asyncio.Future[object] = loop.create_future()
            client.add(run, fut.set_result)
            answers.append(fut)
            first += count
            if count == 4:
                assert await asyncio.wait_for(asyncio.gather(*answers), 10) == [None, None]
        assert await asyncio.wait_for(answers[2], 10) is None
    finally:
        await pool.close()

    assert seen.count(OpType.ADD_ENTRIES) == 2  # the third run went entry by entry
    assert seen.count(OpType.ADD_ENTRY) == 12
    conn = await RawConnection.open(bookie.port)
    try:
        _, stored = await read_entries(conn, 0, 11, ledger=LEDGER)
    finally:
        conn.close()
    assert stored == [b"entry %d" % i for i in range(12)]
