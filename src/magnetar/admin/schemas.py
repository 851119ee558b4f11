"""Schema endpoints ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/…``, with the shapes of
Pulsar's ``SchemasResource``, over the broker's schema registry (:mod:`magnetar.schema`):

* ``GET …/schema`` — the latest version: ``{"version", "type", "timestamp", "data",
  "properties"}``; ``data`` is the definition as text (KEY_VALUE: ``{"key": …, "value": …}``).
  404 ``Schema not found`` without one. The official client reads this path when its service
  URL is ``http://``.
* ``GET …/schema/{version}`` — one version (404 if absent or a deletion marker).
* ``GET …/schemas`` — the live versions: ``{"getSchemaResponses": [...]}``.
* ``POST …/schema`` — body ``{"type": "AVRO", "schema": "<definition>", "properties": {}}``;
  answers ``{"version": N}`` (an identical schema answers its existing version). The
  strategy in force applies (not ``isAllowAutoUpdateSchema``, which governs clients):
  409 for an incompatible schema, 422 for malformed data or an unknown type.
* ``POST …/compatibility`` — the same body; ``{"isCompatibility": bool,
  "schemaCompatibilityStrategy": "FULL"}``; stores nothing.
* ``DELETE …/schema[?force=true]`` — ``{"version": N}``: the deletion marker's version (with
  ``force``, the last version removed); ``-1`` when there was nothing to delete.

A namespace that does not exist answers 404 "Namespace does not exist"; an invalid name 400.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, Conflict, ResourceNotFound, RestError
from magnetar.admin.request_body import as_object, as_str, read_json
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response
from magnetar.common.errors import IncompatibleSchema
from magnetar.common.names import TopicName
from magnetar.protocol import SchemaType
from magnetar.schema import (
    InvalidSchema,
    SchemaDefinition,
    SchemaPolicy,
    StoredSchema,
    parse_type_name,
)
from magnetar.schema.definition import encode_key_value

SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


class UnprocessableSchema(RestError):
    """Malformed schema data or an unknown type (Pulsar's InvalidSchemaDataException)."""

    status = 422


async def _topic(ctx: AdminContext, tenant: str, namespace: str, topic: str) -> TopicName:
    name = TopicName.parse(f"persistent://{tenant}/{namespace}/{unquote(topic)}")
    await namespace_policies(ctx, name.namespace_name)
    return name


def _data_text(definition: SchemaDefinition) -> str:
    if definition.type is SchemaType.KeyValue:
        key, value = definition.key_value_parts()
        return json.dumps({"key": _part_json(key.data), "value": _part_json(value.data)})
    return definition.data.decode("utf-8", "replace")


def _part_json(data: bytes) -> Any:
    text = data.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def schema_response(stored: StoredSchema) -> dict[str, Any]:
    """Pulsar's ``GetSchemaResponse`` JSON for a stored version (not a deletion marker)."""
    definition = stored.definition
    assert definition is not None
    return {
        "version": stored.version,
        "type": definition.type_name,
        "timestamp": stored.timestamp_ms,
        "data": _data_text(definition),
        "properties": definition.property_map(),
    }


def definition_from_payload(body: Any) -> SchemaDefinition:
    """The schema of a ``PostSchemaPayload`` body. Raises 400 for a malformed body, 422 for
    an unknown type or a KEY_VALUE schema that is not ``{"key": …, "value": …}``."""
    payload = as_object(body, "schema payload")
    kind_name = as_str(payload.get("type", ""), "type")
    kind = parse_type_name(kind_name)
    if kind is None:
        raise UnprocessableSchema(f"Invalid schema type {kind_name!r}")
    schema = payload.get("schema", "")
    if not isinstance(schema, str):
        schema = json.dumps(schema)
    props = payload.get("properties") or {}
    if not isinstance(props, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in props.items()
    ):
        raise BadRequest("properties must be an object of strings")
    data = schema.encode("utf-8")
    if kind is SchemaType.KeyValue:
        data = _key_value_data(schema)
    return SchemaDefinition(kind, data, tuple(sorted(props.items())))


def _key_value_data(schema: str) -> bytes:
    try:
        parts = json.loads(schema)
    except ValueError:
        parts = None
    if not isinstance(parts, dict) or "key" not in parts or "value" not in parts:
        raise UnprocessableSchema('a KEY_VALUE schema must be {"key": ..., "value": ...}')

    def encoded(part: Any) -> bytes:
        return (part if isinstance(part, str) else json.dumps(part)).encode("utf-8")

    return encode_key_value(encoded(parts["key"]), encoded(parts["value"]))


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["schemas"])
    schemas = ctx.service.schemas
    registry = schemas.registry

    @r.get(SCHEMA + "/schema", summary="The topic's latest schema")
    async def get_schema(tenant: str, namespace: str, topic: str) -> Response:
        name = await _topic(ctx, tenant, namespace, topic)
        stored = await registry.get(name)
        if stored is None:
            raise ResourceNotFound("Schema not found")
        return json_response(schema_response(stored))

    @r.get(SCHEMA + "/schema/{version}", summary="One version of the topic's schema")
    async def get_schema_version(tenant: str, namespace: str, topic: str, version: str) -> Response:
        name = await _topic(ctx, tenant, namespace, topic)
        try:
            number = int(version)
        except ValueError:
            raise BadRequest(f"invalid schema version {version!r}") from None
        if number < -1:
            raise BadRequest(f"invalid schema version {version!r}")
        stored = await registry.get(name, None if number == -1 else number)
        if stored is None:
            raise ResourceNotFound("Schema not found")
        return json_response(schema_response(stored))

    @r.get(SCHEMA + "/schemas", summary="Every version of the topic's schema")
    async def get_all_schemas(tenant: str, namespace: str, topic: str) -> Response:
        name = await _topic(ctx, tenant, namespace, topic)
        live = await registry.live(name)
        return json_response({"getSchemaResponses": [schema_response(s) for s in live]})

    @r.post(SCHEMA + "/schema", summary="Upload a schema (a new version if it is new)")
    async def post_schema(tenant: str, namespace: str, topic: str, request: Request) -> Response:
        name = await _topic(ctx, tenant, namespace, topic)
        definition = definition_from_payload(await read_json(request))
        policy = await schemas.policy(name)
        try:
            # an operator's upload: the strategy applies, isAllowAutoUpdateSchema does not
            version = await registry.put_if_absent(name, definition, SchemaPolicy(policy.strategy))
        except InvalidSchema as exc:
            raise UnprocessableSchema(exc.message) from None
        except IncompatibleSchema as exc:
            raise Conflict(exc.message) from None
        return json_response({"version": version})

    @r.post(SCHEMA + "/compatibility", summary="Would this schema be accepted?")
    async def test_compatibility(
        tenant: str, namespace: str, topic: str, request: Request
    ) -> Response:
        name = await _topic(ctx, tenant, namespace, topic)
        definition = definition_from_payload(await read_json(request))
        strategy = (await schemas.policy(name)).strategy
        try:
            await registry.check_compatible(name, definition, strategy)
            compatible = True
        except InvalidSchema as exc:
            raise UnprocessableSchema(exc.message) from None
        except IncompatibleSchema:
            compatible = False
        return json_response(
            {"isCompatibility": compatible, "schemaCompatibilityStrategy": strategy.value}
        )

    @r.delete(SCHEMA + "/schema", summary="Delete the topic's schema")
    async def delete_schema(
        tenant: str, namespace: str, topic: str, force: bool = False
    ) -> Response:
        name = await _topic(ctx, tenant, namespace, topic)
        version = await registry.delete(name, force=force)
        return json_response({"version": -1 if version is None else version})

    return r
