"""Runs of adds through :meth:`LedgerHandle.add_run`, against real bookies over both
transports: pieces cover every entry once, ids stay dense and in call order, a refused entry
fails alone, and an ensemble change in the middle of a run re-sends what is unacknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie import Bookie
from magnetar.ledger import EntryTooLarge, LedgerClient, LedgerClientConfig
from magnetar.ledger.handle import LedgerHandle
from magnetar.metadata import MetadataStore, connect

from .test_ledger import start_bookies

Piece = tuple[int, int, int, BaseException | None]


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await connect("memory:")
    yield s
    await s.close()


@pytest.fixture
async def bookies(store: MetadataStore, tmp_path: Path) -> AsyncIterator[list[Bookie]]:
    out = await start_bookies(store, tmp_path, 4)
    yield out
    for b in out:
        await b.stop()


@pytest.fixture(params=["tcp", "local"])
async def client(
    request: pytest.FixtureRequest, store: MetadataStore, bookies: list[Bookie]
) -> AsyncIterator[LedgerClient]:
    c = LedgerClient(
        store,
        config=LedgerClientConfig(entry_size_max_bytes=1000, request_timeout_ms=2000),
        local_bookies=bookies if request.param == "local" else (),
    )
    yield c
    await c.close()


class Run:
    """One ``add_run`` call and the pieces it reported."""

    def __init__(self, handle: LedgerHandle, datas: list[bytes]) -> None:
        self.datas = datas
        self.pieces: list[Piece] = []
        self.done = asyncio.get_running_loop().create_future()
        self._returned = False
        handle.add_run(datas, self._piece)
        self._returned = True

    def _piece(self, offset: int, count: int, first: int, error: BaseException | None) -> None:
        assert self._returned, "a piece was reported inside add_run"
        self.pieces.append((offset, count, first, error))
        if sum(c for _, c, _, _ in self.pieces) == len(self.datas):
            self.done.set_result(None)

    async def outcome(self) -> list[int | BaseException]:
        """Per entry of the run: its entry id or its error."""
        await asyncio.wait_for(self.done, 10)
        out: list[int | BaseException | None] = [None] * len(self.datas)
        for offset, count, first, error in self.pieces:
            for i in range(count):
                assert out[offset + i] is None, "an entry was reported twice"
                out[offset + i] = error if error is not None else first + i
        assert all(o is not None for o in out)
        return [o for o in out if o is not None]


async def test_runs_take_dense_ids_in_call_order_with_one_piece_each(
    client: LedgerClient,
) -> None:
    h = await client.create(2, 2, 2)
    runs = [Run(h, [b"r%d-%d" % (r, i) for i in range(r + 1)]) for r in range(10)]
    single = h.add_nowait(b"single")
    ids = [i for run in runs for i in await run.outcome()]
    assert ids == list(range(55))
    assert await single == 55
    assert all(len(run.pieces) == 1 for run in runs)  # not striped: one request, one answer
    assert h.last_add_confirmed == 55
    assert [e.data for e in await h.read(0, 55)] == [
        *(d for run in runs for d in run.datas),
        b"single",
    ]


async def test_an_entry_too_large_in_the_middle_fails_alone_and_takes_no_id(
    client: LedgerClient,
) -> None:
    h = await client.create(2, 2, 2)
    run = Run(h, [b"a", b"b", b"x" * 1001, b"c", b"x" * 1001, b"d"])
    outcome = await run.outcome()
    assert outcome[:2] == [0, 1] and outcome[3] == 2 and outcome[5] == 3
    assert isinstance(outcome[2], EntryTooLarge) and isinstance(outcome[4], EntryTooLarge)
    assert [e.data for e in await h.read(0, 3)] == [b"a", b"b", b"c", b"d"]
    assert await h.add(b"after") == 4  # the ledger goes on


async def test_a_striped_ledger_splits_runs_into_entries(client: LedgerClient) -> None:
    h = await client.create(3, 2, 2)
    run = Run(h, [b"%d" % i for i in range(9)])
    assert await run.outcome() == list(range(9))
    assert len(run.pieces) == 9
    assert [e.data for e in await h.read(0, 8)] == [b"%d" % i for i in range(9)]


@pytest.mark.parametrize("quorums", [(2, 2, 2), (3, 3, 2)])
async def test_an_ensemble_change_in_the_middle_of_runs_resends_them(
    client: LedgerClient, bookies: list[Bookie], quorums: tuple[int, int, int]
) -> None:
    h = await client.create(*quorums)
    first = Run(h, [b"%d" % i for i in range(100)])
    assert await first.outcome() == list(range(100))
    victim = next(b for b in bookies if b.bookie_id in h.metadata.current_ensemble)
    # Two runs written to the ensemble, not yet durable, when a bookie of it stops; a third
    # added while the ensemble changes.
    runs = [
        Run(h, [b"%d" % i for i in range(100, 200)]),
        Run(h, [b"%d" % i for i in range(200, 250)]),
    ]
    await victim.stop()
    runs.append(Run(h, [b"%d" % i for i in range(250, 300)]))
    assert [i for run in runs for i in await run.outcome()] == list(range(100, 300))
    assert len(h.metadata.ensembles) >= 2
    assert victim.bookie_id not in h.metadata.current_ensemble
    await h.close()
    r = await client.open(h.ledger_id)
    assert r.last_add_confirmed == 299
    assert [e.data for e in await r.read(0, 299)] == [b"%d" % i for i in range(300)]
