"""The broker's ownership rules (:mod:`magnetar.broker.bundle_ownership`) as exact effect
lists, and the shell's epoch fence on a real (in-memory) metadata store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import pytest

from magnetar.broker.bundle_ownership import (
    AcquireOwnership,
    BundleOwnership,
    Holding,
    ReleaseOwnership,
)
from magnetar.broker.controller import BundleId, BundleRecord, BundleState, NamespaceBundles
from magnetar.broker.controller.election import ControllerElection
from magnetar.broker.ownership import (
    CONTROLLER_EPOCH_PATH,
    BrokerAddress,
    ClusterOwnership,
    ownership_path,
)
from magnetar.common.clock import ManualClock, SystemClock
from magnetar.common.errors import ServiceNotReady
from magnetar.common.names import TopicName
from magnetar.metadata import connect
from magnetar.metadata.store import MetadataStore
from magnetar.testing import wait_until_async

ME = "127.0.0.1:8080"
OTHER = "127.0.0.1:8081"
B = BundleId.parse("public/default/0x00000000_0x40000000")


def rec(state: BundleState, broker: str | None, epoch: int = 1) -> BundleRecord:
    return BundleRecord(state, broker, epoch, 0)


def test_an_assignment_is_acquired_then_served() -> None:
    core = BundleOwnership(ME)
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME), 0) == [AcquireOwnership(B, 1)]
    assert not core.serves(B)  # not before the node exists
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME), 1) == []  # one at a time
    assert core.acquired(B, 2) == []
    assert core.serves(B)
    assert core.record_seen(B, rec(BundleState.OWNED, ME), 3) == []


def test_records_for_other_brokers_are_ignored() -> None:
    core = BundleOwnership(ME)
    assert core.record_seen(B, rec(BundleState.ASSIGNING, OTHER), 0) == []
    assert core.record_seen(B, rec(BundleState.UNASSIGNED, None), 0) == []
    assert core.holding(B) is None


def test_releasing_stops_serving_before_the_node_goes() -> None:
    core = BundleOwnership(ME)
    core.record_seen(B, rec(BundleState.OWNED, ME), 0)
    core.acquired(B, 0)
    assert core.record_seen(B, rec(BundleState.RELEASING, ME, 2), 1) == [ReleaseOwnership(B)]
    assert not core.serves(B)
    assert core.holding(B) is Holding.RELEASING
    assert core.released(B, 2) == []
    assert core.holding(B) is None


def test_a_record_gone_after_a_split_releases_the_bundle() -> None:
    core = BundleOwnership(ME)
    core.record_seen(B, rec(BundleState.OWNED, ME), 0)
    core.acquired(B, 0)
    assert core.record_seen(B, None, 1) == [ReleaseOwnership(B)]


def test_a_release_asked_while_acquiring_follows_the_acquisition() -> None:
    core = BundleOwnership(ME)
    core.record_seen(B, rec(BundleState.ASSIGNING, ME), 0)
    assert core.record_seen(B, rec(BundleState.RELEASING, ME, 2), 1) == []
    assert core.acquired(B, 2) == [ReleaseOwnership(B)]
    assert not core.serves(B)


def test_reassigned_during_a_release_is_acquired_again_after_it() -> None:
    core = BundleOwnership(ME)
    core.record_seen(B, rec(BundleState.OWNED, ME), 0)
    core.acquired(B, 0)
    core.record_seen(B, rec(BundleState.UNASSIGNED, None, 2), 1)
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME, 3), 2) == []
    assert core.released(B, 3) == [AcquireOwnership(B, 3)]


def test_a_fenced_command_is_dropped_until_a_newer_record() -> None:
    core = BundleOwnership(ME)
    core.record_seen(B, rec(BundleState.ASSIGNING, ME, 1), 0)
    assert core.acquire_failed(B, 1, 1, fenced=True) == []
    assert core.holding(B) is None
    assert core.tick(10_000) == []
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME, 1), 2) == [AcquireOwnership(B, 1)]
    core.acquire_failed(B, 1, 3, fenced=True)
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME, 2), 4) == [AcquireOwnership(B, 2)]


def test_an_unfenced_failure_is_retried_after_the_delay() -> None:
    core = BundleOwnership(ME, acquire_retry_ms=1_000)
    core.record_seen(B, rec(BundleState.ASSIGNING, ME), 0)
    assert core.acquire_failed(B, 1, 100, fenced=False) == []
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME), 500) == []  # waits
    assert core.tick(1_099) == []
    assert core.tick(1_100) == [AcquireOwnership(B, 1)]


def test_a_late_read_of_an_older_record_is_ignored() -> None:
    core = BundleOwnership(ME)
    core.record_seen(B, rec(BundleState.ASSIGNING, ME, 3), 0)
    core.acquired(B, 0)
    assert core.record_seen(B, rec(BundleState.ASSIGNING, ME, 2), 1) == []
    assert core.serves(B)


class _NoCommands:
    async def send(self, command: object) -> None:
        pass


async def _ownership(store: MetadataStore) -> ClusterOwnership:
    async def unload(_bundle: BundleId) -> None:
        pass

    own = ClusterOwnership(store, unload_bundle=unload, clock=SystemClock(), rescan_interval_ms=50)
    await own.start(BrokerAddress(ME, "pulsar://127.0.0.1:6650", None, "http://127.0.0.1:8080"))
    return own


async def test_a_deposed_controllers_assignment_is_not_obeyed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker checks the command's epoch itself: a record written at an epoch that is
    no longer the controller's creates no ownership node; the same at the current one
    does, and the node names this broker and that epoch."""
    store = await connect("memory:")
    own = None
    try:
        election = ControllerElection(store, ME, commands=_NoCommands(), clock=ManualClock())
        await election.campaign()  # creates the state directories; epoch 1
        await election.resign()
        await store.put(CONTROLLER_EPOCH_PATH, b"2")  # a newer controller won since
        path = election.bundle_path(B)
        namespace = election.namespace_path(B.namespace)
        await store.put(namespace, b'{"boundaries": ["0x00000000", "0x40000000", "0xffffffff"]}')
        await store.put(path, rec(BundleState.ASSIGNING, ME, 1).to_bytes())
        caplog.set_level(logging.INFO, "magnetar.broker.ownership")
        own = await _ownership(store)
        await wait_until_async(
            lambda: "epoch 1 is over" in caplog.text or own.core.holding(B) is not None,
            timeout_s=5,
            what="the stale command handled",
        )
        assert await store.exists(ownership_path(B)) is None
        assert not own.serves(TopicName.parse("persistent://public/default/t"))
        epoch_now = (await store.get(CONTROLLER_EPOCH_PATH)).stat.version
        await store.put(path, rec(BundleState.ASSIGNING, ME, epoch_now).to_bytes())
        await wait_until_async(lambda: own.core.serves(B), timeout_s=5, what="the bundle held")
        node = BrokerAddress.from_json((await store.get(ownership_path(B))).value)
        assert node.broker_id == ME
    finally:
        if own is not None:
            await own.close()
        with contextlib.suppress(Exception):
            await store.close()


async def test_a_lookup_does_not_send_clients_to_an_owner_that_refuses_connections() -> None:
    """A SIGKILLed owner's ownership node lingers until its session expires; a lookup in
    that window waits for the new owner instead of answering the dead one (whose refused
    connection would put the client into its reconnect backoff)."""
    store = await connect("memory:")
    own = None
    live = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
    try:
        live_port = live.sockets[0].getsockname()[1]
        with socket.socket() as s:  # a port nothing listens on any more
            s.bind(("127.0.0.1", 0))
            dead_port = s.getsockname()[1]
        await store.put(
            "/controller_state/namespaces/public%2Fdefault",
            b'{"boundaries": ["0x00000000", "0x40000000", "0xffffffff"]}',
        )
        dead = BrokerAddress(OTHER, f"pulsar://127.0.0.1:{dead_port}", None, "http://x:1")
        alive = BrokerAddress("127.0.0.1:8082", f"pulsar://127.0.0.1:{live_port}", None, "h")
        await store.put("/namespace/public/default", b"")
        await store.create(ownership_path(B), dead.ownership_json(1), ephemeral=True)
        own = await _ownership(store)
        bundles = NamespaceBundles.from_names("public/default", ["0x00000000", "0x40000000",
                                                                  "0xffffffff"])  # fmt: skip
        topic = next(
            t
            for i in range(1000)
            if bundles.bundle_for_topic(t := TopicName.parse(f"persistent://public/default/t{i}"))
            == B
        )
        with pytest.raises(ServiceNotReady, match="is down"):
            await own.owner(topic, timeout_ms=300)

        async def move() -> None:
            await store.delete(ownership_path(B))  # the dead owner's session expired
            await store.create(ownership_path(B), alive.ownership_json(1), ephemeral=True)

        waiting = asyncio.create_task(own.owner(topic, timeout_ms=10_000))
        await move()
        assert (await waiting).broker_id == "127.0.0.1:8082"
    finally:
        live.close()
        if own is not None:
            await own.close()
        with contextlib.suppress(Exception):
            await store.close()


async def test_a_topic_request_during_the_acquisition_waits_for_it() -> None:
    """Another broker's lookup reads the ownership node as soon as it exists, before this
    broker has the create's reply: a client sent here then waits for the bundle instead of
    being refused ("not served"). A bundle this broker is not taking is refused at once."""
    store = await connect("memory:")
    own = None
    try:
        election = ControllerElection(store, ME, commands=_NoCommands(), clock=ManualClock())
        await election.campaign()
        await store.put(
            election.namespace_path(B.namespace),
            b'{"boundaries": ["0x00000000", "0x40000000", "0xffffffff"]}',
        )
        epoch = (await store.get(CONTROLLER_EPOCH_PATH)).stat.version
        own = await _ownership(store)
        await store.put(election.bundle_path(B), rec(BundleState.ASSIGNING, ME, epoch).to_bytes())
        await wait_until_async(lambda: own.core.serves(B), timeout_s=5, what="the bundle held")
        topic = next(
            t
            for i in range(1000)
            if own.bundle_of(t := TopicName.parse(f"persistent://public/default/t{i}")) == B
        )
        own.core._holding[B] = Holding.ACQUIRING  # the create sent, its reply not yet in
        waiting = asyncio.create_task(own.serving_soon(topic, timeout_ms=5_000))
        await asyncio.sleep(0)
        assert not waiting.done()
        own.core.acquired(B, 0)
        own._wake_lookups()
        assert await waiting
        own.core._holding.pop(B)
        assert not await own.serving_soon(topic, timeout_ms=5_000)  # not taking it: no wait
    finally:
        if own is not None:
            await own.close()
        with contextlib.suppress(Exception):
            await store.close()
