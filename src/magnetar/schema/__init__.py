"""The schema registry: versioned schemas per topic and their compatibility checks.

* :mod:`~magnetar.schema.schema_type` — Pulsar's schema types, their wire numbers and REST names.
* :mod:`~magnetar.schema.definition` — one schema (type, data, properties), validated.
* :mod:`~magnetar.schema.avro_resolution` — can a reader schema read a writer schema's data
  (the Avro specification's resolution rules, over fastavro's parsed schemas).
* :mod:`~magnetar.schema.compatibility` — strategies and the checks Pulsar's broker makes.
* :mod:`~magnetar.schema.registry` — the versions of each topic, kept in the metadata store.

The broker and the admin API use this package; it uses only protocol, common and metadata.
"""

from magnetar.schema.compatibility import SchemaPolicy, Strategy
from magnetar.schema.definition import InvalidSchema, SchemaDefinition
from magnetar.schema.registry import SchemaRegistry, StoredSchema, version_bytes, version_number
from magnetar.schema.schema_type import parse_type_name, type_name

__all__ = [
    "InvalidSchema",
    "SchemaDefinition",
    "SchemaPolicy",
    "SchemaRegistry",
    "StoredSchema",
    "Strategy",
    "parse_type_name",
    "type_name",
    "version_bytes",
    "version_number",
]
