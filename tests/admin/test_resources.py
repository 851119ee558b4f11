"""The admin resources layer without HTTP: tenant, namespace and topic operations and their
cascades, called directly over a broker service on the embedded metadata store and an
in-process bookie."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import (
    BadRequest,
    Conflict,
    MethodNotAllowed,
    PreconditionFailed,
    ResourceNotFound,
)
from magnetar.admin.resources import namespaces, tenants, topics
from magnetar.admin.resources.namespace_policies import (
    namespace_policies,
    update_namespace_policies,
)
from magnetar.bookie import Bookie, BookieConfig
from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies import Policies
from magnetar.broker.service import PARTITIONED_ROOT, BrokerService
from magnetar.common.names import NamespaceName, TopicName
from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.metadata_layout import ROOT as ML_ROOT
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import connect
from magnetar.protocol import TopicsMode

NS = NamespaceName.of("acme", "orders")


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[AdminContext]:
    store = await connect("memory:")
    bookie = Bookie(
        BookieConfig(data_dir=tmp_path / "bookie", port=0, disk_free_min_bytes=0), store
    )
    await bookie.start()
    client = LedgerClient(store)
    config = BrokerConfig(port=0, ensemble_size=1, write_quorum=1, ack_quorum=1)
    service = BrokerService(config, store, LedgerClientStorage(client))
    await service.start()
    try:
        yield AdminContext(service)
    finally:
        await service.close()
        await client.close()
        await bookie.stop()
        await store.close()


async def _tenant_and_namespace(ctx: AdminContext) -> None:
    await tenants.create_tenant(ctx, "acme", {"adminRoles": [], "allowedClusters": []})
    await namespaces.create_namespace(ctx, NS, Policies())


async def test_tenant_lifecycle(ctx: AdminContext) -> None:
    info = {"adminRoles": ["ops"], "allowedClusters": [ctx.cluster]}
    await tenants.create_tenant(ctx, "acme", info)
    assert "acme" in await tenants.list_tenants(ctx)
    assert await tenants.tenant_info(ctx, "acme") == info
    with pytest.raises(Conflict, match="Tenant already exists"):
        await tenants.create_tenant(ctx, "acme", info)
    with pytest.raises(PreconditionFailed, match=r"Clusters \['mars'\] do not exist"):
        await tenants.update_tenant(ctx, "acme", {"adminRoles": [], "allowedClusters": ["mars"]})
    await tenants.update_tenant(ctx, "acme", {"adminRoles": [], "allowedClusters": []})
    assert (await tenants.tenant_info(ctx, "acme"))["adminRoles"] == []
    await tenants.delete_tenant(ctx, "acme", force=False)
    with pytest.raises(ResourceNotFound, match="Tenant does not exist"):
        await tenants.tenant_info(ctx, "acme")


async def test_namespace_defaults_and_policy_updates(ctx: AdminContext) -> None:
    await _tenant_and_namespace(ctx)
    with pytest.raises(Conflict, match="Namespace already exists"):
        await namespaces.create_namespace(ctx, NS, Policies())
    assert await namespaces.list_namespaces(ctx, "acme") == ["acme/orders"]
    body = await namespaces.namespace_policies_json(ctx, NS)
    assert body["replication_clusters"] == [ctx.cluster]
    assert body["bundles"] == {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
    await update_namespace_policies(ctx, NS, message_ttl_in_seconds=60)
    assert (await namespace_policies(ctx, NS)).message_ttl_in_seconds == 60
    with pytest.raises(ResourceNotFound, match="Namespace does not exist"):
        await update_namespace_policies(
            ctx, NamespaceName.of("acme", "none"), deduplicationEnabled=True
        )


async def test_topics_and_partitioned_topics(ctx: AdminContext) -> None:
    with pytest.raises(ResourceNotFound, match="Namespace does not exist"):
        await topics.create_topic(ctx, TopicName.parse("persistent://acme/orders/a"))
    await _tenant_and_namespace(ctx)
    a = TopicName.parse("persistent://acme/orders/a")
    await topics.create_topic(ctx, a)
    with pytest.raises(Conflict, match="This topic already exists"):
        await topics.create_topic(ctx, a)
    assert await topics.last_message_id(ctx, a) == {
        "ledgerId": await _last_ledger(ctx, a),
        "entryId": -1,
        "partitionIndex": -1,
    }
    with pytest.raises(MethodNotAllowed, match="Compaction is not available"):
        await topics.trigger_compaction(ctx, a)
    assert await topics.compaction_status(ctx, a) == {"status": "NOT_RUN", "lastError": ""}

    p = TopicName.parse("persistent://acme/orders/p")
    await topics.create_partitioned_topic(ctx, p, 2)
    with pytest.raises(BadRequest, match="a partition cannot itself be partitioned"):
        await topics.create_partitioned_topic(ctx, p.partition(0), 2)
    with pytest.raises(BadRequest, match="can only be increased"):
        await topics.grow_partitioned_topic(ctx, p, 2)
    await topics.grow_partitioned_topic(ctx, p, 3)
    assert await topics.partition_count(ctx, p, allow_auto_creation=False) == 3
    count, stats = await topics.partitions_json(ctx, p, "stats", None)
    assert count == 3 and sorted(stats) == [p.partition(i).full_name for i in range(3)]
    with pytest.raises(MethodNotAllowed, match="Termination on a partitioned topic"):
        await topics.terminate_topic(ctx, p)
    assert await topics.list_partitioned_topics(ctx, NS, "persistent") == [p.full_name]
    listed = await topics.list_topics(ctx, NS, TopicsMode.PERSISTENT)
    assert sorted(listed) == sorted([a.full_name, *(p.partition(i).full_name for i in range(3))])

    await topics.delete_partitioned_topic(ctx, p, force=False)
    assert await topics.partition_count(ctx, p, allow_auto_creation=False) == 0
    with pytest.raises(ResourceNotFound, match="Partitioned topic does not exist"):
        await topics.delete_partitioned_topic(ctx, p, force=False)
    await topics.unload_topic(ctx, a)
    await topics.delete_topic(ctx, a, force=False)
    with pytest.raises(ResourceNotFound):
        await topics.unload_topic(ctx, a)


async def _last_ledger(ctx: AdminContext, name: TopicName) -> int:
    return (await topics.loaded_topic(ctx, name)).ml.ledger_ids()[-1]


async def test_namespace_delete_cascades_to_its_topics(ctx: AdminContext) -> None:
    await _tenant_and_namespace(ctx)
    await topics.create_topic(ctx, TopicName.parse("persistent://acme/orders/a"))
    await topics.create_partitioned_topic(ctx, TopicName.parse("persistent://acme/orders/p"), 2)
    with pytest.raises(PreconditionFailed, match="Cannot delete non empty namespace"):
        await namespaces.delete_namespace(ctx, NS, force=False)
    with pytest.raises(PreconditionFailed, match="The tenant still has active namespaces"):
        await tenants.delete_tenant(ctx, "acme", force=False)

    await tenants.delete_tenant(ctx, "acme", force=True)
    assert "acme" not in await tenants.list_tenants(ctx)
    for root in (PARTITIONED_ROOT, ML_ROOT):
        assert await ctx.store.exists(f"{root}/acme/orders") is None, root
    assert await ctx.service.topics_of_namespace(NS, TopicsMode.ALL) == []
