"""Schema endpoints ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/…`` as Pulsar's
``SchemasResource``, for a broker without a schema registry yet (no topic has a schema):

* ``GET …/schema`` and ``GET …/schema/{version}`` answer 404 ``{"reason": "Schema not
  found"}``, as Pulsar does for a topic without a schema. The official client reads this
  path when its service URL is ``http://`` (``getSchemaInfo``) and treats the 404 as "no
  schema", as against Pulsar.
* ``GET …/schemas`` (every version) answers ``{"getSchemaResponses": []}``.
* ``DELETE …/schema`` answers ``{"version": -1}`` (nothing was deleted: Pulsar's answer
  when the topic has no schema).

A namespace that does not exist answers 404 "Namespace does not exist"; an invalid name 400.
Uploading schemas (``POST …/schema``) is left to the schema registry and not routed.
"""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import APIRouter
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, ResourceNotFound
from magnetar.admin.namespaces import namespace_policies
from magnetar.admin.responses import json_response
from magnetar.common.names import TopicName

SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


async def _topic(ctx: AdminContext, tenant: str, namespace: str, topic: str) -> TopicName:
    name = TopicName.parse(f"persistent://{tenant}/{namespace}/{unquote(topic)}")
    await namespace_policies(ctx, name.namespace_name)
    return name


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["schemas"])

    @r.get(SCHEMA + "/schema", summary="The topic's latest schema")
    async def get_schema(tenant: str, namespace: str, topic: str) -> Response:
        await _topic(ctx, tenant, namespace, topic)
        raise ResourceNotFound("Schema not found")

    @r.get(SCHEMA + "/schema/{version}", summary="One version of the topic's schema")
    async def get_schema_version(tenant: str, namespace: str, topic: str, version: str) -> Response:
        await _topic(ctx, tenant, namespace, topic)
        try:
            number = int(version)
        except ValueError:
            raise BadRequest(f"invalid schema version {version!r}") from None
        if number < -1:
            raise BadRequest(f"invalid schema version {version!r}")
        raise ResourceNotFound("Schema not found")

    @r.get(SCHEMA + "/schemas", summary="Every version of the topic's schema")
    async def get_all_schemas(tenant: str, namespace: str, topic: str) -> Response:
        await _topic(ctx, tenant, namespace, topic)
        return json_response({"getSchemaResponses": []})

    @r.delete(SCHEMA + "/schema", summary="Delete the topic's schema")
    async def delete_schema(
        tenant: str, namespace: str, topic: str, force: bool = False
    ) -> Response:
        await _topic(ctx, tenant, namespace, topic)
        return json_response({"version": -1})

    return r
