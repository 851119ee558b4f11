"""The dynamic configuration reaches every broker: two policy caches on one shared metadata
store (each its own session, as two brokers); an override written through one is in force
on the other, one stored before a broker starts applies from its start, and removing it
restores the configured value."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from magnetar.broker.dynamic_config import update_values
from magnetar.broker.policies import BrokerDefaults, PolicyCache
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async

_stores = itertools.count()


@pytest.fixture
async def stores() -> AsyncIterator[list[MetadataStore]]:
    url = f"memory:dynamic-config-{next(_stores)}"
    opened = [await connect(url) for _ in range(3)]
    yield opened
    for store in opened:
        await store.close()


async def test_an_override_reaches_every_broker_and_its_removal_restores(
    stores: list[MetadataStore],
) -> None:
    admin, one, two = stores
    configured = BrokerDefaults(max_producers_per_topic=5)
    first = PolicyCache(one, configured)
    await first.start()
    changes: list[object] = []

    async def listener(namespace: object, topic: object) -> None:
        changes.append((namespace, topic))

    first.add_listener(listener)
    try:
        await update_values(admin, lambda v: {**v, "maxProducersPerTopic": "1"})
        await wait_until_async(
            lambda: first.defaults.max_producers_per_topic == 1, 10, what="the override"
        )
        assert (None, None) in changes  # loaded topics resolve their policies anew

        second = PolicyCache(two, configured)  # a broker started after the change
        await second.start()
        try:
            assert second.defaults.max_producers_per_topic == 1
            await update_values(admin, lambda v: {})
            await wait_until_async(
                lambda: second.defaults == configured and first.defaults == configured,
                10,
                what="the configured values again",
            )
        finally:
            await second.close()
    finally:
        await first.close()
