"""The schema registry seen through the official ``pulsar-client`` wheel (typed producers
and consumers with ``pulsar.schema`` records) and the admin REST API of a real
``magnetar standalone`` process: versions, evolution, refusals, the strategy matrix over the
wire and over REST, namespace schema policies, bad input, durability across SIGKILL."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, BytesSchema, Integer, JsonSchema, Record, String, StringSchema

from magnetar.common.errors import ServerError
from magnetar.protocol import (
    Error,
    GetOrCreateSchema,
    GetOrCreateSchemaResponse,
    GetSchema,
    GetSchemaResponse,
    ProducerSuccess,
    SchemaInfo,
    SchemaType,
)
from magnetar.testing import StandaloneProcess

from .helpers import new_client
from .raw import RawClient

HTTP_TIMEOUT_S = 15
ZERO_VERSION = b"\x00" * 8


class Rest:
    """Blocking JSON calls to the admin API; returns (status, JSON body or None)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            return err.code, json.loads(raw) if raw else None


@pytest.fixture
def rest(standalone: StandaloneProcess) -> Rest:
    return Rest(standalone.http_url)


@pytest.fixture
def namespace(rest: Rest) -> Iterator[str]:
    """A namespace of the test's own (its schema policies change nothing elsewhere)."""
    ns = f"public/schema-{uuid.uuid4().hex[:8]}"
    assert rest("PUT", f"/admin/v2/namespaces/{ns}", {})[0] == 204
    yield ns


def _topic(namespace: str) -> str:
    return f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"


def _schemas_path(topic: str) -> str:
    return "/admin/v2/schemas/" + topic.removeprefix("persistent://")


class Example(Record):
    a = Integer()
    b = Integer()


class BadExample(Record):  # "a" changed from int to string
    a = String()
    b = Integer()


def test_first_version_is_eight_zero_bytes(client: pulsar.Client, rest: Rest, topic: str) -> None:
    producer = client.create_producer(topic, schema=AvroSchema(Example))
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(Example))
    producer.send(Example(a=1, b=2))
    msg = consumer.receive(10_000)
    assert msg.schema_version().encode() == ZERO_VERSION
    assert msg.value() == Example(a=1, b=2)
    status, body = rest("GET", _schemas_path(topic) + "/schema")
    assert status == 200
    assert (body["version"], body["type"]) == (0, "AVRO")
    assert json.loads(body["data"]) == Example.schema()


def test_evolution_each_version_is_fetched(
    client: pulsar.Client, rest: Rest, namespace: str
) -> None:
    """FORWARD: a second producer adds a required field; the consumer and a reader with the
    first schema decode messages of both versions (the client fetches version 1)."""

    class User1(Record):
        name = String()
        age = Integer()

    class User2(Record):
        name = String()
        age = Integer(required=True)

    path = f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy"
    assert rest("PUT", path, "FORWARD")[0] == 204
    assert rest("GET", path) == (200, "FORWARD")
    topic = _topic(namespace)
    p1 = client.create_producer(topic, schema=AvroSchema(User1))
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(User1))
    p2 = client.create_producer(topic, schema=AvroSchema(User2))
    for i in range(3):
        p1.send(User1(name=f"one-{i}", age=i))
        p2.send(User2(name=f"two-{i}", age=100 + i))
    seen = []
    for _ in range(6):
        msg = consumer.receive(10_000)
        seen.append((msg.schema_version().encode(), msg.value().name, msg.value().age))
    assert seen[:2] == [(ZERO_VERSION, "one-0", 0), ((1).to_bytes(8, "big"), "two-0", 100)]
    status, body = rest("GET", _schemas_path(topic) + "/schemas")
    assert status == 200
    assert [v["version"] for v in body["getSchemaResponses"]] == [0, 1]
    # Under FULL (the default elsewhere) the same change is refused.
    other = _topic("public/default")
    client.create_producer(other, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(other, schema=AvroSchema(User2))


def test_incompatible_consumers_and_producers_are_refused(
    client: pulsar.Client, rest: Rest, topic: str
) -> None:
    producer = client.create_producer(topic, schema=JsonSchema(Example))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "sub", schema=JsonSchema(BadExample))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "sub", schema=AvroSchema(Example))  # another type
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())
    assert [v["version"] for v in rest("GET", _schemas_path(topic) + "/schemas")[1][
        "getSchemaResponses"
    ]] == [0]  # fmt: skip
    consumer = client.subscribe(topic, "sub", schema=JsonSchema(Example))
    producer.send(Example(a=3, b=4))
    assert consumer.receive(10_000).value() == Example(a=3, b=4)


def test_string_schema_and_validation_enforced(
    client: pulsar.Client, rest: Rest, namespace: str
) -> None:
    topic = _topic(namespace)
    producer = client.create_producer(topic, schema=StringSchema())
    consumer = client.subscribe(topic, "sub", schema=StringSchema())
    producer.send("héllo")
    msg = consumer.receive(10_000)
    assert (msg.value(), msg.data()) == ("héllo", "héllo".encode())
    # Without enforcement a producer with no schema (BYTES) is let in; with it, refused.
    client.create_producer(topic, schema=BytesSchema()).close()
    path = f"/admin/v2/namespaces/{namespace}/schemaValidationEnforced"
    assert rest("GET", path) == (200, False)
    assert rest("POST", path, True)[0] == 204
    assert rest("GET", path) == (200, True)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=BytesSchema())


def test_auto_update_disabled_refuses_new_versions(
    client: pulsar.Client, rest: Rest, namespace: str
) -> None:
    class V1(Record):
        a = Integer(required=True)

    class V2(Record):
        a = Integer(required=True)
        b = Integer(default=None, required_default=True)

    topic = _topic(namespace)
    client.create_producer(topic, schema=AvroSchema(V1))
    path = f"/admin/v2/namespaces/{namespace}/isAllowAutoUpdateSchema"
    assert rest("POST", path, False)[0] == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(V2))
    client.create_producer(topic, schema=AvroSchema(V1)).close()  # a known version is fine
    assert rest("POST", path, True)[0] == 204
    client.create_producer(topic, schema=AvroSchema(V2)).close()


# --- the strategy matrix, through the wire and through REST ---------------------------------


def _record(fields: dict[str, Any]) -> type[Record]:
    return type("User", (Record,), dict(fields))


def _base() -> dict[str, Any]:
    return {"name": String(required=True), "age": Integer(required=True)}


CHANGES: dict[str, Callable[[], dict[str, Any]]] = {
    "add_optional": lambda: _base() | {"email": String(default=None, required_default=True)},
    "add_required": lambda: _base() | {"email": String(required=True)},
    "remove_field": lambda: {"name": String(required=True)},
    "change_type": lambda: {"name": String(required=True), "age": String(required=True)},
}
ACCEPTED: dict[str, set[str]] = {
    "ALWAYS_COMPATIBLE": set(CHANGES),
    "ALWAYS_INCOMPATIBLE": set(),
    "BACKWARD": {"add_optional", "remove_field"},
    "FORWARD": {"add_optional", "add_required"},
    "FULL": {"add_optional"},
}
for _base_name in ("BACKWARD", "FORWARD", "FULL"):
    ACCEPTED[f"{_base_name}_TRANSITIVE"] = ACCEPTED[_base_name]


@pytest.mark.parametrize("strategy", list(ACCEPTED))
def test_strategy_matrix(client: pulsar.Client, rest: Rest, namespace: str, strategy: str) -> None:
    assert rest("PUT", f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy", strategy)[
        0
    ] == 204  # fmt: skip
    outcomes_wire: dict[str, bool] = {}
    outcomes_rest: dict[str, bool] = {}
    for change, fields in CHANGES.items():
        # over the wire: a producer with the base schema, then one with the changed schema
        topic = _topic(namespace)
        client.create_producer(topic, schema=AvroSchema(_record(_base())))
        try:
            client.create_producer(topic, schema=AvroSchema(_record(fields())))
            outcomes_wire[change] = True
        except pulsar.IncompatibleSchema:
            outcomes_wire[change] = False
        # over REST: upload the base, ask, then upload the change
        path = _schemas_path(_topic(namespace))
        base_payload = {"type": "AVRO", "schema": json.dumps(_record(_base()).schema())}
        changed = {"type": "AVRO", "schema": json.dumps(_record(fields()).schema())}
        assert rest("POST", path + "/schema", base_payload) == (200, {"version": 0})
        status, answer = rest("POST", path + "/compatibility", changed)
        assert status == 200 and answer["schemaCompatibilityStrategy"] == strategy
        status, body = rest("POST", path + "/schema", changed)
        assert status in (200, 409), body
        outcomes_rest[change] = status == 200
        assert answer["isCompatibility"] == outcomes_rest[change]
        if status == 200:
            assert body == {"version": 1}
        else:
            assert len(rest("GET", path + "/schemas")[1]["getSchemaResponses"]) == 1
    expected = {change: change in ACCEPTED[strategy] for change in CHANGES}
    assert outcomes_wire == expected
    assert outcomes_rest == expected


# --- REST: upload, delete, bad input ----------------------------------------------------------


def test_rest_upload_get_delete(client: pulsar.Client, rest: Rest, topic: str) -> None:
    path = _schemas_path(topic)
    payload = {"type": "JSON", "schema": json.dumps(Example.schema()), "properties": {"k": "v"}}
    assert rest("POST", path + "/schema", payload) == (200, {"version": 0})
    assert rest("POST", path + "/schema", payload) == (200, {"version": 0})
    status, got = rest("GET", path + "/schema/0")
    assert status == 200 and got["type"] == "JSON" and got["properties"] == {"k": "v"}
    # the official client, by the binary protocol, sees the uploaded schema
    info = client._client.get_schema_info(topic, 0)
    assert json.loads(info.schema()) == Example.schema()
    assert rest("DELETE", path + "/schema") == (200, {"version": 1})
    assert rest("GET", path + "/schema")[0] == 404
    with pytest.raises(pulsar.TopicNotFound):
        client._client.get_schema_info(topic, -1)
    # after the delete anything may start a new history
    producer = client.create_producer(topic, schema=StringSchema())
    producer.close()
    assert rest("GET", path + "/schema")[1]["version"] == 2


def test_topic_deletion_deletes_its_schema(client: pulsar.Client, rest: Rest, topic: str) -> None:
    client.create_producer(topic, schema=AvroSchema(Example)).close()
    local = topic.removeprefix("persistent://")
    assert rest("DELETE", f"/admin/v2/persistent/{local}?force=true")[0] == 204
    assert rest("GET", _schemas_path(topic) + "/schema")[0] == 404
    producer = client.create_producer(topic, schema=StringSchema())  # no old schema to match
    consumer = client.subscribe(topic, "s", schema=StringSchema())
    producer.send("x")
    assert consumer.receive(10_000).schema_version().encode() == ZERO_VERSION


def test_partitions_share_the_schema(client: pulsar.Client, rest: Rest, topic: str) -> None:
    local = topic.removeprefix("persistent://")
    assert rest("PUT", f"/admin/v2/persistent/{local}/partitions", 3)[0] == 204
    producer = client.create_producer(topic, schema=AvroSchema(Example))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(f"{topic}-partition-1", "s", schema=AvroSchema(BadExample))
    consumer = client.subscribe(f"{topic}-partition-2", "s", schema=AvroSchema(Example))
    producer.send(Example(a=1, b=1), partition_key="k")
    assert rest("GET", _schemas_path(topic) + "/schema")[1]["version"] == 0
    del consumer


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ({"type": "AVRO", "schema": "{not json"}, 422),
        ({"type": "JSON", "schema": '{"type": "record", "name": "R", "fields": [{"x": 1}]}'}, 422),
        ({"type": "AVRO", "schema": '{"type": "nosuchtype"}'}, 422),
        ({"type": "NOT_A_TYPE", "schema": ""}, 422),
        ({"type": "AUTO_CONSUME", "schema": ""}, 422),
        ({"type": "KEY_VALUE", "schema": "[]"}, 422),
        ({"type": "STRING", "schema": "x" * 600_000}, 422),
        ({"type": "AVRO", "schema": "{}", "properties": {"a": 1}}, 400),
        ([1, 2], 400),
    ],
)
def test_bad_uploads_are_refused_and_change_nothing(
    client: pulsar.Client, rest: Rest, topic: str, payload: Any, status: int
) -> None:
    path = _schemas_path(topic)
    client.create_producer(topic, schema=AvroSchema(Example)).close()
    answer = rest("POST", path + "/schema", payload)
    assert answer[0] == status
    assert isinstance(answer[1]["reason"], str) and "\n" not in answer[1]["reason"]
    assert [v["version"] for v in rest("GET", path + "/schemas")[1]["getSchemaResponses"]] == [0]
    assert rest("GET", "/admin/v2/clusters")[0] == 200  # still serving


def test_schema_survives_sigkill(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    topic = f"persistent://public/default/durable-{uuid.uuid4().hex[:8]}"
    c = new_client(node.url)
    try:
        c.create_producer(topic, schema=AvroSchema(Example)).close()
    finally:
        c.close()
    node.kill()
    node.start()
    c = new_client(node.url)
    try:
        with pytest.raises(pulsar.IncompatibleSchema):
            c.create_producer(topic, schema=AvroSchema(BadExample))
        producer = c.create_producer(topic, schema=AvroSchema(Example))
        consumer = c.subscribe(topic, "s", schema=AvroSchema(Example))
        producer.send(Example(a=5, b=6))
        msg = consumer.receive(10_000)
        assert msg.schema_version().encode() == ZERO_VERSION and msg.value() == Example(a=5, b=6)
    finally:
        c.close()


# --- the binary protocol directly: bad schemas, GET_SCHEMA, GET_OR_CREATE_SCHEMA -------------


@pytest.mark.parametrize(
    ("kind", "data", "reason"),
    [
        (SchemaType.Avro, b"{not json", "not JSON"),
        (SchemaType.Json, b'{"type": "record", "name": "R", "fields": [{"type": "int"}]}', "name"),
        (SchemaType.Avro, b'{"type": "nosuchtype"}', "nosuchtype"),
        (SchemaType.KeyValue, b"\x00\x00\x00\x09abc", "truncated"),
    ],
)
def test_bad_schemas_over_the_wire(
    standalone: StandaloneProcess,
    rest: Rest,
    topic: str,
    kind: SchemaType,
    data: bytes,
    reason: str,
) -> None:
    raw = RawClient(standalone.port)
    try:
        good = SchemaInfo(
            name="x", schema_data=json.dumps(Example.schema()).encode(), type=SchemaType.Avro
        )
        assert isinstance(raw.create_producer(topic, 1, schema=good), ProducerSuccess)
        answer = raw.create_producer(
            topic, 2, schema=SchemaInfo(name="x", schema_data=data, type=kind)
        )
        assert isinstance(answer, Error) and answer.error == ServerError.IncompatibleSchema
        assert reason in answer.message and "\n" not in answer.message
        got = raw.request(GetSchema(request_id=raw.next_id(), topic=topic))
        assert isinstance(got, GetSchemaResponse) and got.schema_version == ZERO_VERSION
        assert got.schema is not None and got.schema.schema_data == good.schema_data
    finally:
        raw.close()
    assert [v["version"] for v in rest("GET", _schemas_path(topic) + "/schemas")[1][
        "getSchemaResponses"
    ]] == [0]  # fmt: skip


def test_get_schema_and_get_or_create_over_the_wire(
    standalone: StandaloneProcess, topic: str
) -> None:
    raw = RawClient(standalone.port)
    try:
        avro = SchemaInfo(
            name="x", schema_data=json.dumps(Example.schema()).encode(), type=SchemaType.Avro
        )
        missing = raw.request(GetOrCreateSchema(request_id=raw.next_id(), topic=topic, schema=avro))
        assert isinstance(missing, GetOrCreateSchemaResponse)
        assert missing.error_code == ServerError.TopicNotFound
        assert isinstance(raw.create_producer(topic, 1), ProducerSuccess)  # creates the topic
        created = raw.request(GetOrCreateSchema(request_id=raw.next_id(), topic=topic, schema=avro))
        assert isinstance(created, GetOrCreateSchemaResponse) and created.error_code is None
        assert created.schema_version == ZERO_VERSION
        for version in (None, ZERO_VERSION):
            got = raw.request(
                GetSchema(request_id=raw.next_id(), topic=topic, schema_version=version)
            )
            assert isinstance(got, GetSchemaResponse) and got.error_code is None
            assert got.schema is not None and got.schema.type == SchemaType.Avro
        for version in ((1).to_bytes(8, "big"), b"\x01"):
            got = raw.request(
                GetSchema(request_id=raw.next_id(), topic=topic, schema_version=version)
            )
            assert (
                isinstance(got, GetSchemaResponse) and got.error_code == ServerError.TopicNotFound
            )
        string = SchemaInfo(name="x", schema_data=b"", type=SchemaType.String)
        refused = raw.request(
            GetOrCreateSchema(request_id=raw.next_id(), topic=topic, schema=string)
        )
        assert isinstance(refused, GetOrCreateSchemaResponse)
        assert refused.error_code == ServerError.IncompatibleSchema
    finally:
        raw.close()


def test_oversized_schema_over_the_wire(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """With the default 5 MiB frames a 600 KB schema reaches the registry, which refuses it
    (its bound is 512 KiB); the connection and the process carry on."""
    node = standalone_factory()
    topic = f"persistent://public/default/big-{uuid.uuid4().hex[:8]}"
    raw = RawClient(node.port)
    try:
        big = SchemaInfo(name="x", schema_data=b"x" * 600_000, type=SchemaType.String)
        answer = raw.create_producer(topic, 1, schema=big)
        assert isinstance(answer, Error) and answer.error == ServerError.IncompatibleSchema
        assert "at most 524288" in answer.message
        got = raw.request(GetSchema(request_id=raw.next_id(), topic=topic))
        assert isinstance(got, GetSchemaResponse) and got.error_code == ServerError.TopicNotFound
        assert isinstance(raw.create_producer(topic, 2), ProducerSuccess)
    finally:
        raw.close()


def test_protobuf_native_root_message_may_not_change(client: pulsar.Client, topic: str) -> None:
    from pulsar.schema import ProtobufNativeSchema

    from magnetar.protocol.generated import PulsarApi_pb2 as pb

    producer = client.create_producer(topic, schema=ProtobufNativeSchema(pb.MessageIdData))
    consumer = client.subscribe(topic, "s", schema=ProtobufNativeSchema(pb.MessageIdData))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=ProtobufNativeSchema(pb.KeyValue))
    producer.send(pb.MessageIdData(ledgerId=7, entryId=9))
    msg = consumer.receive(10_000)
    assert (msg.value().ledgerId, msg.value().entryId) == (7, 9)
    assert msg.schema_version().encode() == ZERO_VERSION


def test_topic_strategy_overrides_the_namespace(
    client: pulsar.Client, rest: Rest, topic: str
) -> None:
    base = _record(_base())
    wider = _record(CHANGES["add_required"]())
    client.create_producer(topic, schema=AvroSchema(base)).close()
    with pytest.raises(pulsar.IncompatibleSchema):  # FULL, the broker default
        client.create_producer(topic, schema=AvroSchema(wider))
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/schemaCompatibilityStrategy"
    assert rest("GET", path)[0] == 204  # unset at the topic
    assert rest("GET", path + "?applied=true") == (200, "UNDEFINED")  # the namespace's
    assert rest("PUT", path, "FORWARD")[0] == 204
    assert rest("GET", path) == (200, "FORWARD")
    client.create_producer(topic, schema=AvroSchema(wider)).close()
    assert rest("PUT", path, "SOMETIMES")[0] == 400
