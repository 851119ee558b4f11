"""Autorecovery with real processes: ZooKeeper, 4 ``magnetar bookie``, 2 ``magnetar broker``
(E=3, Qw=2, Qa=2, so one bookie is a spare), the official client producing.

A bookie holding replicas is SIGKILLed: writes go on (the writer's ensemble change), and the
controller inside a broker — fed by the bookie registrations and the ledger metadata — has
the live bookies' replication workers copy the lost replicas, until every ledger's metadata
names only live bookies. Every acknowledged message is then consumed, and still read after a
second original bookie is SIGKILLed (each entry had two replicas, one of them now on the
spare)."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.ledger.metadata import LedgerMetadata, LedgerState
from magnetar.metadata import connect
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess

from .test_cluster_processes import (
    cluster_procs,
    controller,
    http_json,
    start_bookies,
    start_brokers,
)

__all__ = ["cluster_procs"]  # fixture

pytestmark = pytest.mark.timeout(300)

TOPIC = "persistent://public/default/autorecovery"
ENTRIES_PER_LEDGER = "40"


def ledgers_and_bookies(url: str) -> tuple[dict[int, LedgerMetadata], set[str]]:
    """Every ledger's metadata, and the bookies registered, read from ZooKeeper."""

    async def read() -> tuple[dict[int, LedgerMetadata], set[str]]:
        store = await connect(url)
        client = LedgerClient(store)
        try:
            ledgers = {i: (await client.get_metadata(i))[0] for i in await client.list_ledgers()}
            return ledgers, set(await client.available_bookies())
        finally:
            await client.close()
            await store.close()

    return asyncio.run(read())


def read_every_entry(url: str, ledgers: list[int]) -> int:
    """Read every entry of ``ledgers`` straight from the bookies; the count read."""

    async def read() -> int:
        store = await connect(url)
        config = LedgerClientConfig(request_timeout_ms=3_000, speculative_read_timeout_ms=200)
        client = LedgerClient(store, config=config)
        count = 0
        try:
            for ledger_id in ledgers:
                handle = await client.open(ledger_id, recovery=False)
                if handle.last_add_confirmed >= 0:
                    count += len(await handle.read(0, handle.last_add_confirmed))
            return count
        finally:
            await client.close()
            await store.close()

    return asyncio.run(read())


def metric(http_url: str, name: str) -> float | None:
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return None


def test_a_killed_bookies_ledgers_return_to_their_write_quorum(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    bookies = start_bookies(cluster_procs, zookeeper_url, tmp_path, 4)
    brokers = start_brokers(
        cluster_procs,
        zookeeper_url,
        tmp_path,
        2,
        "--managed-ledger-max-entries-per-ledger",
        ENTRIES_PER_LEDGER,
        "--managed-ledger-min-ledger-rollover-time-ms",
        "0",
    )
    # Keep consumed ledgers (no trimming), so the closed ones stay to be healed.
    request = urllib.request.Request(
        f"{brokers[0].http_url}/admin/v2/namespaces/public/default/retention",
        data=json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=30).close()
    client = pulsar.Client(brokers[0].url, operation_timeout_seconds=30)
    acked: list[int] = []
    next_message = 0

    def send(count: int) -> None:
        nonlocal next_message
        outcomes: dict[int, pulsar.Result] = {}

        def sent(i: int) -> Callable[[pulsar.Result, object], None]:
            def callback(result: pulsar.Result, _msg_id: object) -> None:
                outcomes[i] = result

            return callback

        first = next_message
        next_message += count
        for i in range(first, first + count):
            producer.send_async(b"%d" % i, sent(i))
        producer.flush()
        wait_until(lambda: len(outcomes) == count, timeout_s=60, what="every send answered")
        acked.extend(sorted(i for i, r in outcomes.items() if r == pulsar.Result.Ok))

    try:
        consumer = client.subscribe(TOPIC, "sub")
        producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=30_000)
        send(150)  # several ledgers, closed at 40 entries each
        before, live = ledgers_and_bookies(zookeeper_url)
        assert len(live) == 4
        closed = [md for md in before.values() if md.state is LedgerState.CLOSED]
        on = {b.bookie_id: sum(b.bookie_id in md.ensemble_for(0) for md in closed) for b in bookies}
        victim = max(bookies, key=lambda b: on[b.bookie_id])
        assert on[victim.bookie_id] > 0
        victim.signal(signal.SIGKILL)

        # Writes go on while the controller heals the ledgers; each round also gives open
        # ledgers (the topic's, the cursor's) a write, so their writers replace the bookie.
        def healed() -> bool:
            send(5)
            for message in consumer_batch():
                consumer.acknowledge(message)
            ledgers, live = ledgers_and_bookies(zookeeper_url)
            return victim.bookie_id not in live and all(
                set(ensemble) <= live for md in ledgers.values() for _, ensemble in md.ensembles
            )

        received: list[int] = []

        def consumer_batch() -> list[pulsar.Message]:
            got = []
            while True:
                try:
                    message = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    return got
                received.append(int(message.data()))
                got.append(message)

        wait_until(healed, timeout_s=120, interval_s=0.5, what="every ledger on live bookies")
        after, live = ledgers_and_bookies(zookeeper_url)
        # The autorecovery copied replicas: closed ledgers that named the victim name the
        # spare now (no writer changes a closed ledger's ensembles).
        rewritten = [
            i
            for i, md in before.items()
            if md.state is LedgerState.CLOSED
            and victim.bookie_id in md.ensemble_for(0)
            and i in after
            and victim.bookie_id not in after[i].ensemble_for(0)
        ]
        assert rewritten, f"no closed ledger was re-replicated {victim.bookie_id} {before} {after}"
        for i in rewritten:
            assert after[i].last_entry_id == before[i].last_entry_id
        assert acked[-1] == next_message - 1, "sends after the bookie died were not acknowledged"
        listed = http_json(f"{brokers[1].http_url}/admin/v2/bookies/all")["bookies"]
        assert sorted(b["bookieId"] for b in listed) == sorted(live)  # type: ignore[union-attr]
        wait_until(
            lambda: set(acked) <= set(received + [int(m.data()) for m in consumer_batch()]),
            timeout_s=60,
            what="every acknowledged message consumed",
        )
        controller_id, _ = wait_until(lambda: controller(brokers[0]), timeout_s=30, what="leader")
        (leader,) = [b for b in brokers if b.broker_id == controller_id]
        wait_until(
            lambda: (
                metric(leader.http_url, "magnetar_controller_replication_tasks_in_flight") == 0.0
            ),
            timeout_s=30,
            what="no task in flight",
        )
        assert metric(leader.http_url, 'magnetar_controller_ledgers{state="UnderReplicated"}') == 0

        # A second original bookie goes: every entry still has a live replica.
        originals = {b for md in closed for b in md.ensemble_for(0)}
        second = next(b for b in bookies if b is not victim and b.bookie_id in originals)
        second.signal(signal.SIGKILL)
        sealed = sorted(i for i, md in after.items() if md.state is LedgerState.CLOSED)
        assert read_every_entry(zookeeper_url, sealed) == sum(
            after[i].last_entry_id + 1 for i in sealed
        )
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        seen: set[int] = set()
        while not set(acked) <= seen:
            seen.add(int(reader.read_next(timeout_millis=30_000).data()))
    finally:
        client.close()


def test_a_bookie_without_autorecovery_is_never_a_target(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    """Every ledger is written on three bookies; a fourth joins with ``--no-autorecovery``
    and one of the three dies. The fourth is each replica's only possible target, but it
    runs no worker: the ledgers wait under-replicated with no task in flight (were it a
    target, they would be Rereplicating at once). Restarted with autorecovery, it takes the
    copies and every ledger heals."""
    originals = start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(
        cluster_procs,
        zookeeper_url,
        tmp_path,
        2,
        "--managed-ledger-max-entries-per-ledger",
        ENTRIES_PER_LEDGER,
        "--managed-ledger-min-ledger-rollover-time-ms",
        "0",
    )
    request = urllib.request.Request(
        f"{brokers[0].http_url}/admin/v2/namespaces/public/default/retention",
        data=json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=30).close()
    client = pulsar.Client(brokers[0].url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(100):
            producer.send_async(b"%d" % i, None)
        producer.flush()
    finally:
        client.close()
    spare = BookieProcess(zookeeper_url, tmp_path / "spare", None, "--no-autorecovery")
    spare.start()
    cluster_procs.append(spare)
    wait_until(lambda: " ready" in spare.log(), timeout_s=30, what="the spare bookie")
    originals[0].signal(signal.SIGKILL)

    controller_id, _ = wait_until(lambda: controller(brokers[0]), timeout_s=30, what="leader")
    (leader,) = [b for b in brokers if b.broker_id == controller_id]

    def waiting() -> bool:
        under = metric(leader.http_url, 'magnetar_controller_ledgers{state="UnderReplicated"}')
        return bool(under) and (
            metric(leader.http_url, "magnetar_controller_replication_tasks_in_flight") == 0.0
            and metric(leader.http_url, 'magnetar_controller_ledgers{state="Rereplicating"}') == 0.0
        )

    wait_until(waiting, timeout_s=60, what="ledgers waiting with no task")
    ledgers, live = ledgers_and_bookies(zookeeper_url)
    assert spare.bookie_id in live
    assert all(spare.bookie_id not in md.ensemble_for(0) for md in ledgers.values())

    spare.signal(signal.SIGTERM)
    assert spare.proc is not None and spare.proc.wait(30) == 0
    spare.extra_args = []
    spare.start()

    def healed() -> bool:
        ledgers, live = ledgers_and_bookies(zookeeper_url)
        return spare.bookie_id in live and all(
            set(ensemble) <= live
            for md in ledgers.values()
            if md.state is LedgerState.CLOSED
            for _, ensemble in md.ensembles
        )

    wait_until(healed, timeout_s=120, interval_s=0.5, what="the closed ledgers healed")
