"""The controller's replica side on every metadata backend: the feed turns bookie
registrations and ledger metadata into replica states persisted under the epoch (the record
is the worker's command), a new controller resumes them at a higher epoch and takes a
worker's answer to the task it restamped, and a deposed controller's replica writes fail."""

from __future__ import annotations

import pytest

from magnetar.broker.controller import (
    ControllerDeposed,
    ReplicaRecord,
    ReplicaState,
    ReplicateFragment,
)
from magnetar.broker.controller.election import ControllerElection
from magnetar.broker.controller.replica_feed import ReplicaFeed
from magnetar.common.clock import ManualClock
from magnetar.ledger.metadata import LedgerMetadata, LedgerState, ledger_path
from magnetar.ledger.replication_task import OUTCOMES_PATH, ReplicationOutcome, task_of_record
from magnetar.metadata import MetadataStore

from .conftest import OpenStore
from .test_election import CommandLog

LEDGER = 7
ENSEMBLE = ("b1", "b2", "b3")
RECORD = f"/controller_state/ledgers/L{LEDGER:010d}"


async def register_bookies(store: MetadataStore, *bookies: str) -> None:
    for bookie in bookies:
        await store.create(f"/ledgers/available/{bookie}", b"{}", ephemeral=True)


async def register_workers(store: MetadataStore, *bookies: str) -> None:
    """What a bookie's replication worker does at start (``--no-autorecovery``: nothing)."""
    for bookie in bookies:
        await store.create(f"/autorecovery/workers/{bookie}", b"", ephemeral=True)


def closed_ledger() -> LedgerMetadata:
    return LedgerMetadata(
        LEDGER, 3, 2, 2, ((0, ENSEMBLE),), state=LedgerState.CLOSED, last_entry_id=99
    )


async def record(store: MetadataStore) -> ReplicaRecord | None:
    got = await store.exists(RECORD)
    return None if got is None else ReplicaRecord.from_bytes((await store.get(RECORD)).value)


def controller(store: MetadataStore, clock: ManualClock) -> ControllerElection:
    return ControllerElection(store, "broker-1", commands=CommandLog(), clock=clock)


async def test_a_departed_bookies_ledger_is_tasked_resumed_and_healed(
    open_store: OpenStore,
) -> None:
    registry = await open_store()
    await register_bookies(registry, "b1", "b3", "b4", "b5")
    await register_workers(registry, "b1", "b3", "b5")  # b4 runs with autorecovery off
    b2 = await open_store()
    await register_bookies(b2, "b2")
    await registry.put(ledger_path(LEDGER), closed_ledger().to_bytes())
    clock = ManualClock(start_ms=1000)

    first = controller(await open_store(), clock)
    epoch = await first.campaign()
    feed = ReplicaFeed(first.store, clock=clock)
    await feed.sync(first)
    assert first.replicas.state_of(LEDGER) is ReplicaState.HEALTHY
    assert await record(registry) is None

    await b2.close()  # its registration vanishes
    await feed.sync(first)
    task = ReplicateFragment(LEDGER, 0, 1, "b2", "b5", epoch)
    got = await record(registry)
    assert got == ReplicaRecord(ReplicaState.REREPLICATING, epoch, 1000, task)
    # The record is the command the target's worker reads.
    assert task_of_record((await registry.get(RECORD)).value) == task

    # The controller goes; the next resumes the task, restamped with its epoch.
    await first.resign()
    second = controller(await open_store(), clock)
    new_epoch = await second.campaign()
    assert new_epoch > epoch
    restamped = ReplicateFragment(LEDGER, 0, 1, "b2", "b5", new_epoch)
    assert second.replicas.tasks_in_flight == [restamped]
    got = await record(registry)
    assert got is not None and got.task == restamped and got.epoch == new_epoch
    with pytest.raises(ControllerDeposed):
        await first.bookie_joined("b2")

    # The worker finished the copy it was asked for at the old epoch: the answer counts.
    healed = closed_ledger().with_ensemble(0, ("b1", "b5", "b3"))
    await registry.put(ledger_path(LEDGER), healed.to_bytes())
    await registry.put(
        f"{OUTCOMES_PATH}/L{LEDGER:010d}", ReplicationOutcome(task, ok=True).to_bytes()
    )
    feed = ReplicaFeed(second.store, clock=clock)
    await feed.sync(second)
    assert second.replicas.state_of(LEDGER) is ReplicaState.HEALTHY
    assert second.replicas.tasks_in_flight == []
    assert await record(registry) is None
    assert await registry.children(OUTCOMES_PATH) == []


async def test_a_failed_answer_is_retried_after_the_backoff_and_a_deleted_ledger_forgotten(
    open_store: OpenStore,
) -> None:
    registry = await open_store()
    await register_bookies(registry, "b1", "b3", "b4")
    await register_workers(registry, "b1", "b3", "b4")
    await registry.put(ledger_path(LEDGER), closed_ledger().to_bytes())
    clock = ManualClock(start_ms=1000)
    ctl = controller(await open_store(), clock)
    epoch = await ctl.campaign()  # b2 is not registered: tasked at once
    task = ReplicateFragment(LEDGER, 0, 1, "b2", "b4", epoch)
    assert ctl.replicas.tasks_in_flight == [task]
    feed = ReplicaFeed(ctl.store, clock=clock)
    await feed.sync(ctl)

    outcome = ReplicationOutcome(task, ok=False, error="BookieUnavailable: b1 down")
    await registry.put(f"{OUTCOMES_PATH}/L{LEDGER:010d}", outcome.to_bytes())
    await feed.sync(ctl)
    got = await record(registry)
    assert got is not None and got.state is ReplicaState.UNDER_REPLICATED
    clock.advance(1.0)  # the first backoff
    await ctl.tick()
    retry = ReplicateFragment(LEDGER, 0, 1, "b2", "b4", epoch, attempt=2)
    got = await record(registry)
    assert got is not None and got.task == retry

    await registry.delete(ledger_path(LEDGER))
    clock.advance(60.0)  # past the full-scan interval
    await feed.sync(ctl)
    assert await record(registry) is None
    assert ctl.replicas.tasks_in_flight == []
