"""A writer whose ensemble change cannot reach the metadata store fails its pending adds
instead of leaving them unanswered (found by the long fault run: a broker cut from
ZooKeeper while replacing a bookie kept its adds pending, and its shutdown waited on them
past its 20 s bound)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from magnetar.bookie.bookie import Bookie, BookieConfig
from magnetar.common.errors import MagnetarError
from magnetar.ledger.client import LedgerClient, LedgerClientConfig
from magnetar.metadata import connect
from magnetar.testing.fault_proxy import FaultProxy

SESSION_TIMEOUT_S = 4.0


async def test_adds_fail_when_the_ensemble_change_loses_the_metadata_store(
    zookeeper_url: str, tmp_path: Path
) -> None:
    parts = urlsplit(zookeeper_url)
    assert parts.port is not None
    bookie_store = await connect(zookeeper_url)
    bookies = [
        Bookie(
            BookieConfig(data_dir=tmp_path / f"b{i}", port=0, disk_free_min_bytes=0), bookie_store
        )
        for i in range(3)
    ]
    for b in bookies:
        await b.start()
    with FaultProxy("127.0.0.1", parts.port) as link:
        store = await connect(
            f"zk://127.0.0.1:{link.port}{parts.path}", session_timeout_s=SESSION_TIMEOUT_S
        )
        client = LedgerClient(store, config=LedgerClientConfig(request_timeout_ms=2000))
        try:
            handle = await client.create(2, 2, 2)
            await handle.add(b"before")
            link.cut()
            victim = next(b for b in bookies if b.bookie_id in handle.metadata.current_ensemble)
            await victim.stop()
            add = handle.add_nowait(b"during")
            async with asyncio.timeout(SESSION_TIMEOUT_S * 4):
                with pytest.raises(MagnetarError):
                    await add
        finally:
            link.heal()
            await client.close()
            await store.close()
            for b in bookies:
                await b.stop()
            await bookie_store.close()
