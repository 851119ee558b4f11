"""The managed ledger when its storage fails: a real bookie in this process, and the
embedded metadata store on a small tmpfs that is filled up (issue 14.2)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.state import State
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async
from magnetar.testing.disk import Tmpfs, fill_disk

from .conftest import try_add

CONFIG = ManagedLedgerConfig(write_retry_backoff_min_ms=1, write_retry_backoff_max_ms=1)


@pytest.fixture
async def metadata_disk(tmp_path: Path) -> AsyncIterator[Tmpfs]:
    with Tmpfs(tmp_path / "meta", 16) as disk:
        yield disk


async def test_a_ledger_that_could_not_be_closed_is_closed_before_the_log_moves_on(
    tmp_path: Path, metadata_disk: Tmpfs
) -> None:
    """A rollover after a failed add must not leave the old ledger OPEN in its metadata
    behind a newer one: readers would then see it only up to the last-add-confirmed its
    bookies know (one entry short), losing the last acknowledged entry."""
    store: MetadataStore = await connect(f"sqlite://{metadata_disk.path / 'metadata.db'}")
    bookie = Bookie(
        BookieConfig(data_dir=tmp_path / "bookie", port=0, disk_free_min_bytes=0), store
    )
    await bookie.start()
    client = LedgerClient(store, local_bookies=[bookie])
    storage = LedgerClientStorage(client, ensemble_size=1, write_quorum=1, ack_quorum=1)
    try:
        ml = await ManagedLedger.open("t", storage=storage, store=store, config=CONFIG)
        first = [await ml.add_entry(f"m{i}".encode()) for i in range(5)]
        assert first[-1].entry_id == 4
        await bookie.set_readonly(True)
        filler = metadata_disk.path / "filler"
        fill_disk(filler)
        with pytest.raises(ManagedLedgerError):
            await ml.add_entry(b"refused")  # the bookie refuses; closing the ledger fails too
        assert ml.state in (State.ROLLING, State.WRITE_FAILED)
        filler.unlink()
        await bookie.set_readonly(False)
        stored = await wait_until_async(
            lambda: try_add(ml, b"after"), timeout_s=10, what="an add once storage works"
        )
        assert stored.ledger_id != first[0].ledger_id
        assert ml.state is State.OPEN
        await ml.close()
        assert ml.state is State.CLOSED

        reopened = await ManagedLedger.open("t", storage=storage, store=store, config=CONFIG)
        try:
            data = await reopened.read_range(first[0].ledger_id, 0, 4)
            assert data == [f"m{i}".encode() for i in range(5)]
            assert await reopened.read_range(stored.ledger_id, 0, 0) == [b"after"]
        finally:
            await reopened.close()
    finally:
        await client.close()
        await bookie.stop()
        await store.close()
