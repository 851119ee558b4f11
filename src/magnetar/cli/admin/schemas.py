"""``magnetar admin schemas get|upload|delete|compatibility|extract``
(``/admin/v2/schemas``), as ``pulsar-admin schemas``.

``upload`` and ``compatibility`` read a schema file shaped as Pulsar's ``PostSchemaPayload``::

    {"type": "AVRO", "schema": "<the Avro definition as a string>", "properties": {}}

(``schema`` may also be given as a JSON object; it is sent as its text).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import parse_topic
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import output_option, printer

TOPIC = click.argument("topic")
SCHEMA_FILE_BYTES_MAX = 4 * 1024 * 1024
"""A schema file larger than this is refused before it is read whole."""


def _schemas_path(topic: str) -> str:
    t = parse_topic(topic)
    return (
        f"/admin/v2/schemas/{quote(t.tenant, safe='')}/{quote(t.namespace, safe='')}/"
        f"{quote(t.local, safe='')}"
    )


def _payload(path: str) -> dict[str, Any]:
    """The schema file as a POST body; a usage error (exit 2) for a missing, oversized or
    malformed file."""
    file = Path(path)
    try:
        if file.stat().st_size > SCHEMA_FILE_BYTES_MAX:
            raise click.BadParameter(
                f"{path} is larger than {SCHEMA_FILE_BYTES_MAX} bytes", param_hint="--filename"
            )
        body = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.strerror}", param_hint="--filename"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise click.BadParameter(f"{path} is not JSON: {exc}", param_hint="--filename") from None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise click.BadParameter(
            f'{path} must be {{"type": ..., "schema": ..., "properties": ...}}',
            param_hint="--filename",
        )
    if not isinstance(body.get("schema", ""), str):
        body["schema"] = json.dumps(body["schema"])
    return body


@click.group(cls=SuggestingGroup)
def schemas() -> None:
    """Topic schemas: versions, uploads, compatibility checks."""


@schemas.command()
@TOPIC
@click.option("--version", "-v", "version", type=int, default=None, help="One version.")
@click.option("--all-version", "-a", "all_versions", is_flag=True, help="Every live version.")
@output_option
def get(topic: str, version: int | None, all_versions: bool) -> None:
    """Show a topic's latest schema (or one version, or all)."""
    path = _schemas_path(topic)
    if all_versions:
        printer().result(rest().get(f"{path}/schemas")["getSchemaResponses"])
    elif version is not None:
        printer().result(rest().get(f"{path}/schema/{version}"))
    else:
        printer().result(rest().get(f"{path}/schema"))


@schemas.command()
@TOPIC
@click.option("--filename", "-f", required=True, help="The schema file (PostSchemaPayload JSON).")
@output_option
def upload(topic: str, filename: str) -> None:
    """Upload a schema: a new version if compatible, the existing one if identical."""
    answer = rest().post(f"{_schemas_path(topic)}/schema", _payload(filename))
    version = answer.get("version") if isinstance(answer, dict) else None
    printer().done(f"Schema of {topic} is version {version}", topic=topic, version=version)


@schemas.command()
@TOPIC
@click.option("--filename", "-f", required=True, help="The schema file (PostSchemaPayload JSON).")
@output_option
def compatibility(topic: str, filename: str) -> None:
    """Check whether a schema would be accepted by the topic (nothing is stored)."""
    printer().result(rest().post(f"{_schemas_path(topic)}/compatibility", _payload(filename)))


@schemas.command()
@TOPIC
@click.option("--force", "-f", is_flag=True, help="Remove every version (numbering restarts).")
@output_option
def delete(topic: str, force: bool) -> None:
    """Delete a topic's schema."""
    path = f"{_schemas_path(topic)}/schema"
    answer = rest().delete(path, force=True) if force else rest().delete(path)
    version = answer.get("version") if isinstance(answer, dict) else None
    printer().done(f"Schema of {topic} deleted (version {version})", topic=topic, version=version)


def _record_class(classname: str, path: str | None) -> type[Any]:
    """Import ``module.Class`` (from ``path``, else the working directory, first on the
    import path) and check it is a ``pulsar.schema.Record``. A usage error (exit 2) for a
    name that does not import or a class that is not a Record."""
    module_name, _, class_name = classname.rpartition(".")
    if not module_name or not class_name:
        raise click.BadParameter(f"{classname!r} is not module.Class", param_hint="--classname")
    root = str(Path(path or ".").resolve())
    if path is not None and not Path(root).is_dir():
        raise click.BadParameter(f"{path} is not a directory", param_hint="--path")
    sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while it loads
        raise click.BadParameter(
            f"cannot import {module_name} from {root}: {type(exc).__name__}: {exc}",
            param_hint="--classname",
        ) from None
    finally:
        sys.path.remove(root)
    cls = getattr(module, class_name, None)
    is_record = isinstance(cls, type) and any(
        base.__name__ == "Record" and base.__module__.startswith("pulsar.schema")
        for base in cls.__mro__[1:]
    )
    if not is_record:
        raise click.BadParameter(
            f"{classname} is not a pulsar.schema.Record subclass", param_hint="--classname"
        )
    assert isinstance(cls, type)
    return cls


def record_definition(cls: type[Any]) -> str:
    """The record's Avro schema as the official client sends it for ``AvroSchema(cls)`` and
    ``JsonSchema(cls)`` (``json.dumps(cls.schema(), indent=True)``), so that a typed
    producer of the same class reuses the uploaded version. A usage error if the class
    cannot describe itself."""
    try:
        definition = cls.schema()
    except Exception as exc:  # the user's Record may raise anything
        raise click.BadParameter(
            f"{cls.__name__}.schema() failed: {type(exc).__name__}: {exc}",
            param_hint="--classname",
        ) from None
    return json.dumps(definition, indent=True)


@schemas.command()
@TOPIC
@click.option(
    "--classname", "-c", required=True, help="module.Class: a pulsar.schema.Record subclass."
)
@click.option(
    "--path",
    "-p",
    "path",
    default=None,
    help="Directory the module is imported from (default: the working directory).",
)
@click.option(
    "--type",
    "-t",
    "schema_type",
    required=True,
    type=click.Choice(["avro", "json"], case_sensitive=False),
    help="The schema type to upload.",
)
@click.option("--dry-run", is_flag=True, help="Print the payload instead of uploading it.")
@output_option
def extract(topic: str, classname: str, path: str | None, schema_type: str, dry_run: bool) -> None:
    """Upload the schema of a pulsar.schema.Record class (pulsar-admin's extract takes a
    Java class from a jar)."""
    payload = {
        "type": schema_type.upper(),
        "schema": record_definition(_record_class(classname, path)),
        "properties": {},
    }
    if dry_run:
        printer().result(payload)
        return
    answer = rest().post(f"{_schemas_path(topic)}/schema", payload)
    version = answer.get("version") if isinstance(answer, dict) else None
    printer().done(f"Schema of {topic} is version {version}", topic=topic, version=version)
