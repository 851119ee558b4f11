"""Tiered storage end to end with real processes: a ``magnetar standalone`` started with an
offload driver (a real S3-compatible server, moto's, as its own process; or a directory),
a topic of small ledgers produced by the official client, ``magnetar admin topics offload``
and ``offload-status -w``, the bookie copies deleted (deletion lag 0), then a new
subscription reads every message in order from the object store. Also: a broker SIGKILLed
mid-upload marks nothing complete and the next attempt completes; the S3 server stopped
during an offload gives ERROR with the reason, nothing deleted, and it completes once the
server is back.

A few MB by default; ``MAGNETAR_LONG_TESTS=1`` produces 200 MB."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from magnetar.admin_client import AdminClient
from magnetar.bookie.ledger_storage import LedgerStorage
from magnetar.bookie_protocol.layout import LEDGERS_PATH, ledger_id_of
from magnetar.metadata import connect
from magnetar.offload.settings import OffloadDriverConfig
from magnetar.testing import StandaloneProcess
from magnetar.testing.s3_server import S3Server
from magnetar.testing.wait import wait_until
from tests.offload.numbered_messages import produce, read_all

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
MESSAGES = 20_000 if LONG else 400  # 200 MB, or 4 MB
ENTRIES_PER_LEDGER = 500 if LONG else 40


def _driver_args(config: OffloadDriverConfig) -> list[str]:
    if config.driver == "filesystem":
        assert config.directory is not None
        return ["--offload-driver", "filesystem", "--offload-directory", config.directory]
    assert config.bucket is not None and config.endpoint is not None
    return [
        "--offload-driver", config.driver, "--offload-bucket", config.bucket,
        "--offload-endpoint", config.endpoint, "--offload-region", "us-east-1",
    ]  # fmt: skip


def _standalone(data: Path, config: OffloadDriverConfig) -> StandaloneProcess:
    return StandaloneProcess(
        data,
        *_driver_args(config),
        "--offload-deletion-lag-ms", "0",
        "--managed-ledger-max-entries-per-ledger", str(ENTRIES_PER_LEDGER),
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
        "--bookie-gc-interval-ms", "300",
    )  # fmt: skip


def _admin(node: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from magnetar.cli.main import main; main()", "admin",
         "--admin-url", node.http_url, *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def _ledgers_in_metadata(data: Path) -> set[int]:
    store = await connect(f"sqlite://{data / 'metadata.db'}")
    try:
        names = await store.children(LEDGERS_PATH)
    finally:
        await store.close()
    return {i for i in map(ledger_id_of, names) if i is not None}


def _entry_log_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in (data / "bookie" / "entrylogs").iterdir() if p.is_file())


def _info(admin: AdminClient, topic: str) -> dict[str, Any]:
    info: dict[str, Any] = admin.get(f"/admin/v2/persistent/{topic}/internal-info")
    return info


@pytest.fixture(params=["aws-s3", "filesystem"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> OffloadDriverConfig:
    if request.param == "filesystem":
        return OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    return request.getfixturevalue("s3_config")  # type: ignore[no-any-return]


def test_offloaded_history_reads_back_in_order_from_the_object_store(
    tmp_path: Path, config: OffloadDriverConfig
) -> None:
    name = "public/default/tiered"
    topic = f"persistent://{name}"
    with _standalone(tmp_path / "data", config) as node:
        admin = AdminClient(node.http_url, timeout_s=30)
        produce(node.url, topic, 0, MESSAGES)
        ledgers = _info(admin, name)["ledgerInfo"]
        assert len(ledgers) >= 5

        started = _admin(node, "topics", "offload", topic, "-s", "0")
        assert started.returncode == 0, started.stderr
        assert "Offload triggered" in started.stdout
        status = _admin(node, "topics", "offload-status", topic, "-w")
        assert status.returncode == 0, status.stderr
        assert "Offload was a success" in status.stdout

        def bookie_copies_deleted() -> list[dict[str, Any]]:
            closed = _info(admin, name)["ledgerInfo"][:-1]
            done = [
                ledger
                for ledger in closed
                if ledger.get("offloadContext", {}).get("bookkeeperDeleted")
            ]
            return done if len(done) == len(closed) else []

        offloaded = wait_until(bookie_copies_deleted, 30, what="bookie copies deleted")
        context = offloaded[0]["offloadContext"]
        assert context["complete"] and context["driverName"] == config.driver
        assert uuid.UUID(context["uuid"]).int >> 64 == context["uidMsb"] % (1 << 64)
        stats = admin.get(f"/admin/v2/persistent/{name}/internalStats")
        assert all(ledger["offloaded"] for ledger in stats["ledgers"][:-1])

        assert read_all(node.url, topic, MESSAGES) == list(range(MESSAGES))
        with urllib.request.urlopen(f"{node.http_url}/metrics", timeout=30) as answer:
            metrics = answer.read().decode()
        assert "brk_ledgeroffloader_read_entries_total{" in metrics
        assert "brk_ledgeroffloader_offload_bytes_total{" in metrics
        # the bookie's garbage collection (every 300 ms here) drops the deleted ledgers'
        # entries: their entry logs are compacted and removed from its directory. Until
        # the entry logs are smaller than any one of them, a collection may still be due:
        # the last deletion can come after a collection listed the ledgers, and that
        # collection frees most of the space
        smallest = min(ledger["size"] for ledger in offloaded)
        wait_until(
            lambda: _entry_log_bytes(tmp_path / "data") < smallest / 2,
            60,
            what="the bookie's entry logs to hold none of the offloaded ledgers",
        )
        assert node.stop() == 0
    # BookKeeper forgot the offloaded ledgers, and so did the bookie's index on disk
    gone = {ledger["ledgerId"] for ledger in offloaded}
    left = asyncio.run(_ledgers_in_metadata(tmp_path / "data"))
    assert left, "the current ledger is still there"
    assert not gone & left
    storage = LedgerStorage(tmp_path / "data" / "bookie")
    try:
        storage.load()
        assert not gone & set(storage.ledgers), "the bookie's index still holds them"
    finally:
        storage.close()


def test_a_stopped_object_store_is_an_error_and_the_offload_completes_once_it_is_back(
    tmp_path: Path, s3_server: S3Server, s3_config: OffloadDriverConfig
) -> None:
    name = "public/default/outage"
    topic = f"persistent://{name}"
    with _standalone(tmp_path / "data", s3_config) as node:
        admin = AdminClient(node.http_url, timeout_s=30)
        produce(node.url, topic, 0, ENTRIES_PER_LEDGER * 3)
        closed = [ledger["ledgerId"] for ledger in _info(admin, name)["ledgerInfo"][:-1]]
        s3_server.stop()
        try:
            started = _admin(node, "topics", "offload", topic, "-s", "0")
            assert started.returncode == 0, started.stderr
            failed = _admin(node, "topics", "offload-status", topic, "-w")
            assert failed.returncode == 1
            assert "Error offloading" in failed.stderr and s3_config.bucket in failed.stderr
            info = _info(admin, name)["ledgerInfo"]
            assert not any(ledger.get("offloadContext", {}).get("complete") for ledger in info)
            # producers and consumers are unaffected
            produce(node.url, topic, ENTRIES_PER_LEDGER * 3, 5)
        finally:
            s3_server.start()
            s3_server.create_bucket(str(s3_config.bucket))  # moto keeps buckets in memory

        def completed() -> bool:
            info = _info(admin, name)["ledgerInfo"]
            return all(
                ledger.get("offloadContext", {}).get("bookkeeperDeleted")
                for ledger in info
                if ledger["ledgerId"] in closed
            )

        wait_until(completed, 90, what="offload retried to completion")
        total = ENTRIES_PER_LEDGER * 3 + 5
        assert read_all(node.url, topic, total) == list(range(total))


def test_a_broker_killed_mid_upload_marks_nothing_complete_and_the_next_attempt_completes(
    tmp_path: Path,
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    name = "public/default/crash"
    topic = f"persistent://{name}"
    data = tmp_path / "data"
    with _standalone(data, config) as node:
        admin = AdminClient(node.http_url, timeout_s=30)
        produce(node.url, topic, 0, ENTRIES_PER_LEDGER * 6)
        admin.put(
            f"/admin/v2/persistent/{name}/offload",
            {"ledgerId": _info(admin, name)["ledgerInfo"][-1]["ledgerId"], "entryId": 0},
        )
        # SIGKILL as soon as the first attempt is recorded: mid-upload (the filesystem
        # store's staging file of the unfinished object is left behind)
        wait_until(
            lambda: any("offloadContext" in x for x in _info(admin, name)["ledgerInfo"]),
            30,
            what="an offload attempt recorded",
        )
        node.kill()
    tier = Path(str(config.directory))
    with _standalone(data, config) as node:
        admin = AdminClient(node.http_url, timeout_s=30)
        for ledger in _info(admin, name)["ledgerInfo"]:
            context = ledger.get("offloadContext")
            if context is not None and context["complete"]:
                index = tier / f"{context['uuid']}-ledger-{ledger['ledgerId']}-index"
                assert index.exists(), "a ledger marked complete without its index object"
        started = _admin(node, "topics", "offload", topic, "-s", "0")
        assert started.returncode == 0, started.stderr
        status = _admin(node, "topics", "offload-status", topic, "-w")
        assert "Offload was a success" in status.stdout, status.stdout + status.stderr
        info = _info(admin, name)["ledgerInfo"]
        complete = {
            f"{x['offloadContext']['uuid']}-ledger-{x['ledgerId']}"
            for x in info
            if x.get("offloadContext", {}).get("complete")
        }
        # every ledger with entries (the restart closed the open one empty and added one)
        assert len(complete) == sum(1 for x in info if x["entries"] > 0) == 6
        left = {p.name.removesuffix("-index") for p in tier.iterdir()}
        assert left == complete, "objects of the interrupted attempt were left behind"
        total = ENTRIES_PER_LEDGER * 6
        assert read_all(node.url, topic, total) == list(range(total))
        assert json.dumps(info)  # the shape stays JSON
