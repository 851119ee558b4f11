"""Schemas at the broker's door: PRODUCER and SUBSCRIBE carrying a schema, GET_SCHEMA and
GET_OR_CREATE_SCHEMA, over the :mod:`magnetar.schema` registry.

As Pulsar's broker (``ServerCnx`` / ``AbstractTopic``):

* PRODUCER with a schema: an existing live version with the same type and data is reused;
  otherwise, if the namespace allows auto update (``is_allow_auto_update_schema``, default
  true), the schema is checked against the topic's versions with the strategy in force and
  stored as a new version; else IncompatibleSchema. PRODUCER_SUCCESS carries the version.
  PRODUCER without a schema is refused with IncompatibleSchema only when the topic has a
  schema and ``schema_validation_enforced`` is set.
* SUBSCRIBE with a schema: on an idle topic (no schema, no producers, no consumers other
  than AUTO_CONSUME ones, no data) the schema is registered as a producer's would be;
  otherwise it is checked as a consumer's schema
  (:func:`magnetar.schema.compatibility.check_consumer`). SUBSCRIBE without one, or with the
  AUTO_CONSUME schema, is not checked and registers nothing.
* AUTO_CONSUME is only a consumer's schema: a PRODUCER or GET_OR_CREATE_SCHEMA naming it is
  refused with IncompatibleSchema. (AUTO_PUBLISH producers fetch the topic's schema with
  GET_SCHEMA and then register with it like any producer: nothing to do here.)
* GET_SCHEMA: the latest live version, or the one asked for; a topic without it answers
  TopicNotFound ("Topic not found or no-schema"), as Pulsar does.
* GET_OR_CREATE_SCHEMA: the topic must exist (TopicNotFound); then as a producer's schema.

The broker stamps nothing into messages: clients put the version into message metadata.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.policies import PolicyError
from magnetar.common.errors import IncompatibleSchema, ServerError, TopicNotFound
from magnetar.common.names import TopicName
from magnetar.protocol import (
    GetOrCreateSchema,
    GetOrCreateSchemaResponse,
    GetSchema,
    GetSchemaResponse,
    Producer,
    SchemaInfo,
    SchemaType,
    Subscribe,
)

if TYPE_CHECKING:
    # imported on first use, by the first producer or schema request: not by a broker
    # that serves nothing yet
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import Topic
    from magnetar.schema import SchemaDefinition, SchemaPolicy, SchemaRegistry

log = logging.getLogger(__name__)


class TopicSchemas:
    """The broker's schema registry and the rules for clients' schemas."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._registry: SchemaRegistry | None = None

    @property
    def registry(self) -> SchemaRegistry:
        """The topics' schema versions in the metadata store (made on first use)."""
        if self._registry is None:
            from magnetar.schema import SchemaRegistry

            self._registry = SchemaRegistry(self._service.store, self._service.clock)
        return self._registry

    async def policy(self, topic: TopicName) -> SchemaPolicy:
        """The schema policy in force for ``topic``, from the broker's policy cache (a
        strategy set through this broker's admin API applies to the next producer; one set
        through another broker's once its notification has arrived, as for every other
        policy). A malformed stored policy counts as unset."""
        from magnetar.schema import SchemaPolicy

        policies = self._service.policies
        base = topic.partitioned_topic if topic.is_partition else topic
        namespace_strategy: str | None = None
        topic_strategy: str | None = None
        auto_update: bool | None = None
        enforced: bool | None = None
        try:
            ns = await policies.namespace(topic.namespace_name)
            tp = await policies.topic(base)
        except PolicyError as exc:
            log.warning("%s: unreadable policies (%s); schema defaults apply", topic, exc)
            return SchemaPolicy()
        if ns is not None:
            namespace_strategy = ns.schema_compatibility_strategy
            auto_update = ns.is_allow_auto_update_schema
            enforced = ns.schema_validation_enforced
        if tp is not None:
            topic_strategy = tp.schemaCompatibilityStrategy
        return SchemaPolicy.resolve(
            namespace_strategy=namespace_strategy,
            topic_strategy=topic_strategy,
            allow_auto_update=auto_update,
            validation_enforced=enforced,
        )

    async def producer_version(self, topic: Topic, cmd: Producer) -> bytes | None:
        """The schema version for PRODUCER_SUCCESS (None without a schema). Raises
        IncompatibleSchema (InvalidSchema for malformed data); nothing is stored then."""
        from magnetar.schema import version_bytes

        name = topic.name
        policy = await self.policy(name)
        if cmd.schema is None:
            if policy.validation_enforced and await self.registry.has_schema(name):
                raise IncompatibleSchema(
                    "Producers cannot connect or send message without a schema to topics "
                    "with a schema when SchemaValidationEnforced is enabled"
                )
            return None
        definition = _storable(cmd.schema)
        version = await self.registry.put_if_absent(name, definition, policy)
        return version_bytes(version)

    async def check_subscriber(self, topic: Topic, cmd: Subscribe) -> None:
        """Register or check a subscriber's schema. Raises IncompatibleSchema."""
        if cmd.schema is None or cmd.schema.type == SchemaType.AutoConsume:
            return
        from magnetar.schema import SchemaDefinition

        name = topic.name
        definition = SchemaDefinition.from_wire(cmd.schema)
        policy = await self.policy(name)
        idle = (
            not topic.producers
            and not any(
                not consumer.auto_consume
                for sub in topic.subscriptions.values()
                for consumer in sub.consumers.values()
            )
            and topic.ml.ledgers.total_size_bytes == 0
            and not await self.registry.has_schema(name)
        )
        if idle:
            await self.registry.put_if_absent(name, definition, policy)
        else:
            await self.registry.check_consumer(name, definition, policy.strategy)

    async def handle_get_schema(self, cmd: GetSchema) -> GetSchemaResponse:
        from magnetar.schema import version_bytes, version_number
        from magnetar.schema.registry import schema_id

        name = TopicName.parse(cmd.topic)
        version: int | None = None
        if cmd.schema_version:
            version = version_number(cmd.schema_version)
            if version is None:
                return _no_schema(cmd.request_id, cmd.topic)
        stored = await self.registry.get(name, version)
        if stored is None or stored.definition is None:
            return _no_schema(cmd.request_id, cmd.topic)
        return GetSchemaResponse(
            request_id=cmd.request_id,
            schema=stored.definition.to_wire(schema_id(name)),
            schema_version=version_bytes(stored.version),
        )

    async def handle_get_or_create_schema(
        self, cmd: GetOrCreateSchema
    ) -> GetOrCreateSchemaResponse:
        from magnetar.schema import version_bytes

        name = TopicName.parse(cmd.topic)
        service = self._service
        if service.loaded_topic(name) is None and not await service.topic_exists(name):
            raise TopicNotFound("Topic not found")
        definition = _storable(cmd.schema)
        version = await self.registry.put_if_absent(name, definition, await self.policy(name))
        return GetOrCreateSchemaResponse(
            request_id=cmd.request_id, schema_version=version_bytes(version)
        )


def _storable(info: SchemaInfo) -> SchemaDefinition:
    """A producer's schema as a definition to store; AUTO_CONSUME is refused (it names no
    schema, only a consumer's way of reading)."""
    from magnetar.schema import SchemaDefinition

    if info.type == SchemaType.AutoConsume:
        raise IncompatibleSchema("AUTO_CONSUME is a consumer's schema; a producer cannot use it")
    return SchemaDefinition.from_wire(info)


def _no_schema(request_id: int, topic: str) -> GetSchemaResponse:
    return GetSchemaResponse(
        request_id=request_id,
        error_code=ServerError.TopicNotFound,
        error_message=f"Topic not found or no-schema {topic}",
    )


__all__ = ["TopicSchemas"]
