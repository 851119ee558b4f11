"""``magnetar admin schemas …`` and the namespace schema policies, as subprocesses against a
real standalone: upload, get, compatibility, delete; refusals as one line and exit 1; bad
files as usage errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from .conftest import Cli

USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def _json(cli: Cli, *args: str) -> Any:
    return json.loads(_ok(cli.admin("--output", "json", *args)))


def _schema_file(tmp_path: Path, fields: list[dict[str, Any]], name: str) -> str:
    path = tmp_path / f"{name}.json"
    body = {"type": "AVRO", "schema": json.dumps(USER | {"fields": fields}), "properties": {}}
    path.write_text(json.dumps(body))
    return str(path)


def test_schemas_lifecycle(cli: Cli, tmp_path: Path) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{ns}/users"
    _ok(cli.admin("namespaces", "create", ns))
    base = _schema_file(tmp_path, USER["fields"], "base")
    wider = _schema_file(tmp_path, [*USER["fields"], {"name": "email", "type": "string"}], "wide")

    assert "version 0" in _ok(cli.admin("schemas", "upload", topic, "-f", base))
    got = _json(cli, "schemas", "get", topic)
    assert (got["version"], got["type"], json.loads(got["data"])) == (0, "AVRO", USER)

    # FULL (the default) refuses a new required field; FORWARD accepts it
    answer = _json(cli, "schemas", "compatibility", topic, "-f", wider)
    assert answer == {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"}
    refused = cli.admin("schemas", "upload", topic, "-f", wider)
    assert refused.returncode == 1 and refused.stdout == ""
    assert (
        refused.stderr.startswith("Error: Incompatible schema") and refused.stderr.count("\n") == 1
    )
    _ok(cli.admin("namespaces", "set-schema-compatibility-strategy", ns, "-c", "forward"))
    assert _json(cli, "namespaces", "get-schema-compatibility-strategy", ns) == "FORWARD"
    assert "version 1" in _ok(cli.admin("schemas", "upload", topic, "-f", wider))
    versions = _json(cli, "schemas", "get", topic, "--all-version")
    assert [v["version"] for v in versions] == [0, 1]
    assert _json(cli, "schemas", "get", topic, "--version", "0")["version"] == 0

    _ok(cli.admin("namespaces", "set-schema-validation-enforce", ns, "--enable"))
    assert _json(cli, "namespaces", "get-schema-validation-enforce", ns) is True
    _ok(cli.admin("namespaces", "set-is-allow-auto-update-schema", ns, "--disable"))
    assert _json(cli, "namespaces", "get-is-allow-auto-update-schema", ns) is False

    assert "version 2" in _ok(cli.admin("schemas", "delete", topic))
    missing = cli.admin("schemas", "get", topic)
    assert missing.returncode == 1 and "Schema not found" in missing.stderr
    assert "version 2" in _ok(cli.admin("schemas", "delete", topic, "--force"))


def test_bad_schema_files(cli: Cli, tmp_path: Path) -> None:
    topic = f"persistent://public/default/cli-bad-{uuid.uuid4().hex[:8]}"
    not_json = tmp_path / "x.json"
    not_json.write_text("{nope")
    wrong_shape = tmp_path / "y.json"
    wrong_shape.write_text("[1, 2]")
    bad_avro = tmp_path / "z.json"
    bad_avro.write_text(json.dumps({"type": "AVRO", "schema": "{broken"}))
    for path in (str(tmp_path / "missing.json"), str(not_json), str(wrong_shape)):
        result = cli.admin("schemas", "upload", topic, "-f", path)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
    result = cli.admin("schemas", "upload", topic, "-f", str(bad_avro))
    assert result.returncode == 1
    assert result.stderr.startswith("Error: Invalid schema definition data for AVRO schema")
    assert "Traceback" not in result.stderr
    bad_strategy = cli.admin("namespaces", "set-schema-compatibility-strategy", "public/default",
                             "-c", "SOMETIMES")  # fmt: skip
    assert bad_strategy.returncode == 2


RECORD_MODULE = """
from pulsar.schema import Integer, Record, String


class Order(Record):
    item = String()
    quantity = Integer()


class NotARecord:
    pass
"""


def test_extract_uploads_a_record_class_schema(cli: Cli, tmp_path: Path) -> None:
    """``extract --classname module.Class --type avro|json`` uploads the Record's schema as
    the official client sends it: a typed producer of the same class reuses the version."""
    import pulsar
    from pulsar.schema import AvroSchema, Integer, Record, String

    (tmp_path / "orders_model.py").write_text(RECORD_MODULE)
    topic = f"persistent://public/default/extract-{uuid.uuid4().hex[:8]}"
    out = _ok(
        cli.admin(
            "schemas", "extract", topic, "--classname", "orders_model.Order",
            "--path", str(tmp_path), "--type", "avro",
        )
    )  # fmt: skip
    assert "version 0" in out
    got = _json(cli, "schemas", "get", topic)
    assert got["type"] == "AVRO"
    assert json.loads(got["data"])["fields"] == [
        {"name": "item", "type": ["null", "string"]},
        {"name": "quantity", "type": ["null", "int"]},
    ]

    class Order(Record):
        item = String()
        quantity = Integer()

    client = pulsar.Client(cli.node.url)
    try:
        producer = client.create_producer(topic, schema=AvroSchema(Order))
        producer.send(Order(item="pen", quantity=2))
    finally:
        client.close()
    versions = _json(cli, "schemas", "get", topic, "--all-version")
    assert [v["version"] for v in versions] == [0]  # reused, not a second version

    dry = _json(
        cli, "schemas", "extract", topic, "-c", "orders_model.Order", "-p", str(tmp_path),
        "-t", "json", "--dry-run",
    )  # fmt: skip
    assert dry["type"] == "JSON" and json.loads(dry["schema"])["name"] == "Order"


def test_extract_bad_input_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "orders_model2.py").write_text(RECORD_MODULE)
    (tmp_path / "broken_model.py").write_text("raise RuntimeError('boom')\n")
    topic = f"persistent://public/default/extract-{uuid.uuid4().hex[:8]}"
    cases = {
        "orders_model2.NotARecord": "not a pulsar.schema.Record subclass",
        "orders_model2.Missing": "not a pulsar.schema.Record subclass",
        "no_such_module.Order": "cannot import no_such_module",
        "broken_model.Order": "RuntimeError: boom",
        "Order": "is not module.Class",
    }
    for classname, message in cases.items():
        result = cli.admin(
            "schemas", "extract", topic, "-c", classname, "-p", str(tmp_path), "-t", "avro"
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
    missing = cli.admin("schemas", "get", topic)
    assert missing.returncode == 1
