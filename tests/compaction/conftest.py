"""Fixtures: real bookies in this process (loopback TCP, journals on disk) and a broker
service over them, for the compactor's integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.ledger import LedgerClient
from magnetar.ledger.metadata import ledger_path
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore, connect

BROKER_CONFIG = BrokerConfig(port=0, ensemble_size=2, write_quorum=2, ack_quorum=2)


@dataclass
class Cluster:
    store: MetadataStore
    bookies: list[Bookie]
    client: LedgerClient
    storage: LedgerClientStorage
    services: list[BrokerService] = field(default_factory=list)

    async def broker(self, ml_config: ManagedLedgerConfig | None = None) -> BrokerService:
        """A started broker service over these bookies (closed at teardown)."""
        service = BrokerService(BROKER_CONFIG, self.store, self.storage, ml_config=ml_config)
        self.services.append(service)
        await service.start()
        return service

    async def ledger_exists(self, ledger_id: int) -> bool:
        """Whether the ledger is still registered in the metadata store."""
        return await self.store.exists(ledger_path(ledger_id)) is not None


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    store = await connect("memory:")
    bookies: list[Bookie] = []
    client: LedgerClient | None = None
    c: Cluster | None = None
    try:
        for i in range(2):
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
        c = Cluster(store, bookies, client, LedgerClientStorage(client))
        yield c
    finally:
        if c is not None:
            for service in c.services:
                await service.close()
        if client is not None:
            await client.close()
        for b in bookies:
            await b.stop()
        await store.close()
