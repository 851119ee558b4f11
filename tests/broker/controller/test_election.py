"""ControllerElection on every metadata backend: the winner persists bundle states under
its epoch, a deposed controller's writes fail and change nothing, and the next controller
resumes the states with a higher epoch."""

from __future__ import annotations

import asyncio
from typing import NamedTuple
from urllib.parse import unquote

import pytest

from magnetar.broker.controller import (
    AssignBundle,
    BrokerCommand,
    BundleId,
    BundleRecord,
    BundleState,
    ControllerDeposed,
    CorruptRecord,
    NamespaceBundles,
    ReleaseBundle,
    StaleControllerEpoch,
)
from magnetar.broker.controller.election import ControllerElection
from magnetar.common.clock import ManualClock
from magnetar.metadata import MetadataStore

from .conftest import OpenStore

WAIT_S = 20.0
TOPIC = "persistent://public/default/t"
BUNDLES = NamespaceBundles.default("public/default").bundles


class CommandLog:
    """The command transport seam: records what the controller sent, in order."""

    def __init__(self) -> None:
        self.sent: list[BrokerCommand] = []

    async def send(self, command: BrokerCommand) -> None:
        self.sent.append(command)


async def register(store: MetadataStore, *brokers: str) -> None:
    for broker in brokers:
        await store.create(f"/loadbalance/brokers/{broker}", b"", ephemeral=True)


async def persisted(ctl: ControllerElection, store: MetadataStore) -> dict[str, BundleRecord]:
    out = {}
    for name in await store.children(ctl.bundles_path):
        value = (await store.get(f"{ctl.bundles_path}/{name}")).value
        out[BundleId.parse(unquote(name)).name] = BundleRecord.from_bytes(value)
    return out


def candidate(store: MetadataStore, broker: str, log: CommandLog) -> ControllerElection:
    return ControllerElection(store, broker, commands=log, clock=ManualClock(start_ms=1000))


class OneBundleController(NamedTuple):
    registry: MetadataStore
    controller: ControllerElection
    epoch: int
    bundle: BundleId
    log: CommandLog
    clock: ManualClock


async def controller_of_one_bundle(open_store: OpenStore) -> OneBundleController:
    """Broker b1 registered and elected controller (its own store session, clock at 1 s),
    with namespace t/n of one bundle added: the bundle's assignment is sent."""
    registry = await open_store()
    await register(registry, "b1")
    log = CommandLog()
    clock = ManualClock(start_ms=1000)
    controller = ControllerElection(await open_store(), "b1", commands=log, clock=clock)
    epoch = await controller.campaign()
    await controller.namespace_added(NamespaceBundles.default("t/n", 1))
    bundle = NamespaceBundles.default("t/n", 1).bundles[0]
    return OneBundleController(registry, controller, epoch, bundle, log, clock)


async def test_takeover_resumes_states_at_a_higher_epoch(open_store: OpenStore) -> None:
    registry = await open_store()
    await register(registry, "b1", "b2")
    log_a, log_b = CommandLog(), CommandLog()
    a = candidate(await open_store(), "b1", log_a)
    b = candidate(await open_store(), "b2", log_b)
    epoch_a = await a.campaign()
    assert await a.election.current_leader() == (b"b1", epoch_a)
    assert await a.lookup(TOPIC) is None  # assigned, not yet acknowledged
    assert log_a.sent == [
        AssignBundle(BUNDLES[0], "b1", epoch_a),
        AssignBundle(BUNDLES[1], "b2", epoch_a),
        AssignBundle(BUNDLES[2], "b1", epoch_a),
        AssignBundle(BUNDLES[3], "b2", epoch_a),
    ]
    for command in log_a.sent[:3]:
        await a.ownership_acquired(command.bundle, command.broker, epoch_a)
    # split an owned bundle: released first; the release is in flight at takeover
    await a.split(BUNDLES[0])
    assert log_a.sent[-1] == ReleaseBundle(BUNDLES[0], "b1", epoch_a)
    states_a = await persisted(a, registry)
    assert {n: (r.state, r.broker, r.epoch) for n, r in states_a.items()} == {
        BUNDLES[0].name: (BundleState.RELEASING, "b1", epoch_a),
        BUNDLES[1].name: (BundleState.OWNED, "b2", epoch_a),
        BUNDLES[2].name: (BundleState.OWNED, "b1", epoch_a),
        BUNDLES[3].name: (BundleState.ASSIGNING, "b2", epoch_a),
    }
    assert await a.lookup(TOPIC) == "b1"  # t's bundle is 0x80000000_0xc0000000

    b_task = asyncio.create_task(b.campaign())
    await a.store.expire_session()  # type: ignore[attr-defined]
    async with asyncio.timeout(WAIT_S):
        epoch_b = await b_task
    assert epoch_b > epoch_a
    assert await b.election.current_leader() == (b"b2", epoch_b)
    # b resumed a's states: owned ones as they were, in-flight ones restamped and resent
    assert log_b.sent == [
        ReleaseBundle(BUNDLES[0], "b1", epoch_b),
        AssignBundle(BUNDLES[3], "b2", epoch_b),
    ]
    states_b = await persisted(b, registry)
    assert states_b[BUNDLES[1].name] == states_a[BUNDLES[1].name]
    assert states_b[BUNDLES[0].name].epoch == epoch_b
    assert states_b[BUNDLES[0].name].split_after_release
    assert states_b[BUNDLES[3].name].epoch == epoch_b
    # the deposed controller can change nothing
    with pytest.raises(ControllerDeposed):
        await a.unload(BUNDLES[1])
    assert await persisted(b, registry) == states_b
    # the old epoch's acks are refused by the new controller; the new epoch's work
    with pytest.raises(StaleControllerEpoch):
        await b.ownership_released(BUNDLES[0], "b1", epoch_a)
    await b.ownership_released(BUNDLES[0], "b1", epoch_b)
    halves = NamespaceBundles.default("public/default").split(BUNDLES[0])[1]
    namespace = b.machine.namespace("public/default")
    assert namespace is not None and len(namespace.bundles) == 5
    states = await persisted(b, registry)
    assert BUNDLES[0].name not in states
    assert {states[h.name].state for h in halves} == {BundleState.ASSIGNING}
    assert all(r.epoch <= epoch_b for r in states.values())
    await b.resign()


async def test_write_of_a_controller_behind_the_epoch_is_fenced(open_store: OpenStore) -> None:
    registry, a, epoch_a, whole, log, _ = await controller_of_one_bundle(open_store)
    assert log.sent == [AssignBundle(whole, "b1", epoch_a)]
    before = await persisted(a, registry)
    # a newer controller won an epoch that this one has not noticed yet (it watches
    # /controller, not the epoch node): its next write is refused by the version check
    stat = await registry.put(a.election.epoch_path, str(epoch_a + 1).encode(), epoch_a)
    assert stat.version == epoch_a + 1
    with pytest.raises(ControllerDeposed, match="FencedByEpoch"):
        await a.ownership_acquired(whole, "b1", epoch_a)
    assert await persisted(a, registry) == before
    with pytest.raises(ControllerDeposed):
        await a.tick()


async def test_commands_alone_are_fenced_too(open_store: OpenStore) -> None:
    registry, a, epoch_a, whole, log, clock = await controller_of_one_bundle(open_store)
    clock.advance(5.0)  # the assignment is due to be sent again: a command, no write
    await a.tick()
    assert log.sent == [AssignBundle(whole, "b1", epoch_a)] * 2
    await registry.put(a.election.epoch_path, str(epoch_a + 1).encode(), epoch_a)
    clock.advance(5.0)
    with pytest.raises(ControllerDeposed, match="FencedByEpoch"):
        await a.tick()
    assert log.sent == [AssignBundle(whole, "b1", epoch_a)] * 2  # nothing more went out


async def test_new_controller_reassigns_bundles_of_unregistered_brokers(
    open_store: OpenStore,
) -> None:
    registry = await open_store()
    b2_session = await open_store()
    await register(registry, "b1")
    await register(b2_session, "b2")
    log_a, log_b = CommandLog(), CommandLog()
    a = candidate(await open_store(), "b1", log_a)
    epoch_a = await a.campaign()
    await a.namespace_added(NamespaceBundles.default("t/n", 2))
    for command in log_a.sent:
        await a.ownership_acquired(command.bundle, command.broker, epoch_a)
    owners = {r.broker for r in (await persisted(a, registry)).values()}
    assert owners == {"b1", "b2"}
    await a.resign()
    await b2_session.close()  # b2's registration goes with its session
    b = candidate(await open_store(), "b3", log_b)
    epoch_b = await b.campaign()
    assert epoch_b == epoch_a + 1
    states = await persisted(b, registry)
    assert {(r.state, r.broker) for r in states.values()} == {
        (BundleState.OWNED, "b1"),
        (BundleState.ASSIGNING, "b1"),
    }
    assert [type(c) for c in log_b.sent] == [AssignBundle]
    assert log_b.sent[0].broker == "b1" and log_b.sent[0].epoch == epoch_b


@pytest.mark.parametrize(
    ("node", "value"),
    [
        ("/controller_state/bundles/t%2Fn%2F0x00000000_0xffffffff", b"{not json"),
        ("/controller_state/bundles/not-a-bundle", b"{}"),
        ("/controller_state/namespaces/t%2Fn", b'{"boundaries": ["0x0", "0x5"]}'),
    ],
)
async def test_corrupt_state_refuses_to_lead_and_lets_others_try(
    open_store: OpenStore, node: str, value: bytes
) -> None:
    registry = await open_store()
    await registry.put(node, value)
    a = candidate(await open_store(), "b1", CommandLog())
    with pytest.raises(CorruptRecord, match=node.replace("%", ".")):
        await a.campaign()
    assert await a.election.current_leader() is None  # resigned: nobody is stuck behind it
    with pytest.raises(ControllerDeposed):
        await a.tick()


async def test_a_reader_while_the_winner_resumes_sees_no_controller_yet(
    open_store: OpenStore,
) -> None:
    """The election is won before the persisted states are read: a metrics scrape or an
    admin call in between is told this broker is not (yet) the controller, never half of
    one (a scrape there answered HTTP 500)."""
    registry = await open_store()
    await register(registry, "b1")
    controller = candidate(await open_store(), "b1", CommandLog())
    resuming, release = asyncio.Event(), asyncio.Event()
    resume_replicas = controller._resume_replicas

    async def slow_resume_replicas(epoch: int):  # type: ignore[no-untyped-def]
        resuming.set()
        await release.wait()
        return await resume_replicas(epoch)

    controller._resume_replicas = slow_resume_replicas  # type: ignore[method-assign]
    campaign = asyncio.create_task(controller.campaign())
    async with asyncio.timeout(WAIT_S):
        await resuming.wait()
    assert controller.election.is_leader
    with pytest.raises(ControllerDeposed):
        _ = controller.machine
    with pytest.raises(ControllerDeposed):
        _ = controller.replicas
    release.set()
    async with asyncio.timeout(WAIT_S):
        await campaign
    assert controller.replicas.records == {} and controller.machine.records == {}
    await controller.resign()
