"""Synchronous replication across regions, with real processes and the official client: a
``magnetar local-cluster`` of four bookies labelled in two regions
(``--bookie-racks /east/r1,/east/r2,/west/r1,/west/r2``) whose broker runs the region-aware
policy with E=Qw=Qa=2. Placement puts one replica of every entry in each region, so losing a
whole region leaves a copy of everything acknowledged, and the two surviving bookies are
enough for new ensembles (E=2): writes go on in one region, degraded (logged). E=3 would
need three bookies left after the loss, six in all.

While a producer streams, all of one region's bookies (chosen by the printed seed) are
SIGKILLed: every message the broker receipted reads back, messages sent after the loss are
receipted too, and every ledger placed while both regions were up spans both (from the
ledger metadata in ZooKeeper). ``MAGNETAR_LONG_TESTS=1`` streams four times as many."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path

import pulsar
import pytest

from magnetar.ledger.metadata import LEDGERS_PATH, LedgerMetadata, ledger_path
from magnetar.ledger.placement import region_of
from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.metadata import connect
from magnetar.testing.wait import wait_until

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
TOTAL = 8_000 if LONG else 2_000
RACKS = ("/east/r1", "/east/r2", "/west/r1", "/west/r2")
TOPIC = "persistent://public/default/regions"

pytestmark = pytest.mark.timeout(600 if LONG else 240)


async def _ledgers(url: str) -> dict[int, LedgerMetadata]:
    store = await connect(url)
    try:
        names = [n for n in await store.children(LEDGERS_PATH) if n[1:].isdigit()]
        return {
            int(n[1:]): LedgerMetadata.from_bytes((await store.get(ledger_path(int(n[1:])))).value)
            for n in names
        }
    finally:
        await store.close()


def ledgers(url: str) -> dict[int, LedgerMetadata]:
    return asyncio.run(_ledgers(url))


def test_losing_a_region_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    lost_region = rng.choice(["/east", "/west"])
    kill_at = rng.randrange(TOTAL // 4, TOTAL // 2)
    cluster = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path / "cluster", brokers=1, bookies=4, bookie_racks=RACKS,
            ensemble_size=2, write_quorum=2, ack_quorum=2,
            zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=4.0, log_level="WARNING",
            broker_args=(
                "--bookkeeper-client-regionaware-policy-enabled",
                # several ledgers per run: each one placed anew
                "--managed-ledger-max-entries-per-ledger", "300",
                "--managed-ledger-min-ledger-rollover-time-ms", "0",
            ),
        )
    )  # fmt: skip
    cluster.start()
    try:
        rack_of = {}
        for process, rack in zip(cluster.bookies, RACKS, strict=True):
            assert process.ready_match is not None
            rack_of[process.ready_match.group(1)] = rack
        lost = [
            p
            for p, rack in zip(cluster.bookies, RACKS, strict=True)
            if rack.startswith(lost_region)
        ]

        client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
        try:
            # the subscription keeps every message (without one nothing is retained)
            consumer = client.subscribe(TOPIC, "check")
            producer = client.create_producer(
                TOPIC, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
            )
            receipted: set[int] = set()
            failed: list[str] = []
            lock = threading.Lock()

            def on_sent(value: int, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                with lock:
                    if result == pulsar.Result.Ok:
                        receipted.add(value)
                    else:
                        failed.append(str(result))

            placed_before: dict[int, LedgerMetadata] = {}
            for i in range(TOTAL):
                if i == kill_at:
                    placed_before = ledgers(cluster.metadata_url)
                    for process in lost:
                        process.kill()
                producer.send_async(str(i).encode(), lambda r, m, v=i: on_sent(v, r, m))
            producer.flush()
            with lock:
                assert any(v > kill_at for v in receipted), "no write after the region loss"
                print(f"receipted {len(receipted)} of {TOTAL}, failed sends: {failed[:5]}")

            # every ledger placed while both regions were up spans both
            assert placed_before, "no ledger before the loss"
            for ledger_id, metadata in placed_before.items():
                first = metadata.ensembles[0][1]
                assert {region_of(rack_of[b]) for b in first} == {"/east", "/west"}, (
                    ledger_id,
                    first,
                )

            seen: set[int] = set()

            def all_read() -> bool:
                try:
                    message = consumer.receive(timeout_millis=1000)
                except pulsar.Timeout:
                    return receipted <= seen
                seen.add(int(message.data()))
                consumer.acknowledge(message)
                return receipted <= seen

            try:
                wait_until(all_read, timeout_s=60, what="every receipted message read back")
            finally:
                missing = sorted(receipted - seen)
                print(f"read {len(seen)}; receipted, not read: {len(missing)} {missing[:10]}")
        finally:
            client.close()

        # the topic now writes in the surviving region only
        survivors = {b for b, rack in rack_of.items() if not rack.startswith(lost_region)}
        newest = max(ledgers(cluster.metadata_url).items())[1]
        assert set(newest.ensembles[-1][1]) <= survivors
    finally:
        cluster.stop()
