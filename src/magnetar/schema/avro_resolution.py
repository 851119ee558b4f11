"""Can data written with one Avro schema be read with another?

The rules are the Avro specification's "Schema Resolution" section (1.11), applied to the
schemas as fastavro parses them (:class:`~magnetar.schema.definition.ParsedAvro`), without
reading any data. Pulsar's broker asks Avro's ``SchemaValidator`` the same question, which
runs Avro's resolving grammar; as that grammar does, record names are not compared (two
record classes with the same fields are compatible), enum and fixed names are.

* Same primitive type, or a promotion: int to long, float or double; long to float or
  double; float to double; string to bytes and bytes to string.
* Records: each reader field is matched with the writer field of the same name (or one of
  the reader field's aliases) and must resolve; a reader field the writer lacks needs a
  default. Writer fields the reader lacks are skipped.
* Enums: every writer symbol must be a reader symbol, unless the reader has a default.
* Arrays (items), maps (values): resolve recursively. Fixed: same name and size.
* A writer union: each branch must resolve against the reader. A reader union (writer not a
  union): some branch must resolve against the writer.
"""

from __future__ import annotations

from typing import Any

from magnetar.schema.definition import ParsedAvro

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_DEPTH_MAX = 200
"""Nesting bound of the walk (recursive named types are cut by the ``seen`` set)."""


def read_problem(reader: ParsedAvro, writer: ParsedAvro) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader``; None if it can."""
    return _Resolver(reader.named, writer.named).resolve(reader.schema, writer.schema, 0)


class _Resolver:
    def __init__(self, reader_named: dict[str, Any], writer_named: dict[str, Any]) -> None:
        self._reader_named = reader_named
        self._writer_named = writer_named
        self._seen: set[tuple[str, str]] = set()

    def resolve(self, reader: Any, writer: Any, depth: int) -> str | None:
        if depth > _DEPTH_MAX:
            return "schemas are nested too deeply"
        reader = _deref(reader, self._reader_named)
        writer = _deref(writer, self._writer_named)
        if isinstance(writer, list):
            for branch in writer:
                problem = self.resolve(reader, branch, depth + 1)
                if problem is not None:
                    return f"writer union branch {_label(branch, self._writer_named)}: {problem}"
            return None
        if isinstance(reader, list):
            for branch in reader:
                if self.resolve(branch, writer, depth + 1) is None:
                    return None
            return f"no branch of the reader's union can read {_label(writer, self._writer_named)}"
        reader_type = _type_of(reader)
        writer_type = _type_of(writer)
        if reader_type != writer_type:
            if reader_type in _PROMOTIONS.get(writer_type, ()):
                return None
            return f"{writer_type} cannot be read as {reader_type}"
        if reader_type == "record":
            return self._records(reader, writer, depth)
        if reader_type == "enum":
            if _short(reader["name"]) != _short(writer["name"]):
                return f"enum {writer['name']} cannot be read as enum {reader['name']}"
            missing = [s for s in writer.get("symbols", []) if s not in reader.get("symbols", [])]
            if missing and "default" not in reader:
                return f"enum {reader['name']} lacks the symbols {missing}"
            return None
        if reader_type == "array":
            return self.resolve(reader["items"], writer["items"], depth + 1)
        if reader_type == "map":
            return self.resolve(reader["values"], writer["values"], depth + 1)
        if reader_type == "fixed":
            if _short(reader["name"]) != _short(writer["name"]):
                return f"fixed {writer['name']} cannot be read as fixed {reader['name']}"
            if reader.get("size") != writer.get("size"):
                return f"fixed {reader['name']} changed size"
            return None
        return None

    def _records(self, reader: dict[str, Any], writer: dict[str, Any], depth: int) -> str | None:
        key = (str(reader.get("name")), str(writer.get("name")))
        if key in self._seen:  # a recursive type: assumed to resolve while it is checked
            return None
        self._seen.add(key)
        writer_fields = {f["name"]: f for f in writer.get("fields", [])}
        for field in reader.get("fields", []):
            name = field["name"]
            match = writer_fields.get(name)
            if match is None:
                for alias in field.get("aliases", []):
                    match = writer_fields.get(alias)
                    if match is not None:
                        break
            if match is None:
                if "default" not in field:
                    return f"field {name!r} is not in the writer's schema and has no default"
                continue
            problem = self.resolve(field["type"], match["type"], depth + 1)
            if problem is not None:
                return f"field {name!r}: {problem}"
        return None


def _deref(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return named.get(schema, schema)
    return schema


def _type_of(schema: Any) -> str:
    if isinstance(schema, dict):
        inner = schema.get("type")
        return inner if isinstance(inner, str) else _type_of(inner)
    return str(schema)


def _short(name: Any) -> str:
    return str(name).rsplit(".", 1)[-1]


def _label(schema: Any, named: dict[str, Any]) -> str:
    schema = _deref(schema, named)
    if isinstance(schema, dict) and "name" in schema:
        return f"{_type_of(schema)} {schema['name']}"
    return _type_of(schema)
