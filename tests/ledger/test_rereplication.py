"""Autorecovery over real bookies on loopback: the replica state machine assigns the task,
the worker copies the fragment replica over the bookie protocol and replaces the bookie in
the ledger metadata, and the entries survive the loss of a second original bookie."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie import Bookie
from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.broker.controller import (
    DeleteReplicaState,
    ReplicaStateMachine,
    ReplicateFragment,
    WriteReplicaState,
)
from magnetar.ledger import BookieUnavailable, LedgerClient, LedgerClientConfig
from magnetar.ledger.fragments import plan_rereplication
from magnetar.ledger.metadata import LedgerMetadata
from magnetar.ledger.rereplication import rereplicate_fragment
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async

from .test_ledger import start_bookies

CONFIG = LedgerClientConfig(request_timeout_ms=2_000, speculative_read_timeout_ms=200)
ENTRIES = 150


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await connect("memory:")
    yield s
    await s.close()


@pytest.fixture(params=["tcp", "local"])
def transport(request: pytest.FixtureRequest) -> str:
    """The worker's bookie connections: the bookie protocol over TCP, or the standalone's
    in-process transports (one contract)."""
    return str(request.param)


@pytest.fixture
async def bookies(store: MetadataStore, tmp_path: Path) -> AsyncIterator[list[Bookie]]:
    bs = await start_bookies(store, tmp_path, 4)
    yield bs
    for b in bs:
        await b.stop()


async def closed_ledger(client: LedgerClient) -> tuple[LedgerMetadata, int]:
    handle = await client.create(3, 2, 2)
    for i in range(ENTRIES):
        await handle.add(b"entry-%d" % i)
    await handle.close()
    return await client.get_metadata(handle.ledger_id)


async def stop_bookie(client: LedgerClient, bookie: Bookie) -> None:
    await bookie.stop()

    async def unregistered() -> bool:
        return bookie.bookie_id not in await client.available_bookies()

    await wait_until_async(unregistered, what=f"{bookie.bookie_id} to unregister")


async def test_a_lost_replica_is_copied_and_survives_a_second_loss(
    store: MetadataStore, bookies: list[Bookie], transport: str
) -> None:
    by_id = {b.bookie_id: b for b in bookies}
    client = LedgerClient(
        store, config=CONFIG, local_bookies=bookies if transport == "local" else ()
    )
    try:
        md, version = await closed_ledger(client)
        ensemble = md.current_ensemble
        (spare,) = set(by_id) - set(ensemble)
        machine = ReplicaStateMachine(
            1, ledgers={md.ledger_id: (md, version)}, live_bookies=sorted(by_id)
        )
        assert machine.start(0) == []

        await stop_bookie(client, by_id[ensemble[1]])
        task = ReplicateFragment(md.ledger_id, 0, 1, ensemble[1], spare, 1)
        effects = machine.bookie_left(ensemble[1], 100)
        assert effects[1:] == [task] and isinstance(effects[0], WriteReplicaState)

        healed, healed_version = await rereplicate_fragment(
            client,
            task.ledger_id,
            task.first_entry,
            task.bookie_index,
            task.missing_bookie,
            task.target_bookie,
            copies_in_flight_max=16,
        )
        assert healed.ensembles == ((0, (ensemble[0], spare, ensemble[2])),)
        assert await client.get_metadata(md.ledger_id) == (healed, healed_version)
        assert machine.fragment_replicated(task, healed, healed_version, 200) == [
            DeleteReplicaState(md.ledger_id, 1)
        ]

        # The spare holds what the lost bookie held, with intact checksums ...
        plan = plan_rereplication(md, 0, 1, ensemble[1], spare)
        assert plan is not None
        held = list(plan.entries())
        assert len(held) == ENTRIES * 2 // 3
        for entry_id in held:
            resp, payload = await client.pool.call(
                spare, Request(op=OpType.READ_ENTRY, ledger_id=md.ledger_id, entry_id=entry_id)
            )
            assert resp.status == Status.OK and payload == b"entry-%d" % entry_id
        # ... so every entry stays readable when a second original bookie goes too: the
        # entries on {ensemble[0], ensemble[1]} now live on ensemble[0] and the spare.
        await stop_bookie(client, by_id[ensemble[0]])
        reader_client = LedgerClient(store, config=CONFIG)
        try:
            reader = await reader_client.open(md.ledger_id)
            entries = await reader.read(0, ENTRIES - 1)
            assert [e.data for e in entries] == [b"entry-%d" % i for i in range(ENTRIES)]
        finally:
            await reader_client.close()

        # A repeated task finds the replica replaced: nothing copied, nothing written.
        assert await rereplicate_fragment(client, md.ledger_id, 0, 1, ensemble[1], spare) == (
            healed,
            healed_version,
        )
    finally:
        await client.close()


async def test_a_copy_without_a_surviving_replica_leaves_the_metadata_alone(
    store: MetadataStore, bookies: list[Bookie]
) -> None:
    by_id = {b.bookie_id: b for b in bookies}
    client = LedgerClient(store, config=CONFIG)
    try:
        md, version = await closed_ledger(client)
        ensemble = md.current_ensemble
        (spare,) = set(by_id) - set(ensemble)
        with pytest.raises(ValueError):
            await rereplicate_fragment(client, md.ledger_id, 0, 1, ensemble[1], ensemble[2])
        # entries on {ensemble[0], ensemble[1]} have no replica left once both are gone
        await stop_bookie(client, by_id[ensemble[0]])
        await stop_bookie(client, by_id[ensemble[1]])
        with pytest.raises(BookieUnavailable):
            await rereplicate_fragment(client, md.ledger_id, 0, 1, ensemble[1], spare)
        assert await client.get_metadata(md.ledger_id) == (md, version)
    finally:
        await client.close()
