"""Runs of appends (:meth:`ManagedLedger.add_run`, the broker's publish path) over real
bookies: pieces cover every entry once, in order, positions dense; a run crossing a ledger's
limit is split at the rollover; one passing ``pending_adds_max`` goes on entry by entry;
an entry the storage can never take fails alone at its place."""

from __future__ import annotations

import asyncio

from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.errors import EntryTooLargeForStorage
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage

from .conftest import Cluster

NAME = "public/default/persistent/runs"

Piece = tuple[int, int, Position | None, BaseException | None]


async def open_ml(cluster: Cluster, **cfg: object) -> ManagedLedger:
    """Over ledgers of two bookies that each take every entry (not striped: a run goes to
    each as one request)."""
    return await ManagedLedger.open(
        NAME,
        storage=LedgerClientStorage(cluster.client, ensemble_size=2, write_quorum=2, ack_quorum=2),
        store=cluster.store,
        config=ManagedLedgerConfig(**cfg),  # type: ignore[arg-type]
        background=False,
    )


class Run:
    def __init__(self, ml: ManagedLedger, datas: list[bytes]) -> None:
        self.n = len(datas)
        self.pieces: list[Piece] = []
        self.done = asyncio.get_running_loop().create_future()
        self._returned = False
        ml.add_run(datas, [1] * len(datas), self._piece)
        self._returned = True

    def _piece(
        self, offset: int, count: int, first: Position | None, error: BaseException | None
    ) -> None:
        assert self._returned, "a piece was reported inside add_run"
        assert count > 0
        self.pieces.append((offset, count, first, error))
        if sum(c for _, c, _, _ in self.pieces) == self.n:
            self.done.set_result(None)

    async def outcome(self) -> list[Position | BaseException]:
        """Per entry, its position or its error; pieces came in order, each entry once."""
        await asyncio.wait_for(self.done, 20)
        out: list[Position | BaseException] = []
        for offset, count, first, error in self.pieces:
            assert offset == len(out), "pieces out of order"
            for i in range(count):
                if error is not None:
                    out.append(error)
                else:
                    assert first is not None
                    out.append(Position(first.ledger_id, first.entry_id + i))
        assert len(out) == self.n
        return out


async def test_a_run_crossing_ledger_limits_is_split_at_each_rollover(cluster: Cluster) -> None:
    ml = await open_ml(cluster, ledger_entries_max=5, ledger_age_min_ms=0)
    first = await ml.add_entry(b"before")
    run = Run(ml, [b"m%d" % i for i in range(12)])
    positions = await run.outcome()
    assert all(isinstance(p, Position) for p in positions)
    # dense inside each ledger, ledgers of at most 5 entries, in order
    ledgers = sorted({p.ledger_id for p in positions if isinstance(p, Position)})
    assert ledgers[0] == first.ledger_id and len(ledgers) == 3
    assert positions == [
        *(Position(ledgers[0], e) for e in range(1, 5)),
        *(Position(ledgers[1], e) for e in range(5)),
        *(Position(ledgers[2], e) for e in range(3)),
    ]
    assert len(run.pieces) == 3  # one piece per ledger
    cursor = await ml.open_cursor("c", earliest=True)
    got = await cursor.read_entries(100)
    assert [e.data for e in got] == [b"before", *(b"m%d" % i for i in range(12))]
    await ml.close()


async def test_a_run_crossing_the_size_limit_is_split_where_the_bytes_pass_it(
    cluster: Cluster,
) -> None:
    """An add fits while the ledger's bytes before it are under the limit: with 10-byte
    entries and 35 bytes a ledger, each ledger takes four (the fourth starts at 30)."""
    ml = await open_ml(cluster, ledger_size_max_bytes=35, ledger_age_min_ms=0)
    run = Run(ml, [b"%010d" % i for i in range(10)])
    positions = await run.outcome()
    ledgers = sorted({p.ledger_id for p in positions if isinstance(p, Position)})
    assert positions == [
        *(Position(ledgers[0], e) for e in range(4)),
        *(Position(ledgers[1], e) for e in range(4)),
        *(Position(ledgers[2], e) for e in range(2)),
    ]
    await ml.close()


async def test_a_ledger_younger_than_its_minimum_age_takes_a_run_past_its_limits(
    cluster: Cluster,
) -> None:
    ml = await open_ml(cluster, ledger_entries_max=3, ledger_age_min_ms=60_000)
    first = await ml.add_entry(b"before")
    positions = await Run(ml, [b"m%d" % i for i in range(8)]).outcome()
    assert positions == [Position(first.ledger_id, e) for e in range(1, 9)]
    await ml.close()


async def test_a_run_past_pending_adds_max_keeps_its_order(cluster: Cluster) -> None:
    ml = await open_ml(cluster, pending_adds_max=4)
    runs = [Run(ml, [b"r%d-%d" % (r, i) for i in range(r + 3)]) for r in range(4)]
    outcomes = [await run.outcome() for run in runs]
    flat = [p for o in outcomes for p in o]
    assert flat == sorted(flat) and len(set(flat)) == len(flat) == 3 + 4 + 5 + 6
    cursor = await ml.open_cursor("c", earliest=True)
    got = await cursor.read_entries(100)
    assert [e.data for e in got] == [b"r%d-%d" % (r, i) for r in range(4) for i in range(r + 3)]
    await ml.close()


async def test_an_entry_the_storage_never_takes_fails_alone_in_its_run(cluster: Cluster) -> None:
    # this ledger client takes entries of at most 64 bytes (the bookies take more)
    client = LedgerClient(cluster.store, config=LedgerClientConfig(entry_size_max_bytes=64))
    try:
        ml = await ManagedLedger.open(
            NAME,
            storage=LedgerClientStorage(client, ensemble_size=2, write_quorum=2, ack_quorum=2),
            store=cluster.store,
            config=ManagedLedgerConfig(),
            background=False,
        )
        run = Run(ml, [b"a", b"b", b"x" * 65, b"c"])
        outcome = await run.outcome()
        assert isinstance(outcome[2], EntryTooLargeForStorage)
        a, b, c = outcome[0], outcome[1], outcome[3]
        assert isinstance(a, Position) and isinstance(b, Position) and isinstance(c, Position)
        assert (b.entry_id, c.entry_id) == (a.entry_id + 1, a.entry_id + 2)  # no hole
        assert len(ml.ledger_ids()) == 1  # no rollover
        await ml.close()
    finally:
        await client.close()
