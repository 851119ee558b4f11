"""The worker's in-memory views of its topics (sans-IO): records in, maps out; and the
runtime manager's plan and the REST layer's reading of pulsar-admin's multipart uploads."""

from __future__ import annotations

import pytest

from magnetar.cli.admin.rest import FormPart, encode_form
from magnetar.functions.assignment_table import AssignmentTable, assignment_payload
from magnetar.functions.errors import InvalidRequest
from magnetar.functions.function_config import ComponentKind, FunctionConfig
from magnetar.functions.function_registry import (
    FunctionRecord,
    FunctionRegistry,
    InvalidRecord,
    PackageRef,
)
from magnetar.functions.rest import parse_definition_body
from magnetar.functions.runtime_manager import RuntimePlan, plan_runtime, wanted_here


def _config(name: str = "f", parallelism: int = 2) -> FunctionConfig:
    return FunctionConfig(
        tenant="t", namespace="n", name=name, inputs=("in",), parallelism=parallelism
    )


def test_registry_applies_records_tombstones_and_skips_markers() -> None:
    reg = FunctionRegistry()
    ref = PackageRef("p1", "f.py", 10, "0a0b", 1)
    record = FunctionRecord(config=_config(), package=ref, stopped_instances=frozenset({1}))
    assert FunctionRecord.from_payload(record.to_payload()) == record
    assert reg.apply("t/n/f", record.to_payload())
    assert not reg.apply("t/n/f", record.to_payload())  # same record: no change
    assert not reg.apply("__leader__", b'{"leader": "w1:h:1", "term": 1}')
    assert reg.list("t", "n", ComponentKind.FUNCTION) == ["f"]
    assert reg.list("t", "n", ComponentKind.SINK) == []
    assert reg.apply("t/n/f", b"")
    assert reg.get("t/n/f") is None and len(reg) == 0


def test_registry_refuses_foreign_records() -> None:
    reg = FunctionRegistry()
    with pytest.raises(InvalidRecord):
        reg.apply("t/n/f", b"not json")
    with pytest.raises(InvalidRecord, match="describes"):
        reg.apply("t/n/other", FunctionRecord(config=_config()).to_payload())


def test_assignment_table() -> None:
    table = AssignmentTable()
    assert table.apply("t/n/f:0", assignment_payload("w1"))
    assert table.apply("t/n/f:1", assignment_payload("w2"))
    assert not table.apply("t/n/f:1", assignment_payload("w2"))
    assert table.of_worker("w1") == ["t/n/f:0"]
    assert table.apply("t/n/f:0", b"")
    assert table.owner("t/n/f:0") is None
    with pytest.raises(InvalidRecord):
        table.apply("no-index", assignment_payload("w1"))
    with pytest.raises(InvalidRecord):
        table.apply("t/n/f:2", b'{"workerId": 3}')


def test_runtime_plan_restarts_changed_generations_and_skips_stopped_instances() -> None:
    reg, table = FunctionRegistry(), AssignmentTable()
    record = FunctionRecord(config=_config(parallelism=3), stopped_instances=frozenset({2}))
    reg.apply("t/n/f", record.to_payload())
    for i, w in enumerate(["w1", "w2", "w1"]):
        table.apply(f"t/n/f:{i}", assignment_payload(w))
    table.apply("t/n/gone:0", assignment_payload("w1"))  # no definition: not run
    wanted = wanted_here("w1", reg, table)
    assert sorted(wanted) == ["t/n/f:0"]
    assert plan_runtime(wanted, {}) == RuntimePlan(stop=(), start=("t/n/f:0",))
    assert plan_runtime(wanted, {"t/n/f:0": 1}) == RuntimePlan((), ())
    assert plan_runtime(wanted, {"t/n/f:0": 0, "t/n/f:2": 1}) == RuntimePlan(
        stop=("t/n/f:0", "t/n/f:2"), start=("t/n/f:0",)
    )


def test_multipart_as_pulsar_admin_sends_it() -> None:
    content_type, body = encode_form(
        [
            FormPart("functionConfig", b'{"inputs": ["in"]}'),
            FormPart("data", b"\x00binary\r\n--not-a-boundary", "application/octet-stream", "f.py"),
        ]
    )
    definition, package = parse_definition_body(content_type, body)
    assert definition == {"inputs": ["in"]}
    assert package == ("f.py", b"\x00binary\r\n--not-a-boundary")
    assert parse_definition_body("application/json", b'{"a": 1}') == ({"a": 1}, None)
    for ct, raw, words in (
        ("application/json", b"{bad", "not valid JSON"),
        ("application/json", b"[1]", "JSON object"),
        ("application/json", b"", "no definition"),
        (content_type, body.replace(b"functionConfig", b"other"), "no functionConfig"),
    ):
        with pytest.raises(InvalidRequest, match=words):
            parse_definition_body(ct, raw)
