"""Compatibility strategies and the checks Pulsar's broker makes with them.

A namespace sets ``schema_compatibility_strategy``; a topic may override it (topic policy
``schemaCompatibilityStrategy``); ``UNDEFINED`` at both falls back to the broker's default,
which is ``FULL`` in Pulsar (``schemaCompatibilityStrategy=FULL`` in broker.conf).

Checking a new schema against an existing one (Pulsar's ``checkCompatible``):

* ALWAYS_COMPATIBLE: anything goes, even a change of type;
* a different type is refused ("Incompatible schema: exists schema type X, new schema type Y");
* identical data is compatible;
* AVRO, JSON, PROTOBUF (Avro definitions): BACKWARD — the new schema reads data written with
  the existing one; FORWARD — the existing schema reads data written with the new one; FULL —
  both; ALWAYS_INCOMPATIBLE — refused. The _TRANSITIVE forms check every live version rather
  than only the latest;
* KEY_VALUE: the key schemas and the value schemas are checked as above, each by its type;
* PROTOBUF_NATIVE: the root message's full name must not change (Pulsar's default protobuf
  validator);
* any other type: refused only under ALWAYS_INCOMPATIBLE.

Consumers (Pulsar's ``checkConsumerCompatibility``): under BACKWARD, FORWARD,
FORWARD_TRANSITIVE and FULL the consumer's schema must read the latest version; under the
other strategies it is checked against every live version with the strategy itself.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.common.errors import IncompatibleSchema
from magnetar.protocol import SchemaType
from magnetar.schema.avro_resolution import read_problem
from magnetar.schema.definition import SchemaDefinition
from magnetar.schema.schema_type import STRUCT_TYPES


class Strategy(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy`` (names as in the REST API)."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, value: str | None) -> Strategy | None:
        """The strategy named ``value`` (case-insensitive); None for None or an unknown name."""
        if value is None:
            return None
        try:
            return cls(value.strip().upper())
        except ValueError:
            return None

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")

    @property
    def base(self) -> Strategy:
        """The strategy without _TRANSITIVE."""
        return Strategy(self.value.removesuffix("_TRANSITIVE"))


BROKER_DEFAULT_STRATEGY = Strategy.FULL
"""Pulsar's broker default (``schemaCompatibilityStrategy`` in broker.conf)."""


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """What governs a topic's schemas: the strategy in force (never UNDEFINED), whether
    producers and consumers may add new versions (``isAllowAutoUpdateSchema``, default
    true), and whether clients without a schema are refused on a topic that has one
    (``schemaValidationEnforced``, default false)."""

    strategy: Strategy = BROKER_DEFAULT_STRATEGY
    allow_auto_update: bool = True
    validation_enforced: bool = False

    @classmethod
    def resolve(
        cls,
        *,
        namespace_strategy: str | None,
        topic_strategy: str | None = None,
        allow_auto_update: bool | None = None,
        validation_enforced: bool | None = None,
        broker_default: Strategy = BROKER_DEFAULT_STRATEGY,
    ) -> SchemaPolicy:
        """Topic level, else namespace level, else the broker default; UNDEFINED or an
        unknown stored name counts as unset."""
        strategy = broker_default
        for value in (namespace_strategy, topic_strategy):
            parsed = Strategy.parse(value)
            if parsed is not None and parsed is not Strategy.UNDEFINED:
                strategy = parsed
        return cls(
            strategy=strategy,
            allow_auto_update=True if allow_auto_update is None else allow_auto_update,
            validation_enforced=bool(validation_enforced),
        )


def check_pair(existing: SchemaDefinition, new: SchemaDefinition, strategy: Strategy) -> None:
    """Raises :class:`IncompatibleSchema` unless ``new`` may follow ``existing``."""
    if strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if existing.type is not new.type:
        raise IncompatibleSchema(
            f"Incompatible schema: exists schema type {existing.type_name}, "
            f"new schema type {new.type_name}"
        )
    if existing.fingerprint == new.fingerprint:
        return
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    if new.type is SchemaType.KeyValue:
        old_key, old_value = existing.key_value_parts()
        new_key, new_value = new.key_value_parts()
        check_pair(old_key, new_key, strategy)
        check_pair(old_value, new_value, strategy)
        return
    if new.type is SchemaType.ProtobufNative:
        # Pulsar's default protobuf check (ProtobufNativeSchemaValidator.DEFAULT)
        if existing.protobuf_root_message() != new.protobuf_root_message():
            raise IncompatibleSchema("Protobuf root message isn't allow change!")
        return
    if new.type not in STRUCT_TYPES:
        return
    old_avro, new_avro = existing.avro(), new.avro()
    base = strategy.base
    if base in (Strategy.BACKWARD, Strategy.FULL):
        problem = read_problem(reader=new_avro, writer=old_avro)
        if problem is not None:
            raise IncompatibleSchema(
                f"Incompatible schema: the new schema cannot read data written with an "
                f"existing version ({strategy.value}): {problem}"
            )
    if base in (Strategy.FORWARD, Strategy.FULL):
        problem = read_problem(reader=old_avro, writer=new_avro)
        if problem is not None:
            raise IncompatibleSchema(
                f"Incompatible schema: an existing version cannot read data written with the "
                f"new schema ({strategy.value}): {problem}"
            )


def check_new_version(
    live: Sequence[SchemaDefinition], new: SchemaDefinition, strategy: Strategy
) -> None:
    """Check ``new`` before storing it as a version after ``live`` (oldest first): against
    the latest, or every one for a _TRANSITIVE strategy. Raises IncompatibleSchema."""
    if not live:
        return
    targets = list(reversed(live)) if strategy.transitive else [live[-1]]
    for existing in targets:
        check_pair(existing, new, strategy)


def check_consumer(
    live: Sequence[SchemaDefinition], schema: SchemaDefinition, strategy: Strategy
) -> None:
    """Check a consumer's schema against a topic's live versions (oldest first). Raises
    IncompatibleSchema, also when the topic has no schema to check against."""
    if strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if not live:
        raise IncompatibleSchema("Topic does not have schema to check")
    if strategy in (
        Strategy.BACKWARD,
        Strategy.FORWARD,
        Strategy.FORWARD_TRANSITIVE,
        Strategy.FULL,
    ):
        check_pair(live[-1], schema, Strategy.BACKWARD)
        return
    for existing in reversed(live):
        check_pair(existing, schema, strategy)
