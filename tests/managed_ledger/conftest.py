"""Fixtures: real bookies (the ``magnetar.bookie.Bookie`` server on loopback TCP with
journals on disk) in this process, sharing an in-memory metadata store with the ledger
client. Multi-process tests (SIGKILL) build their own cluster on ZooKeeper."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore, connect

_names = itertools.count()


@dataclass
class Cluster:
    store: MetadataStore
    bookies: list[Bookie]
    client: LedgerClient
    storage: LedgerClientStorage

    async def new_storage(self) -> tuple[MetadataStore, LedgerClientStorage]:
        """A second 'process' view: its own store session and ledger client."""
        raise NotImplementedError

    def bookie_ledgers(self) -> set[int]:
        """Ledger ids any bookie still stores."""
        out: set[int] = set()
        for b in self.bookies:
            assert b.storage is not None
            out |= set(b.storage.ledgers)
        return out

    async def collect_garbage(self) -> None:
        for b in self.bookies:
            await b.collect_garbage()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    store = await connect("memory:")
    bookies: list[Bookie] = []
    client: LedgerClient | None = None
    try:
        for i in range(3):
            cfg = BookieConfig(
                data_dir=tmp_path / f"bookie{i}",
                port=0,
                disk_free_min_bytes=0,
                gc_interval_ms=3_600_000,
            )
            b = Bookie(cfg, store)
            await b.start()
            bookies.append(b)
        client = LedgerClient(store)
        yield Cluster(store, bookies, client, LedgerClientStorage(client))
    finally:
        if client is not None:
            await client.close()
        for b in bookies:
            await b.stop()
        await store.close()


async def try_add(ml: ManagedLedger, data: bytes) -> Position | None:
    """The append's position, or None if the managed ledger refused it (for waiting until
    appends work again)."""
    try:
        return await ml.add_entry(data)
    except ManagedLedgerError:
        return None
