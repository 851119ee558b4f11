"""A cluster broker whose metadata session is lost can no longer vouch for any topic: its
ownership nodes are gone and another broker may own its bundles already. Until it stops it
answers LOOKUP, PARTITIONED_METADATA, PRODUCER and SUBSCRIBE with ServiceNotReady (the client
looks the topic up again and finds the new owner), never MetadataError, even for a topic it
served a moment ago.

One broker in this process (bundle ownership and controller on an in-memory metadata store,
one real bookie), reached over loopback with our codec; the session ends by
``expire_session``, as a ZooKeeper session expires.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from magnetar.bookie import Bookie, BookieConfig
from magnetar.broker.config import BrokerConfig
from magnetar.broker.controller.bundles import BundleId
from magnetar.broker.controller.election import REGISTRATIONS_PATH
from magnetar.broker.controller.runner import ControllerRunner
from magnetar.broker.ownership import BrokerAddress, ClusterOwnership
from magnetar.broker.policies import NAMESPACE_POLICIES_ROOT
from magnetar.broker.service import BrokerService
from magnetar.common.clock import SystemClock
from magnetar.common.errors import ServerError
from magnetar.common.names import TopicName
from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import MetadataStore, connect
from magnetar.protocol import (
    Error,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    MetadataResult,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
    ProducerSuccess,
    Subscribe,
    SubType,
    Success,
)
from magnetar.testing import wait_until_async

from .test_service_connection import AsyncRawClient, producer_cmd

TIMEOUT_S = 15.0


@asynccontextmanager
async def cluster_broker(tmp_path: Path) -> AsyncIterator[tuple[BrokerService, MetadataStore]]:
    """A started cluster broker holding every bundle of ``public/default``."""
    store = await connect(f"memory:session-loss-{uuid.uuid4().hex}")
    bookie = Bookie(
        BookieConfig(data_dir=tmp_path / "bookie", port=0, disk_free_min_bytes=0), store
    )
    clock = SystemClock()
    client: LedgerClient | None = None
    service: BrokerService | None = None
    ownership: ClusterOwnership | None = None
    controller: ControllerRunner | None = None
    try:
        await bookie.start()
        client = LedgerClient(store, local_bookies=[bookie])
        storage = LedgerClientStorage(client, ensemble_size=1, write_quorum=1, ack_quorum=1)
        service_ref: list[BrokerService] = []

        async def unload(bundle: BundleId) -> None:
            await service_ref[0].unload_bundle(bundle)

        ownership = ClusterOwnership(store, unload_bundle=unload, clock=clock)
        service = BrokerService(
            BrokerConfig(port=0, lookup_owner_wait_ms=2_000),
            store,
            storage,
            clock=clock,
            ownership=ownership,
        )
        service_ref.append(service)
        await service.start()
        address = BrokerAddress("b1", service.service_url, None, "http://127.0.0.1:1")
        await store.create(f"{REGISTRATIONS_PATH}/b1", address.registration_json(), ephemeral=True)
        await ownership.start(address)
        controller = ControllerRunner(store, "b1", clock=clock, tick_interval_ms=100)
        controller.start()
        await store.put(f"{NAMESPACE_POLICIES_ROOT}/public/default", b"{}")
        await wait_until_async(
            lambda: ownership is not None and ownership.core.held,
            timeout_s=TIMEOUT_S,
            what="the broker holds its bundles",
        )
        yield service, store
    finally:
        if controller is not None:
            await controller.close()
        if ownership is not None:
            await ownership.close()
        if service is not None:
            await service.close()
        if client is not None:
            await client.close()
        await bookie.stop()
        await store.close()


def subscribe_cmd(raw: AsyncRawClient, topic: str) -> Subscribe:
    return Subscribe(
        topic=topic,
        subscription="sub",
        sub_type=SubType.Shared,
        consumer_id=raw.next_id(),
        request_id=raw.next_id(),
    )


async def test_a_broker_that_lost_its_session_answers_service_not_ready(tmp_path: Path) -> None:
    async with cluster_broker(tmp_path) as (broker, store):
        topic = f"persistent://public/default/lost-{uuid.uuid4().hex[:8]}"
        raw = await AsyncRawClient.open(broker.port)
        lookup = LookupTopic(topic=topic, request_id=raw.next_id())
        answer = await raw.request(lookup)
        assert isinstance(answer, LookupTopicResponse)
        assert answer.response is LookupResult.Connect  # served here
        assert isinstance(await raw.request(producer_cmd(raw, topic, 1)), ProducerSuccess)
        assert isinstance(await raw.request(subscribe_cmd(raw, topic)), Success)
        assert broker.loaded_topic(TopicName.parse(topic)) is not None

        await store.expire_session()  # type: ignore[attr-defined]

        answer = await raw.request(LookupTopic(topic=topic, request_id=raw.next_id()))
        assert isinstance(answer, LookupTopicResponse)
        assert (answer.response, answer.error) == (
            LookupResult.Failed,
            ServerError.ServiceNotReady,
        ), answer.message
        other = f"persistent://public/default/other-{uuid.uuid4().hex[:8]}"
        answer = await raw.request(LookupTopic(topic=other, request_id=raw.next_id()))
        assert isinstance(answer, LookupTopicResponse)
        assert answer.error is ServerError.ServiceNotReady, answer.message
        metadata = await raw.request(
            PartitionedTopicMetadata(topic=topic, request_id=raw.next_id())
        )
        assert isinstance(metadata, PartitionedTopicMetadataResponse)
        assert (metadata.response, metadata.error) == (
            MetadataResult.Failed,
            ServerError.ServiceNotReady,
        ), metadata.message
        for name in (topic, other):  # loaded here a moment ago, and never loaded
            refused = await raw.request(producer_cmd(raw, name, raw.next_id()))
            assert isinstance(refused, Error) and refused.error is ServerError.ServiceNotReady, (
                refused
            )
            # a second consumer of the subscription made above: no metadata to write
            refused = await raw.request(subscribe_cmd(raw, name))
            assert not isinstance(refused, Success)
            assert isinstance(refused, Error) and refused.error is ServerError.ServiceNotReady, (
                refused
            )
        await raw.close()
