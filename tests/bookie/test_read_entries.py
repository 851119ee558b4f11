"""READ_ENTRIES on a real bookie over loopback: a run of entries in one response, from the
write buffers, from the entry logs or both, bounded by the bytes and entry count asked for
and ending at the first entry the bookie does not hold."""

from __future__ import annotations

import crc32c

from magnetar.bookie import Bookie
from magnetar.bookie.request_processor import READ_ENTRIES_MAX
from magnetar.bookie_protocol.codec import OpType, Request, Response, Status, encode_request

from .test_bookie import RawConnection, add

LEDGER = 7


def body(entry_id: int) -> bytes:
    """Entry bodies of different sizes (2 to about 3 000 bytes), each telling its id."""
    return b"%d:" % entry_id + b"x" * (entry_id * 37 % 3000)


async def store_entries(conn: RawConnection, first: int, last: int) -> None:
    """Adds ``first..last`` pipelined, then waits for every acknowledgement."""
    for entry_id in range(first, last + 1):
        conn.writer.writelines(
            encode_request(*add(LEDGER, entry_id, body(entry_id), rid=entry_id + 1))
        )
    await conn.writer.drain()
    for _ in range(first, last + 1):
        resp, _ = await conn.next()
        assert resp.status == Status.OK, resp.message


async def read_entries(
    conn: RawConnection,
    first: int,
    last: int,
    max_bytes: int = 1 << 20,
    ledger: int = LEDGER,
    stride: int = 0,
) -> tuple[Response, list[bytes]]:
    resp, payload = await conn.call(
        Request(
            request_id=10**6,
            op=OpType.READ_ENTRIES,
            ledger_id=ledger,
            entry_id=first,
            last_entry_id=last,
            max_bytes=max_bytes,
            stride=stride,
        )
    )
    assert len(resp.entry_sizes) == len(resp.checksums)
    assert sum(resp.entry_sizes) == len(payload)
    out: list[bytes] = []
    at = 0
    for size, checksum in zip(resp.entry_sizes, resp.checksums, strict=True):
        out.append(payload[at : at + size])
        assert crc32c.crc32c(out[-1]) == checksum
        at += size
    return resp, out


async def test_a_run_from_buffers_files_and_both(bookie: Bookie) -> None:
    conn = await RawConnection.open(bookie.port)
    await store_entries(conn, 0, 199)
    resp, got = await read_entries(conn, 0, 199)
    assert (resp.status, resp.entry_id) == (Status.OK, 0)
    assert got == [body(i) for i in range(200)]
    # Entry logs written and the write buffers released: the run comes from the files.
    await bookie.checkpoint()
    assert bookie.storage is not None
    assert all(
        bookie.storage.read_buffered(loc) is None
        for loc in (bookie.storage.ledgers[LEDGER].entries.get(i) for i in range(200))
        if loc is not None
    )
    resp, got = await read_entries(conn, 10, 150)
    assert got == [body(i) for i in range(10, 151)]
    # Older entries in files, newer ones still buffered: one run across both.
    await store_entries(conn, 200, 260)
    resp, got = await read_entries(conn, 150, 260)
    assert got == [body(i) for i in range(150, 261)]
    conn.close()


async def test_a_run_with_a_stride_takes_every_nth_entry(bookie: Bookie) -> None:
    conn = await RawConnection.open(bookie.port)
    await store_entries(conn, 0, 99)
    _, got = await read_entries(conn, 2, 99, stride=3)
    assert got == [body(i) for i in range(2, 100, 3)]
    _, got = await read_entries(conn, 2, 97, stride=3)  # the last one on the stride
    assert got == [body(i) for i in range(2, 98, 3)]
    _, got = await read_entries(conn, 98, 200, stride=3)  # ends at the first one not stored
    assert got == [body(98)]
    _, got = await read_entries(conn, 5, 5, stride=7)
    assert got == [body(5)]
    conn.close()


async def test_a_run_ends_at_the_byte_bound_but_never_empty(bookie: Bookie) -> None:
    conn = await RawConnection.open(bookie.port)
    await store_entries(conn, 0, 99)
    _, got = await read_entries(conn, 50, 99, max_bytes=0)
    assert got == [body(50)]
    two = len(body(50)) + len(body(51))
    _, got = await read_entries(conn, 50, 99, max_bytes=two)
    assert got == [body(50), body(51)]
    _, got = await read_entries(conn, 50, 99, max_bytes=two - 1)
    assert got == [body(50)]
    await bookie.checkpoint()  # the same bound when the entries are read from a file
    _, got = await read_entries(conn, 50, 99, max_bytes=two)
    assert got == [body(50), body(51)]
    conn.close()


async def test_a_run_ends_at_the_first_entry_not_stored(bookie: Bookie) -> None:
    conn = await RawConnection.open(bookie.port)
    await store_entries(conn, 0, 19)
    resp, got = await read_entries(conn, 15, 40)
    assert (resp.status, got) == (Status.OK, [body(i) for i in range(15, 20)])
    resp, got = await read_entries(conn, 20, 40)
    assert (resp.status, got) == (Status.NO_SUCH_ENTRY, [])
    resp, got = await read_entries(conn, 0, 5, ledger=LEDGER + 1)
    assert (resp.status, got) == (Status.NO_SUCH_LEDGER, [])
    resp, got = await read_entries(conn, 5, 4)
    assert (resp.status, got) == (Status.BAD_REQUEST, [])
    # The connection still serves.
    _, got = await read_entries(conn, 0, 0)
    assert got == [body(0)]
    conn.close()


async def test_a_run_holds_at_most_the_bookies_entry_count(bookie: Bookie) -> None:
    conn = await RawConnection.open(bookie.port)
    await store_entries(conn, 0, READ_ENTRIES_MAX + 99)
    _, got = await read_entries(conn, 0, READ_ENTRIES_MAX + 99, max_bytes=1 << 30)
    assert len(got) == READ_ENTRIES_MAX
    assert got[-1] == body(READ_ENTRIES_MAX - 1)
    conn.close()
