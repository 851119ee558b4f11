"""A managed ledger offloading its closed ledgers to both backends, with real bookies (in
process): the offload context's order of writes, reads from the object store once the bookie
copy is gone, failures and retries, a crash mid-upload, trimming across tiers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from magnetar.broker.offloaders import Offloaders
from magnetar.common.clock import ManualClock
from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.errors import OffloadNotConfigured
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.metadata_layout import ManagedLedgerInfo, ledger_path
from magnetar.managed_ledger.offload import ReadRange
from magnetar.managed_ledger.offload_manager import OffloadFailed, OffloadStatus
from magnetar.managed_ledger.position import Position
from magnetar.offload.block_format import data_key, index_key
from magnetar.offload.object_store import open_object_store
from magnetar.offload.offloader import BlobStoreOffloader
from magnetar.offload.settings import OffloadDriverConfig
from magnetar.testing.s3_server import S3Server
from tests.managed_ledger.conftest import Cluster

NAME = "public/default/persistent/tiered"


@pytest.fixture(params=["filesystem", "aws-s3"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> OffloadDriverConfig:
    if request.param == "filesystem":
        return OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    return request.getfixturevalue("s3_config")  # type: ignore[no-any-return]


async def open_ml(
    cluster: Cluster,
    offloader: object | None,
    clock: ManualClock | None = None,
    source: Offloaders | None = None,
    **cfg: object,
) -> ManagedLedger:
    settings: dict[str, object] = {"ledger_entries_max": 10, "ledger_age_min_ms": 0}
    settings.update(cfg)
    ml = await ManagedLedger.open(
        NAME,
        storage=cluster.storage,
        store=cluster.store,
        config=ManagedLedgerConfig(**settings),  # type: ignore[arg-type]
        clock=clock,
        offloader=offloader,  # type: ignore[arg-type]
        offloader_source=source,
        background=False,
    )
    await ml.open_cursor("hold", earliest=True)  # keeps trimming off the history
    return ml


async def stored_info(cluster: Cluster) -> ManagedLedgerInfo:
    return ManagedLedgerInfo.decode((await cluster.store.get(ledger_path(NAME))).value)


def payload(i: int) -> bytes:
    return b"entry-%05d-" % i + bytes(i % 251 for _ in range(200 + i % 50))


async def fill(ml: ManagedLedger, count: int) -> list[Position]:
    return [await ml.add_entry(payload(i)) for i in range(count)]


async def read_all(ml: ManagedLedger, name: str) -> list[bytes]:
    cursor = await ml.open_cursor(name, earliest=True, durable=False)
    out: list[bytes] = []
    while batch := await cursor.read_entries(7):
        out += [e.data for e in batch]
    return out


async def test_offloaded_ledgers_leave_the_bookies_and_read_back_from_the_store(
    cluster: Cluster, config: OffloadDriverConfig
) -> None:
    offloader = BlobStoreOffloader.open(config, block_size_max=1024)
    ml = await open_ml(cluster, offloader, offload_deletion_lag_ms=0, cache_size_max_bytes=0)
    await fill(ml, 45)  # ledgers of 10: four closed, the fifth open
    ledgers = ml.ledger_ids()
    assert ml.offloads.status is OffloadStatus.NOT_RUN
    first = await ml.offload_prefix(ml.last_confirmed)
    assert first == Position(ledgers[4], 0)
    assert ml.offloads.status is OffloadStatus.SUCCESS
    info = await stored_info(cluster)
    for seg in info.ledgers[:4]:
        assert seg.offload is not None and seg.offload.complete
        assert not seg.offload.bookkeeper_deleted  # the lag is counted at a maintenance round
        assert seg.offload.driver_name == config.driver
        assert await offloader.is_complete(seg.offload.uuid, seg.ledger_id)
    assert info.ledgers[4].offload is None  # the open ledger never moves

    await ml.maintain(force=True)
    info = await stored_info(cluster)
    assert all(s.offload is not None and s.offload.bookkeeper_deleted for s in info.ledgers[:4])
    await cluster.collect_garbage()
    assert not cluster.bookie_ledgers() & set(ledgers[:4])
    assert await read_all(ml, "r1") == [payload(i) for i in range(45)]
    assert ml.offloads.read_entries_total >= 40
    await ml.close()

    # a new owner finds the contexts in the metadata and reads through the store too
    again = await open_ml(cluster, BlobStoreOffloader.open(config), cache_size_max_bytes=0)
    assert await read_all(again, "r2") == [payload(i) for i in range(45)]
    await again.close()


async def test_the_automatic_trigger_offloads_past_the_size_threshold_oldest_first(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    ml = await open_ml(cluster, BlobStoreOffloader.open(config), offload_threshold_bytes=0)
    await fill(ml, 25)
    await ml.maintain(force=True)
    task = ml.offloads._task
    assert task is not None
    await task
    assert [s.offloaded for s in ml.ledgers] == [True, True, False]
    assert ml.offloads.status is OffloadStatus.SUCCESS
    await ml.close()


async def test_without_an_offloader_a_manual_offload_is_refused(cluster: Cluster) -> None:
    ml = await open_ml(cluster, None)
    await fill(ml, 15)
    with pytest.raises(OffloadNotConfigured):
        await ml.offload_prefix(ml.last_confirmed)
    await ml.close()


async def test_an_unreachable_store_is_an_error_with_the_reason_retried_until_it_completes(
    cluster: Cluster, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in S3Server.env().items():
        monkeypatch.setenv(name, value)
    config = OffloadDriverConfig(
        "aws-s3", bucket="not-yet", region="us-east-1", endpoint=s3_server.endpoint
    )
    clock = ManualClock()
    ml = await open_ml(cluster, BlobStoreOffloader.open(config), clock, offload_deletion_lag_ms=0)
    await fill(ml, 25)
    ledgers = ml.ledger_ids()
    with pytest.raises(OffloadFailed, match="not-yet"):
        await ml.offload_prefix(ml.last_confirmed)
    assert ml.offloads.status is OffloadStatus.ERROR
    assert "not-yet" in (ml.offloads.last_error or "")
    await ml.maintain(force=True)  # the retry waits for its backoff; nothing is deleted
    assert ml.offloads._task is not None and ml.offloads._task.done()
    assert set(ledgers) <= set(await cluster.client.list_ledgers())
    assert await ml.add_entry(b"still writable")  # producers are unaffected

    s3_server.create_bucket("not-yet")
    clock.advance(1.0)
    await ml.maintain(force=True)
    await ml.offloads._task  # type: ignore[misc]
    assert ml.offloads.status is OffloadStatus.SUCCESS and ml.offloads.last_error is None
    await ml.maintain(force=True)  # the deletion lag (0) passed: the bookie copies go
    assert not set(ledgers[:2]) & set(await cluster.client.list_ledgers())
    await ml.close()


class _StallingOffloader(BlobStoreOffloader):
    """Uploads the first read run, then waits forever (a broker stopped mid-upload)."""

    started: asyncio.Event

    async def offload(
        self, uuid: str, ledger_id: int, last_entry_id: int, read: ReadRange, metadata: bytes
    ) -> object:
        async def stalling(first: int, last: int) -> Sequence[bytes]:
            if first > 0:
                self.started.set()
                await asyncio.Event().wait()
            return await read(first, last)

        return await super().offload(uuid, ledger_id, last_entry_id, stalling, metadata)


async def test_a_crash_mid_upload_marks_nothing_complete_and_the_next_attempt_cleans_up(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    stalling = _StallingOffloader(open_object_store(config), block_size_max=512, config=config)
    stalling.started = asyncio.Event()
    ml = await open_ml(cluster, stalling, ledger_entries_max=300)
    await fill(ml, 310)
    target = ml.last_confirmed
    ml.offloads.request(target)
    await asyncio.wait_for(stalling.started.wait(), 10)
    await ml.close()  # the owner goes away mid-upload
    first = (await stored_info(cluster)).ledgers[0]
    assert first.offload is not None and not first.offload.complete
    partial_uuid = first.offload.uuid
    store = open_object_store(config)
    assert index_key(partial_uuid, first.ledger_id) not in await store.keys("")

    again = await open_ml(cluster, BlobStoreOffloader.open(config), ledger_entries_max=300)
    await again.offload_prefix(again.last_confirmed)
    done = (await stored_info(cluster)).ledgers[0]
    assert done.offload is not None and done.offload.complete
    assert done.offload.uuid != partial_uuid
    keys = await store.keys("")
    assert data_key(partial_uuid, first.ledger_id) not in keys  # the leftover was deleted
    assert sorted(keys) == sorted(
        [data_key(done.offload.uuid, done.ledger_id), index_key(done.offload.uuid, done.ledger_id)]
    )
    await again.close()


async def test_a_missing_object_is_a_read_error_naming_the_ledger(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    ml = await open_ml(
        cluster, BlobStoreOffloader.open(config), offload_deletion_lag_ms=0, cache_size_max_bytes=0
    )
    await fill(ml, 15)
    await ml.offload_prefix(ml.last_confirmed)
    await ml.maintain(force=True)
    seg = ml.ledgers.segments[0]
    assert seg.offload is not None
    await open_object_store(config).delete(data_key(seg.offload.uuid, seg.ledger_id))
    fresh = await open_ml(cluster, BlobStoreOffloader.open(config), cache_size_max_bytes=0)
    with pytest.raises(MagnetarError, match=f"ledger {seg.ledger_id}: .* is missing"):
        await fresh.read_range(seg.ledger_id, 0, 9)
    await fresh.close()


async def test_bookkeeper_first_reads_the_bookie_copy_while_it_exists(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    ml = await open_ml(
        cluster,
        BlobStoreOffloader.open(config),
        cache_size_max_bytes=0,
        offload_read_bookkeeper_first=True,
    )
    await fill(ml, 15)
    await ml.offload_prefix(ml.last_confirmed)
    assert await read_all(ml, "r") == [payload(i) for i in range(15)]
    assert ml.offloads.read_entries_total == 0
    await ml.close()


async def test_trimming_an_offloaded_ledger_deletes_its_objects(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    ml = await open_ml(cluster, BlobStoreOffloader.open(config), offload_deletion_lag_ms=0)
    cursor = ml.cursors["hold"]
    positions = await fill(ml, 25)
    await ml.offload_prefix(ml.last_confirmed)
    await ml.maintain(force=True)
    assert len(await open_object_store(config).keys("")) == 4
    cursor.ack_cumulative(positions[-1])
    await ml.trim()
    assert await open_object_store(config).keys("") == []
    assert (
        json.loads((await cluster.store.get(ledger_path(NAME))).value)["ledgers"][0]["ledger_id"]
        == ml.ledger_ids()[0]
    )
    await ml.close()


async def test_without_an_offloader_the_bookie_copy_serves_and_stays(
    cluster: Cluster, tmp_path: Path
) -> None:
    """An offload policy removed after an offload: reads go to the bookies while they hold
    the ledger, and its bookie copy is not deleted (nothing could read the other one)."""
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    ml = await open_ml(cluster, BlobStoreOffloader.open(config), cache_size_max_bytes=0)
    await fill(ml, 15)
    await ml.offload_prefix(ml.last_confirmed)
    ml.offloader = None
    ml.config = ManagedLedgerConfig(
        ledger_entries_max=10, cache_size_max_bytes=0, offload_deletion_lag_ms=0
    )
    await ml.maintain(force=True)
    assert ml.ledgers.segments[0].on_bookies
    assert await read_all(ml, "r") == [payload(i) for i in range(15)]
    await ml.close()


async def test_an_offloaded_ledger_reads_with_the_driver_recorded_for_it(
    cluster: Cluster, s3_server: S3Server, s3_config: OffloadDriverConfig
) -> None:
    """The offload policy names another bucket after the offload: the old ledgers still
    read from the bucket their contexts record, on this owner and on the next."""
    offloaders = Offloaders()
    ml = await open_ml(
        cluster, offloaders.get(s3_config), source=offloaders,
        offload_deletion_lag_ms=0, cache_size_max_bytes=0,
    )  # fmt: skip
    await fill(ml, 25)
    await ml.offload_prefix(ml.last_confirmed)
    await ml.maintain(force=True)  # the bookie copies go: only the old bucket holds them
    await cluster.collect_garbage()
    moved = replace(s3_config, bucket=f"{s3_config.bucket}-moved")
    s3_server.create_bucket(str(moved.bucket))
    ml.offloader = offloaders.get(moved)  # as a changed namespace policy does
    assert await read_all(ml, "r1") == [payload(i) for i in range(25)]
    await ml.close()

    fresh = Offloaders()  # a new owner configured with the new bucket only
    again = await open_ml(cluster, fresh.get(moved), source=fresh, cache_size_max_bytes=0)
    assert await read_all(again, "r2") == [payload(i) for i in range(25)]
    await again.close()
