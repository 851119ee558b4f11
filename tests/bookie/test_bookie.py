"""A real bookie on loopback (in-process, embedded metadata store): typed errors for bad
input, fencing, read-only mode, cookies, registration, restart from a checkpoint."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import crc32c
import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.bookie.errors import CookieMismatch
from magnetar.bookie_protocol.codec import (
    OpType,
    Request,
    Response,
    ResponseDecoder,
    Status,
    encode_request,
)
from magnetar.metadata import MetadataStore, connect


class RawConnection:
    """A bare protocol connection, to send exactly what a test wants."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = ResponseDecoder()
        self.buffered: list[tuple[Response, bytes]] = []

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def call(self, request: Request, payload: bytes = b"") -> tuple[Response, bytes]:
        self.writer.writelines(encode_request(request, payload))
        await self.writer.drain()
        return await self.next()

    async def next(self) -> tuple[Response, bytes]:
        while not self.buffered:
            data = await asyncio.wait_for(self.reader.read(65536), 10)
            if not data:
                raise ConnectionError("closed")
            self.buffered.extend(self.decoder.feed(data))
        return self.buffered.pop(0)

    def close(self) -> None:
        self.writer.close()


def add(
    ledger: int, entry: int, payload: bytes, rid: int = 1, **kw: object
) -> tuple[Request, bytes]:
    return Request(
        request_id=rid,
        op=OpType.ADD_ENTRY,
        ledger_id=ledger,
        entry_id=entry,
        checksum=crc32c.crc32c(payload),
        **kw,  # type: ignore[arg-type]
    ), payload


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


async def test_add_read_and_registration(bookie: Bookie, store: MetadataStore) -> None:
    assert bookie.bookie_id in await store.children("/ledgers/available")
    conn = await RawConnection.open(bookie.port)
    resp, _ = await conn.call(*add(5, 0, b"hello", last_add_confirmed=-1))
    assert resp.status == Status.OK
    resp, payload = await conn.call(
        Request(request_id=2, op=OpType.READ_ENTRY, ledger_id=5, entry_id=0)
    )
    assert (resp.status, payload, resp.checksum) == (Status.OK, b"hello", crc32c.crc32c(b"hello"))
    resp, _ = await conn.call(*add(5, 1, b"world", rid=3, last_add_confirmed=0))
    resp, _ = await conn.call(Request(request_id=4, op=OpType.READ_LAC, ledger_id=5))
    assert resp.last_add_confirmed == 0
    conn.close()


async def test_bad_input_gets_typed_errors_and_other_connections_survive(bookie: Bookie) -> None:
    good = await RawConnection.open(bookie.port)
    bad = await RawConnection.open(bookie.port)
    resp, _ = await bad.call(Request(request_id=1, op=OpType.READ_ENTRY, ledger_id=99, entry_id=0))
    assert resp.status == Status.NO_SUCH_LEDGER
    resp, _ = await bad.call(*add(1, 0, b"z" * 5000))
    assert resp.status == Status.TOO_LARGE
    resp, _ = await bad.call(
        Request(request_id=2, op=OpType.ADD_ENTRY, ledger_id=1, entry_id=0, checksum=1), b"abc"
    )
    assert resp.status == Status.BAD_REQUEST
    resp, _ = await bad.call(Request(request_id=3, op=77))  # type: ignore[arg-type]
    assert resp.status == Status.BAD_REQUEST
    resp, _ = await good.call(*add(1, 0, b"ok"))
    resp, _ = await bad.call(Request(request_id=4, op=OpType.READ_ENTRY, ledger_id=1, entry_id=9))
    assert resp.status == Status.NO_SUCH_ENTRY
    # Garbage bytes: that connection is closed, the other one keeps working.
    bad.writer.write((12).to_bytes(4, "big") + (8).to_bytes(4, "big") + b"\xff" * 8)
    with pytest.raises(ConnectionError):
        await bad.next()
    # An oversized frame announcement: same.
    bad2 = await RawConnection.open(bookie.port)
    bad2.writer.write((1 << 30).to_bytes(4, "big") + (4).to_bytes(4, "big"))
    with pytest.raises(ConnectionError):
        await bad2.next()
    resp, payload = await good.call(
        Request(request_id=5, op=OpType.READ_ENTRY, ledger_id=1, entry_id=0)
    )
    assert (resp.status, payload) == (Status.OK, b"ok")
    good.close()


async def test_fencing_rejects_old_writer_but_not_recovery_adds(
    tmp_path: Path, store: MetadataStore
) -> None:
    cfg = BookieConfig(data_dir=tmp_path / "f", port=0, disk_free_min_bytes=0)
    b = Bookie(cfg, store)
    await b.start()
    conn = await RawConnection.open(b.port)
    await conn.call(*add(8, 0, b"a"))
    await conn.call(*add(8, 1, b"b", rid=2, last_add_confirmed=0))
    resp, _ = await conn.call(Request(request_id=3, op=OpType.FENCE, ledger_id=8))
    assert resp.status == Status.OK and resp.fenced and resp.last_add_confirmed == 0
    resp, _ = await conn.call(*add(8, 2, b"c", rid=4))
    assert resp.status == Status.FENCED
    resp, _ = await conn.call(*add(8, 2, b"c", rid=5, recovery=True))
    assert resp.status == Status.OK
    conn.close()
    await b.stop()
    # The fence survives a restart.
    b2 = Bookie(BookieConfig(data_dir=tmp_path / "f", port=b.port, disk_free_min_bytes=0), store)
    await b2.start()
    conn = await RawConnection.open(b2.port)
    resp, _ = await conn.call(*add(8, 3, b"d", rid=6))
    assert resp.status == Status.FENCED
    resp, payload = await conn.call(
        Request(request_id=7, op=OpType.READ_ENTRY, ledger_id=8, entry_id=2)
    )
    assert payload == b"c"
    conn.close()
    await b2.stop()


async def test_read_only_mode_rejects_adds_and_serves_reads(
    bookie: Bookie, store: MetadataStore
) -> None:
    conn = await RawConnection.open(bookie.port)
    await conn.call(*add(3, 0, b"kept"))
    await bookie.set_readonly(True)
    assert bookie.bookie_id in await store.children("/ledgers/available/readonly")
    assert bookie.bookie_id not in await store.children("/ledgers/available")
    resp, _ = await conn.call(*add(3, 1, b"no", rid=2))
    assert resp.status == Status.READ_ONLY
    resp, payload = await conn.call(
        Request(request_id=3, op=OpType.READ_ENTRY, ledger_id=3, entry_id=0)
    )
    assert payload == b"kept"
    await bookie.set_readonly(False)
    assert bookie.bookie_id in await store.children("/ledgers/available")
    conn.close()


async def test_low_disk_turns_the_bookie_read_only(tmp_path: Path, store: MetadataStore) -> None:
    b = Bookie(BookieConfig(data_dir=tmp_path / "full", port=0, disk_free_min_bytes=1 << 62), store)
    await b.start()
    try:
        assert b.readonly
        assert b.bookie_id in await store.children("/ledgers/available/readonly")
    finally:
        await b.stop()


async def test_cookie_mismatch_refuses_to_start(tmp_path: Path, store: MetadataStore) -> None:
    b = Bookie(BookieConfig(data_dir=tmp_path / "c", port=0, disk_free_min_bytes=0), store)
    await b.start()
    await b.stop()
    cookie = json.loads((tmp_path / "c" / "cookie").read_text())
    assert cookie["bookie_id"] == b.bookie_id
    # Same data dir, another bookie id (port): refused.
    other = Bookie(BookieConfig(data_dir=tmp_path / "c", port=0, disk_free_min_bytes=0), store)
    with pytest.raises(CookieMismatch):
        await other.start()
    await other.stop()
    # Same bookie id, a fresh data dir: refused too (the registered cookie names another).
    fresh = Bookie(BookieConfig(data_dir=tmp_path / "d", port=b.port, disk_free_min_bytes=0), store)
    with pytest.raises(CookieMismatch):
        await fresh.start()
    await fresh.stop()


async def test_a_bookie_that_refuses_to_start_holds_nothing(
    tmp_path: Path, store: MetadataStore
) -> None:
    """A start that fails (here on the cookie) closes what it opened: the port is free again
    without a stop(), the bookie is not serving, and stop() after it returns at once."""
    b = Bookie(BookieConfig(data_dir=tmp_path / "c", port=0, disk_free_min_bytes=0), store)
    await b.start()
    await b.stop()
    other = Bookie(BookieConfig(data_dir=tmp_path / "c", port=0, disk_free_min_bytes=0), store)
    with pytest.raises(CookieMismatch):
        await other.start()
    assert other.port != 0 and not other.serving
    with socket.socket() as s:
        s.bind(("127.0.0.1", other.port))
    await other.stop()
    assert other.storage is None and other.write_problem() is None
