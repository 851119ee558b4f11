"""The replication worker over real bookies on loopback: it runs the tasks that the
controller's replica records give its bookie, answers at ``/autorecovery/outcomes``, leaves
other bookies' tasks alone, answers a task that cannot be done with a failure, and runs a
task again only once its record asks anew."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from magnetar.bookie import Bookie
from magnetar.broker.controller import ReplicaRecord, ReplicaState, ReplicateFragment
from magnetar.common.clock import SystemClock
from magnetar.ledger import LedgerClient, LedgerClientConfig
from magnetar.ledger.replication_task import (
    OUTCOMES_PATH,
    REPLICA_RECORDS_PATH,
    ReplicationOutcome,
    record_name,
)
from magnetar.ledger.replication_worker import ReplicationWorker
from magnetar.metadata import MetadataStore, connect
from magnetar.metadata.store import NotFound
from magnetar.testing import wait_until_async

from .test_rereplication import ENTRIES, bookies, closed_ledger, stop_bookie

__all__ = ["bookies"]  # fixture

CONFIG = LedgerClientConfig(request_timeout_ms=2_000, speculative_read_timeout_ms=200)


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await connect("memory:")
    yield s
    await s.close()


async def ask(store: MetadataStore, task: ReplicateFragment) -> None:
    """Write the controller's record carrying ``task`` (what the controller's transaction
    does)."""
    record = ReplicaRecord(ReplicaState.REREPLICATING, task.epoch, 0, task)
    await store.put(f"{REPLICA_RECORDS_PATH}/{record_name(task.ledger_id)}", record.to_bytes())


async def outcome(store: MetadataStore, ledger_id: int) -> ReplicationOutcome | None:
    try:
        got = await store.get(f"{OUTCOMES_PATH}/{record_name(ledger_id)}")
    except NotFound:
        return None
    return ReplicationOutcome.from_bytes(got.value)


async def test_the_worker_runs_its_bookies_tasks_and_answers(
    store: MetadataStore, bookies: list[Bookie]
) -> None:
    by_id = {b.bookie_id: b for b in bookies}
    client = LedgerClient(store, config=CONFIG)
    worker_client = LedgerClient(store, config=CONFIG)
    workers: list[ReplicationWorker] = []
    try:
        md, _ = await closed_ledger(client)
        other, _ = await closed_ledger(client)
        ensemble = md.current_ensemble
        (spare,) = set(by_id) - set(ensemble)
        await stop_bookie(client, by_id[ensemble[1]])
        for bookie in sorted(by_id):
            worker = ReplicationWorker(
                store, bookie, worker_client, clock=SystemClock(), tasks_in_flight_max=1
            )
            worker.start()
            workers.append(worker)
        (spare_worker,) = [w for w in workers if w.bookie_id == spare]

        task = ReplicateFragment(md.ledger_id, 0, 1, ensemble[1], spare, epoch=3)
        await ask(store, task)

        async def answered() -> ReplicationOutcome | None:
            return await outcome(store, md.ledger_id)

        got = await wait_until_async(answered, what="the worker's answer")
        assert got == ReplicationOutcome(task, ok=True)
        healed, _ = await client.get_metadata(md.ledger_id)
        assert healed.ensembles == ((0, (ensemble[0], spare, ensemble[2])),)
        assert spare_worker.completed == 1
        assert sum(w.completed + w.failed for w in workers) == 1  # only the target ran it

        # Not run again while the record still shows the same work, whatever its epoch.
        await store.delete(f"{OUTCOMES_PATH}/{record_name(md.ledger_id)}")
        await ask(store, ReplicateFragment(md.ledger_id, 0, 1, ensemble[1], spare, epoch=4))
        # A task that cannot be done (the target is in the fragment's ensemble) fails.
        bad = ReplicateFragment(other.ledger_id, 0, 0, other.current_ensemble[0], spare, 4)
        if spare not in other.current_ensemble:
            bad = ReplicateFragment(
                other.ledger_id, 0, 0, other.current_ensemble[0], other.current_ensemble[1], 4
            )
        await ask(store, bad)

        async def failed() -> ReplicationOutcome | None:
            return await outcome(store, other.ledger_id)

        got = await wait_until_async(failed, what="the failure answered")
        assert got is not None and not got.ok and got.task == bad and "ValueError" in got.error
        assert await outcome(store, md.ledger_id) is None
        assert spare_worker.completed == 1

        # The controller asks anew (a later attempt): run again, nothing left to copy.
        retry = ReplicateFragment(md.ledger_id, 0, 1, ensemble[1], spare, epoch=4, attempt=2)
        await ask(store, retry)
        got = await wait_until_async(answered, what="the retry's answer")
        assert got == ReplicationOutcome(retry, ok=True)
        entries = await (await client.open(md.ledger_id)).read(0, ENTRIES - 1)
        assert len(entries) == ENTRIES
    finally:
        for worker in workers:
            await worker.close()
        await worker_client.close()
        await client.close()
