"""``magnetar admin schemas get|upload|delete|compatibility`` (``/admin/v2/schemas``), as
``pulsar-admin schemas``.

``upload`` and ``compatibility`` read a schema file shaped as Pulsar's ``PostSchemaPayload``::

    {"type": "AVRO", "schema": "<the Avro definition as a string>", "properties": {}}

(``schema`` may also be given as a JSON object; it is sent as its text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import parse_topic
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


@click.group()
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
