"""Batch reads of offloaded history against a real standalone: ledgers offloaded with
``admin topics offload`` (bookie copies deleted, lag 0) to a local directory or to moto's S3
server read straight from the object store by Spark ``local[2]``'s executors give exactly
the rows the broker path gave before the offload, with part of the topic offloaded and all
of it; a corrupt object fails the job with an error naming the ledger.

``MAGNETAR_LONG_TESTS=1`` produces ten times as much."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from magnetar.offload.block_format import data_key
from magnetar.offload.object_store import open_object_store
from magnetar.offload.settings import OffloadDriverConfig
from magnetar.spark.offload_plan import parse_internal_info
from magnetar.spark.options import parse_options
from magnetar.spark.source import MagnetarBatchReader
from magnetar.testing import StandaloneProcess, wait_until

from .conftest import admin, produce, read_all

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
MESSAGES = 4000 if LONG else 400


@pytest.fixture(params=["filesystem", "aws-s3"])
def offload_config(request: pytest.FixtureRequest, tmp_path: Path) -> OffloadDriverConfig:
    if request.param == "filesystem":
        return OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    config: OffloadDriverConfig = request.getfixturevalue("s3_config")
    return config


def _flags(config: OffloadDriverConfig) -> list[str]:
    out = ["--offload-driver", config.driver, "--offload-deletion-lag-ms", "0"]
    for name in ("bucket", "region", "endpoint", "directory"):
        value = getattr(config, name)
        if value:
            out += [f"--offload-{name}", value]
    return out


def _options(config: OffloadDriverConfig, node: StandaloneProcess) -> dict[str, str]:
    out = {"admin_url": node.http_url, "offload.driver": config.driver}
    for name in ("bucket", "region", "endpoint", "directory"):
        value = getattr(config, name)
        if value:
            out[f"offload.{name}"] = value
    return out


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _topic_path(topic: str, action: str) -> str:
    return f"/admin/v2/persistent/public/default/{topic}/{action}"


def _offload_through(node: StandaloneProcess, topic: str, ledger_id: int) -> list[Any]:
    """Offload the closed ledgers before ``ledger_id``; wait until their bookie copies are
    gone. Returns the internal-info ledgers."""
    admin(node, "PUT", _topic_path(topic, "offload"), {"ledgerId": ledger_id, "entryId": 0})

    def done() -> int | None:
        status = admin(node, "GET", _topic_path(topic, "offload"))
        assert status["status"] != "ERROR", status
        if status["status"] != "SUCCESS":
            return None
        return int(status["firstUnoffloadedMessage"]["ledgerId"])

    first_kept = wait_until(done, timeout_s=60, what="offload SUCCESS")
    assert first_kept is not None

    def deleted() -> list[Any] | None:
        info = admin(node, "GET", _topic_path(topic, "internal-info"))
        before = [
            led for led in info["ledgerInfo"] if led["ledgerId"] < first_kept and led["entries"]
        ]
        ok = all((led.get("offloadContext") or {}).get("bookkeeperDeleted") for led in before)
        return info["ledgerInfo"] if ok else None

    ledgers = wait_until(deleted, timeout_s=60, what="bookie copies deleted")
    assert ledgers is not None
    return ledgers


def test_offloaded_ledgers_read_from_the_object_store_give_the_broker_paths_rows(
    spark: SparkSession,
    standalone_factory: Any,
    topic: str,
    offload_config: OffloadDriverConfig,
) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    node: StandaloneProcess = standalone_factory(
        "--managed-ledger-max-entries-per-ledger", "10",
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
        *_flags(offload_config),
    )  # fmt: skip
    admin(
        node,
        "POST",
        "/admin/v2/namespaces/public/default/retention",
        {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
    )
    values = [rng.randbytes(rng.randrange(1, 300)) for _ in range(MESSAGES)]
    keys = [f"k{rng.randrange(20)}" for _ in range(MESSAGES)]
    half = MESSAGES // 2
    produce(
        node.url,
        topic,
        values[:half],
        keys=keys[:half],
        properties=lambda i: {"i": str(i)},
        event_times=[1_600_000_000_000 + i for i in range(half)],
        batching=False,
    )
    produce(node.url, topic, values[half:], keys=keys[half:])  # batched entries
    before = _rows(read_all(spark, node.url, topic))
    assert len(before) == MESSAGES

    ledgers = admin(node, "GET", _topic_path(topic, "internal-info"))["ledgerInfo"]
    closed = [led["ledgerId"] for led in ledgers if led["entries"] > 0]
    assert len(closed) >= 8
    direct = _options(offload_config, node)

    # part of the topic offloaded: the rest still comes through the broker
    middle = closed[len(closed) // 2]
    _offload_through(node, topic, middle)
    plan = MagnetarBatchReader(
        parse_options({"service_url": node.url, "topic": topic, **direct}), None
    ).partitions()
    assert sum(1 for p in plan if p.offloaded is not None) >= 3  # type: ignore[attr-defined]
    assert any(p.offloaded is None for p in plan)  # type: ignore[attr-defined]
    assert _rows(read_all(spark, node.url, topic, **direct)) == before

    # all of it offloaded but the ledger being written
    info = _offload_through(node, topic, closed[-1] + 1)
    offloaded = [led for led in parse_internal_info({"ledgerInfo": info}) if led.offload_uuid]
    assert len(offloaded) >= len(closed) - 1
    assert _rows(read_all(spark, node.url, topic, **direct)) == before
    off = {**direct, "offload.directRead": "false"}
    assert _rows(read_all(spark, node.url, topic, **off)) == before

    # a corrupt data object: the job fails naming the ledger, nothing is skipped
    victim = offloaded[1]
    assert victim.offload_uuid is not None
    _corrupt(offload_config, data_key(victim.offload_uuid, victim.ledger_id))
    with pytest.raises(Exception, match=rf"offloaded ledger {victim.ledger_id}"):
        read_all(spark, node.url, topic, **direct).collect()


def _corrupt(config: OffloadDriverConfig, key: str) -> None:
    store = open_object_store(config)

    async def main() -> None:
        data = bytearray(await store.get(key))
        data[140:150] = b"\xee" * 10
        await store.put(key, bytes(data))

    asyncio.run(main())
