"""Avro record definitions for the compatibility tests, shaped as the official Python
client writes them: fields not marked required are ``["null", T]`` unions without a
default; ``default`` is only there when a test adds it."""

from __future__ import annotations

import json
from typing import Any

from magnetar.protocol import SchemaType
from magnetar.schema import SchemaDefinition

BASE_FIELDS: list[dict[str, Any]] = [
    {"name": "name", "type": "string"},
    {"name": "age", "type": "int"},
]


def record(fields: list[dict[str, Any]], name: str = "User") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields}


def avro(definition: Any, kind: SchemaType = SchemaType.Avro) -> SchemaDefinition:
    return SchemaDefinition(kind, json.dumps(definition).encode())


# The four changes of the matrix, each from BASE_FIELDS.
CHANGES: dict[str, list[dict[str, Any]]] = {
    "add_optional": [*BASE_FIELDS, {"name": "email", "type": ["null", "string"], "default": None}],
    "add_required": [*BASE_FIELDS, {"name": "email", "type": "string"}],
    "remove_field": [BASE_FIELDS[0]],
    "change_type": [BASE_FIELDS[0], {"name": "age", "type": "string"}],
}

# Accepted (True) or refused (False), per strategy and change: what Avro's resolution rules
# give (the new schema reads old data for BACKWARD, old reads new for FORWARD, both for FULL).
# Removing a field without a default is readable by the new schema (it skips the writer's
# extra field) but not by the old one (the removed field has no default).
EXPECTED: dict[str, dict[str, bool]] = {
    "ALWAYS_COMPATIBLE": dict.fromkeys(CHANGES, True),
    "ALWAYS_INCOMPATIBLE": dict.fromkeys(CHANGES, False),
    "BACKWARD": {"add_optional": True, "add_required": False, "remove_field": True,
                 "change_type": False},
    "FORWARD": {"add_optional": True, "add_required": True, "remove_field": False,
                "change_type": False},
    "FULL": {"add_optional": True, "add_required": False, "remove_field": False,
             "change_type": False},
}  # fmt: skip
for _base in ("BACKWARD", "FORWARD", "FULL"):
    EXPECTED[f"{_base}_TRANSITIVE"] = EXPECTED[_base]
