"""The compatibility rules, without I/O: strategies x schema changes, type changes, the
consumer rule, transitive strategies, KEY_VALUE parts, and bad definitions."""

from __future__ import annotations

import json

import pytest

from magnetar.common.errors import IncompatibleSchema
from magnetar.protocol import SchemaType
from magnetar.schema import InvalidSchema, SchemaDefinition, SchemaPolicy, Strategy
from magnetar.schema.compatibility import check_consumer, check_new_version, check_pair
from magnetar.schema.definition import encode_key_value

from .avro_records import BASE_FIELDS, CHANGES, EXPECTED, avro, record

OLD = avro(record(BASE_FIELDS))


@pytest.mark.parametrize("strategy", list(EXPECTED))
@pytest.mark.parametrize("change", list(CHANGES))
def test_matrix(strategy: str, change: str) -> None:
    new = avro(record(CHANGES[change]))
    if EXPECTED[strategy][change]:
        check_new_version([OLD], new, Strategy(strategy))
    else:
        with pytest.raises(IncompatibleSchema):
            check_new_version([OLD], new, Strategy(strategy))


def test_json_is_checked_as_avro() -> None:
    old = avro(record(BASE_FIELDS), SchemaType.Json)
    with pytest.raises(IncompatibleSchema, match="'age'"):
        check_pair(old, avro(record(CHANGES["change_type"]), SchemaType.Json), Strategy.FULL)
    check_pair(old, avro(record(CHANGES["add_optional"]), SchemaType.Json), Strategy.FULL)


def test_record_names_are_not_compared_but_enum_names_are() -> None:
    check_pair(OLD, avro(record(BASE_FIELDS, name="Other")), Strategy.FULL)
    enum_a = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    enum_b = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}
    with pytest.raises(IncompatibleSchema, match="enum"):
        check_pair(
            avro(record([{"name": "c", "type": enum_a}])),
            avro(record([{"name": "c", "type": enum_b}])),
            Strategy.BACKWARD,
        )


def test_promotions_follow_the_avro_spec() -> None:
    ints = avro(record([{"name": "n", "type": "int"}]))
    longs = avro(record([{"name": "n", "type": "long"}]))
    check_pair(ints, longs, Strategy.BACKWARD)  # long reads int data
    with pytest.raises(IncompatibleSchema):
        check_pair(ints, longs, Strategy.FORWARD)  # int cannot read long data


def test_optional_field_as_the_official_client_writes_it() -> None:
    """``Integer()`` becomes ``["null", "int"]`` without a default: adding it is FORWARD
    compatible only (the new reader has no default for it)."""
    new = avro(record([*BASE_FIELDS, {"name": "email", "type": ["null", "string"]}]))
    check_pair(OLD, new, Strategy.FORWARD)
    with pytest.raises(IncompatibleSchema, match="no default"):
        check_pair(OLD, new, Strategy.BACKWARD)


def test_a_type_change_is_refused_unless_always_compatible() -> None:
    string = SchemaDefinition(SchemaType.String, b"")
    for strategy in Strategy:
        if strategy in (Strategy.ALWAYS_COMPATIBLE, Strategy.UNDEFINED):
            continue
        with pytest.raises(
            IncompatibleSchema, match="exists schema type AVRO, new schema type STRING"
        ):
            check_pair(OLD, string, strategy)
    check_pair(OLD, string, Strategy.ALWAYS_COMPATIBLE)


def test_identical_schemas_pass_even_always_incompatible() -> None:
    check_pair(OLD, avro(record(BASE_FIELDS)), Strategy.ALWAYS_INCOMPATIBLE)


def test_transitive_checks_every_live_version() -> None:
    """w1 gave "age" a default, w2 drops it: w1 reads w2's data (FORWARD against the latest
    passes), w0 cannot (FORWARD_TRANSITIVE refuses)."""
    w0 = avro(record([{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]))
    w1 = avro(record([{"name": "name", "type": "string"},
                      {"name": "age", "type": "int", "default": 0}]))  # fmt: skip
    w2 = avro(record([{"name": "name", "type": "string"}]))
    check_new_version([w0, w1], w2, Strategy.FORWARD)
    with pytest.raises(IncompatibleSchema):
        check_new_version([w0, w1], w2, Strategy.FORWARD_TRANSITIVE)
    # And backwards: v1 added "email" with a default, v2 makes it required; v2 reads v1's
    # data (email present) but not v0's.
    v0 = avro(record(BASE_FIELDS))
    v1 = avro(record(CHANGES["add_optional"]))
    v2 = avro(record([*BASE_FIELDS, {"name": "email", "type": ["null", "string"]}]))
    check_new_version([v0, v1], v2, Strategy.BACKWARD)
    with pytest.raises(IncompatibleSchema):
        check_new_version([v0, v1], v2, Strategy.BACKWARD_TRANSITIVE)


def test_consumer_rule() -> None:
    bad = avro(record(CHANGES["change_type"]))
    with pytest.raises(IncompatibleSchema, match="does not have schema"):
        check_consumer([], OLD, Strategy.FULL)
    check_consumer([], OLD, Strategy.ALWAYS_COMPATIBLE)
    with pytest.raises(IncompatibleSchema):
        check_consumer([OLD], bad, Strategy.FULL)
    # FORWARD checks the consumer as BACKWARD against the latest: a reader with a new
    # required field cannot read the topic's data.
    with pytest.raises(IncompatibleSchema):
        check_consumer([OLD], avro(record(CHANGES["add_required"])), Strategy.FORWARD)
    check_consumer([OLD], avro(record(CHANGES["remove_field"])), Strategy.FORWARD)


def test_key_value_parts_are_checked_separately() -> None:
    def kv(value_fields: list[dict[str, object]]) -> SchemaDefinition:
        value = avro(record(value_fields)).data
        return SchemaDefinition(
            SchemaType.KeyValue,
            encode_key_value(b"", value),
            (("key.schema.type", "STRING"), ("value.schema.type", "AVRO")),
        )

    check_pair(kv(BASE_FIELDS), kv(CHANGES["add_optional"]), Strategy.FULL)
    with pytest.raises(IncompatibleSchema):
        check_pair(kv(BASE_FIELDS), kv(CHANGES["change_type"]), Strategy.FULL)


@pytest.mark.parametrize(
    ("kind", "data", "reason"),
    [
        (SchemaType.Avro, b"{not json", "not JSON"),
        (SchemaType.Json, b'{"type": "record", "name": "R", "fields": [{"type": "int"}]}', "name"),
        (SchemaType.Avro, b'{"type": "nosuchtype"}', "unknown type.*nosuchtype"),
        (SchemaType.Avro, b'{"type": "array"}', "missing attribute 'items'"),
        (SchemaType.Avro, b"\xff\xfe", "not JSON"),
        (SchemaType.KeyValue, b"\x00\x00\x00\x05ab", "truncated"),
        (SchemaType.Avro, b" " * 600_000, "at most"),
    ],
)
def test_bad_definitions_are_refused(kind: SchemaType, data: bytes, reason: str) -> None:
    with pytest.raises(InvalidSchema, match=reason):
        SchemaDefinition(kind, data).validate()


def test_policy_resolution() -> None:
    assert SchemaPolicy.resolve(namespace_strategy="UNDEFINED").strategy is Strategy.FULL
    assert SchemaPolicy.resolve(namespace_strategy=None).strategy is Strategy.FULL
    assert SchemaPolicy.resolve(namespace_strategy="forward").strategy is Strategy.FORWARD
    both = SchemaPolicy.resolve(namespace_strategy="FORWARD", topic_strategy="BACKWARD")
    assert both.strategy is Strategy.BACKWARD
    assert SchemaPolicy.resolve(namespace_strategy="bogus").strategy is Strategy.FULL
    policy = SchemaPolicy.resolve(namespace_strategy=None)
    assert policy.allow_auto_update and not policy.validation_enforced


def _protobuf(message: type) -> SchemaDefinition:
    from pulsar.schema import ProtobufNativeSchema

    data = ProtobufNativeSchema(message).schema_info().schema().encode()
    return SchemaDefinition(SchemaType.ProtobufNative, data)


def test_protobuf_native_root_message_may_not_change() -> None:
    """Pulsar's default protobuf validator: the root message's full name is what counts."""
    from magnetar.protocol.generated import PulsarApi_pb2 as pb

    ids, keys = _protobuf(pb.MessageIdData), _protobuf(pb.KeyValue)
    ids.validate()
    assert ids.protobuf_root_message() == "magnetar.pulsar.MessageIdData"
    for strategy in (Strategy.BACKWARD, Strategy.FORWARD, Strategy.FULL, Strategy.FULL_TRANSITIVE):
        with pytest.raises(IncompatibleSchema, match="root message"):
            check_pair(ids, keys, strategy)
    check_pair(ids, keys, Strategy.ALWAYS_COMPATIBLE)
    # the same root with a different descriptor set (other properties) passes
    changed = SchemaDefinition(SchemaType.ProtobufNative, ids.data.replace(b"{", b"{ ", 1))
    check_pair(ids, changed, Strategy.FULL)
    with pytest.raises(IncompatibleSchema):
        check_pair(ids, changed, Strategy.ALWAYS_INCOMPATIBLE)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{}", "missing 'rootMessageTypeName'"),
        (b'{"rootMessageTypeName": "x", "fileDescriptorSet": "!!"}', "base64"),
        (b'{"rootMessageTypeName": "x", "fileDescriptorSet": "AAAA"}', "Error parsing"),
        (b"not json", "Expecting value"),
    ],
)
def test_bad_protobuf_descriptors(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidSchema, match=reason):
        SchemaDefinition(SchemaType.ProtobufNative, data).validate()


def test_protobuf_root_must_be_in_the_descriptor_set() -> None:
    from magnetar.protocol.generated import PulsarApi_pb2 as pb

    body = json.loads(_protobuf(pb.MessageIdData).data)
    body["rootMessageTypeName"] = "magnetar.pulsar.Nope"
    with pytest.raises(InvalidSchema, match="not in the descriptor set"):
        SchemaDefinition(SchemaType.ProtobufNative, json.dumps(body).encode()).validate()
