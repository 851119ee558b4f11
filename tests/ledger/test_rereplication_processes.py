"""Autorecovery with bookie processes on a real ZooKeeper: a bookie is SIGKILLed, its
registration expires, and the replica state machine with the replication worker bring the
ledger back to its write quorum on live bookies, checked through the ledger metadata.

This test plays the controller's loop and the worker itself
(:func:`~.autorecovery_round.controller_round`)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from magnetar.broker.controller import ReplicaStateMachine, ReplicateFragment
from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.ledger.fragments import missing_replicas
from magnetar.metadata import MetadataStore
from magnetar.testing import wait_until_async
from magnetar.testing.bookie import BookieProcess

from .autorecovery_round import controller_round
from .test_processes import payload, start, store

__all__ = ["store"]  # fixture

ENTRIES = 3_000


async def test_a_killed_bookies_replicas_are_copied_to_the_spare(
    store: MetadataStore, zookeeper_url: str, tmp_path: Path, procs: list[BookieProcess]
) -> None:
    await start(procs, store, zookeeper_url, tmp_path, 4)
    loop = asyncio.get_running_loop()
    client = LedgerClient(store, config=LedgerClientConfig(request_timeout_ms=3_000))
    try:
        handle = await client.create(3, 2, 2)
        for first in range(0, ENTRIES, 500):
            await asyncio.gather(
                *(handle.add_nowait(payload(e)) for e in range(first, first + 500))
            )
        await handle.close()
        ledger_id = handle.ledger_id
        md, version = await client.get_metadata(ledger_id)
        ensemble = md.current_ensemble
        by_id = {p.bookie_id: p for p in procs}
        (spare,) = set(by_id) - set(ensemble)

        machine = ReplicaStateMachine(
            1,
            ledgers={ledger_id: (md, version)},
            live_bookies=await client.available_bookies(),
        )
        assert machine.start(int(loop.time() * 1000)) == []

        victim = by_id[ensemble[1]]
        victim.signal(signal.SIGKILL)
        tasks: list[ReplicateFragment] = []

        async def healthy() -> bool:
            tasks.extend(await controller_round(machine, client))
            return victim.bookie_id not in machine.live_bookies and not machine.records

        await wait_until_async(healthy, timeout_s=60, what="the ledger to heal")
        assert tasks == [ReplicateFragment(ledger_id, 0, 1, ensemble[1], spare, 1)]
        healed, _ = await client.get_metadata(ledger_id)
        assert healed.ensembles == ((0, (ensemble[0], spare, ensemble[2])),)
        assert missing_replicas(healed, set(await client.available_bookies())) == []
    finally:
        await client.close()

    # Every entry is still readable with a second original bookie gone as well.
    by_id[ensemble[0]].signal(signal.SIGKILL)
    reader_client = LedgerClient(
        store, config=LedgerClientConfig(request_timeout_ms=3_000, speculative_read_timeout_ms=200)
    )
    try:
        reader = await reader_client.open(ledger_id)
        entries = await reader.read(0, ENTRIES - 1)
        assert [e.data for e in entries] == [payload(i) for i in range(ENTRIES)]
    finally:
        await reader_client.close()
