"""What an append that storage refuses does to the managed ledger (real bookies in this
process): an entry too large for any ledger fails alone, with no rollover; a write failure
that follows the entry rolls over a bounded number of times, then fails that append."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.common.errors import MagnetarError
from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.errors import EntryTooLargeForStorage, ManagedLedgerError
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.testing import wait_until_async

from .conftest import Cluster

NAME = "public/default/persistent/too-large"
WAIT_S = 30.0
"""Bound on one append's outcome (before the fix these never came back)."""


async def _open(
    cluster: Cluster, client_entry_max_bytes: int
) -> tuple[ManagedLedger, LedgerClient]:
    client = LedgerClient(
        cluster.store, config=LedgerClientConfig(entry_size_max_bytes=client_entry_max_bytes)
    )
    ml = await ManagedLedger.open(
        NAME,
        storage=LedgerClientStorage(client),
        store=cluster.store,
        config=ManagedLedgerConfig(add_attempts_max=3),
        background=False,
    )
    return ml, client


async def test_entry_over_the_client_limit_fails_alone_without_rollover(cluster: Cluster) -> None:
    ml, client = await _open(cluster, client_entry_max_bytes=1024)
    try:
        ledgers = ml.ledger_ids()
        before = ml.add_entry_nowait(b"a" * 10)
        too_big = ml.add_entry_nowait(b"b" * 1025)
        after = ml.add_entry_nowait(b"c" * 10)
        first = await asyncio.wait_for(before, WAIT_S)
        with pytest.raises(EntryTooLargeForStorage, match="1025 bytes exceeds 1024"):
            await asyncio.wait_for(too_big, WAIT_S)
        last = await asyncio.wait_for(after, WAIT_S)
        # same ledger, next entry: the refusal used no entry id and rolled nothing over
        assert ml.ledger_ids() == ledgers
        assert last.ledger_id == first.ledger_id == ledgers[-1]
        assert last.entry_id == first.entry_id + 1
        cursor = await ml.open_cursor("sub", earliest=True)
        assert [e.data for e in await cursor.read_entries(10)] == [b"a" * 10, b"c" * 10]
    finally:
        await asyncio.wait_for(ml.close(), WAIT_S)
        await client.close()


async def test_entry_the_bookies_refuse_rolls_over_a_bounded_number_of_times(
    cluster: Cluster,
) -> None:
    # The client lets it through, every bookie refuses it (limits that disagree): each
    # attempt fails the ledger. It must not roll over in a loop.
    bookie_max = cluster.bookies[0].config.entry_size_max_bytes
    ml, client = await _open(cluster, client_entry_max_bytes=bookie_max + 64 * 1024)
    try:
        ledgers_before = len(ml.ledger_ids())
        with pytest.raises(MagnetarError):
            await asyncio.wait_for(ml.add_entry(b"x" * (bookie_max + 1)), WAIT_S)
        # bounded: at most one rollover per attempt, no loop
        assert len(ml.ledger_ids()) - ledgers_before <= ml.config.add_attempts_max

        # appends fail promptly during the write backoff, then the log takes them again
        async def appended() -> Position | None:
            try:
                return await asyncio.wait_for(ml.add_entry(b"fine"), WAIT_S)
            except ManagedLedgerError:
                return None

        pos = await wait_until_async(appended, WAIT_S, what="an append after the write backoff")
        assert pos.ledger_id == ml.ledger_ids()[-1]
        assert len(ml.ledger_ids()) - ledgers_before <= ml.config.add_attempts_max + 1
    finally:
        await asyncio.wait_for(ml.close(), WAIT_S)
        await client.close()
