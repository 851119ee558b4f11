"""Topics: ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}[/{topic}[/…]]``,
routes over :mod:`magnetar.admin.resources.topics`.

Create, delete, list; partitioned topics (create, grow, delete, metadata); terminate,
unload, last message id, message id by publish time; stats, partitioned stats, internal
stats; compaction trigger and status (through the host's compactor when it has one).
"""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin import topic_stats
from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Conflict, ResourceNotFound
from magnetar.admin.request_body import as_int, as_object, read_json
from magnetar.admin.resources import topics
from magnetar.admin.resources.topics import loaded_topic, loaded_topic_stats
from magnetar.admin.responses import json_response, no_content
from magnetar.common.names import NamespaceName, TopicName
from magnetar.protocol import TopicsMode

__all__ = ["TOPIC", "loaded_topic", "loaded_topic_stats", "router", "topic_name"]

TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


def topic_name(domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    """The name from a URL (400 if invalid, 404 for an unknown domain)."""
    _check_domain(domain)
    return TopicName.parse(f"{domain}://{tenant}/{namespace}/{unquote(topic)}")


def _check_domain(domain: str) -> None:
    if domain not in topics.DOMAINS:
        raise ResourceNotFound("not found")


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["topics"])

    @r.get("/admin/v2/{domain}/{tenant}/{namespace}", summary="List topics (partitions too)")
    async def list_topics(domain: str, tenant: str, namespace: str) -> Response:
        _check_domain(domain)
        mode = TopicsMode.PERSISTENT if domain == "persistent" else TopicsMode.NON_PERSISTENT
        ns = NamespaceName.of(tenant, namespace)
        return json_response(await topics.list_topics(ctx, ns, mode))

    @r.get("/admin/v2/{domain}/{tenant}/{namespace}/partitioned", summary="List partitioned topics")
    async def list_partitioned(domain: str, tenant: str, namespace: str) -> Response:
        _check_domain(domain)
        ns = NamespaceName.of(tenant, namespace)
        return json_response(await topics.list_partitioned_topics(ctx, ns, domain))

    @r.put(TOPIC, summary="Create a non-partitioned topic")
    async def create(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        as_object(await read_json(request, {}), "topic properties")
        await topics.create_topic(ctx, name)
        return no_content()

    @r.delete(TOPIC, summary="Delete a non-partitioned topic")
    async def delete(
        domain: str, tenant: str, namespace: str, topic: str, force: bool = False
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        if await ctx.service.partitions_of(name) > 0:
            raise Conflict("Topic is a partitioned topic; delete it with …/partitions")
        await topics.delete_topic(ctx, name, force=force)
        return no_content()

    @r.put(TOPIC + "/partitions", summary="Create a partitioned topic")
    async def create_partitioned(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        body = await read_json(request)
        if isinstance(body, dict):
            body = body.get("partitions")
        partitions = as_int(body, "number of partitions", minimum=1)
        await topics.create_partitioned_topic(ctx, name, partitions)
        return no_content()

    @r.post(TOPIC + "/partitions", summary="Grow a partitioned topic")
    async def update_partitioned(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        partitions = as_int(await read_json(request), "number of partitions", minimum=1)
        await topics.grow_partitioned_topic(ctx, name, partitions)
        return no_content()

    @r.get(TOPIC + "/partitions", summary="Partitioned topic metadata")
    async def get_partitions(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        checkAllowAutoCreation: bool = False,
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        count = await topics.partition_count(ctx, name, allow_auto_creation=checkAllowAutoCreation)
        return json_response({"partitions": count})

    @r.delete(TOPIC + "/partitions", summary="Delete a partitioned topic")
    async def delete_partitioned(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        force: bool = False,
    ) -> Response:
        await topics.delete_partitioned_topic(
            ctx,
            topic_name(domain, tenant, namespace, topic),
            force=force,
            authorization=request.headers.get("authorization"),
        )
        return no_content()

    @r.post(TOPIC + "/terminate", summary="Terminate a topic")
    async def terminate(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(await topics.terminate_topic(ctx, name))

    @r.put(TOPIC + "/unload", summary="Unload a topic")
    async def unload(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        await topics.unload_topic(ctx, topic_name(domain, tenant, namespace, topic))
        return no_content()

    @r.get(TOPIC + "/lastMessageId", summary="Last message id")
    async def last_message_id(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(await topics.last_message_id(ctx, name))

    @r.get(TOPIC + "/messageid/{timestamp}", summary="Message id by publish time")
    async def message_id_by_time(
        domain: str, tenant: str, namespace: str, topic: str, timestamp: int
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(await topics.message_id_by_time(ctx, name, timestamp))

    @r.get(TOPIC + "/stats", summary="Topic stats")
    async def stats(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(await loaded_topic_stats(ctx, name))

    @r.get(TOPIC + "/internalStats", summary="Managed-ledger internal stats")
    async def internal(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        t = await loaded_topic(ctx, topic_name(domain, tenant, namespace, topic))
        return json_response(topic_stats.internal_stats(t))

    @r.get(TOPIC + "/partitioned-stats", summary="Partitioned topic stats")
    async def partitioned(
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        request: Request,
        perPartition: bool = True,
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        authorization = request.headers.get("authorization")
        count, per = await topics.partitions_json(ctx, name, "stats", authorization)
        return json_response(topic_stats.partitioned_stats(per, count, per_partition=perPartition))

    @r.get(TOPIC + "/partitioned-internalStats", summary="Partitioned topic internal stats")
    async def partitioned_internal(
        domain: str, tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        authorization = request.headers.get("authorization")
        count, parts = await topics.partitions_json(ctx, name, "internalStats", authorization)
        return json_response({"metadata": {"partitions": count}, "partitions": parts})

    @r.put(TOPIC + "/compaction", summary="Trigger compaction")
    async def compact(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        await topics.trigger_compaction(ctx, topic_name(domain, tenant, namespace, topic))
        return no_content()

    @r.get(TOPIC + "/compaction", summary="Compaction status")
    async def compaction_status(domain: str, tenant: str, namespace: str, topic: str) -> Response:
        name = topic_name(domain, tenant, namespace, topic)
        return json_response(await topics.compaction_status(ctx, name))

    return r
