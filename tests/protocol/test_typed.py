"""The typed layer matches the .proto, and the .proto matches the reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor

import magnetar.protocol as p
from magnetar.common.errors import ServerError
from magnetar.protocol import _convert
from magnetar.protocol.generated import PulsarApi_pb2 as pb


def _typed_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("name", sorted(_convert.STRUCTS))
def test_typed_fields_follow_the_proto(name: str) -> None:
    typed = _convert.STRUCTS[name]
    descriptor = pb.DESCRIPTOR.message_types_by_name[name.split(".")[-1]]
    by_name = {f.name: f for f in dataclasses.fields(typed)}
    assert set(by_name) == {_convert.typed_name(f.name) for f in descriptor.fields}
    for f in descriptor.fields:
        typed_field = by_name[_convert.typed_name(f.name)]
        default = _typed_default(typed_field)
        if f.is_repeated:
            assert default == (), f.full_name
        elif f.is_required and f.full_name not in _convert.FILLED_BY_CODEC:
            assert default is dataclasses.MISSING, f"{f.full_name} is required"
        elif f.has_default_value and f.full_name not in _convert.PRESENCE_FIELDS:
            assert default == f.default_value, f.full_name
        elif f.full_name in _convert.FILLED_BY_CODEC:
            assert default == 0
        else:
            assert default is None, f"{f.full_name} has no default: None means absent"


def test_enums_match_the_proto() -> None:
    for full_name, enum_cls in _convert.ENUMS.items():
        pool_enum = pb.DESCRIPTOR.pool.FindEnumTypeByName(full_name)
        assert {v.number for v in pool_enum.values} == {e.value for e in enum_cls}, full_name
    assert {e.name: e.value for e in ServerError} == {
        v.name: v.number for v in pb.ServerError.DESCRIPTOR.values
    }


def test_base_command_field_numbers_equal_type_values() -> None:
    base = pb.BaseCommand.DESCRIPTOR
    assert base.fields_by_number[1].name == "type" and base.fields_by_number[1].is_required
    for t in p.CommandType:
        f = base.fields_by_number[int(t)]
        assert f.type == FieldDescriptor.TYPE_MESSAGE and not f.is_required
        # Typed names are the protobuf names without the "Command" prefix.
        assert f.message_type.name == "Command" + p.COMMAND_CLASSES[t].__name__


def test_reference_field_numbers_of_shared_messages() -> None:
    def numbers(msg: Any) -> dict[str, int]:
        return {f.name: f.number for f in msg.DESCRIPTOR.fields}

    assert numbers(pb.MessageIdData) == {
        "ledgerId": 1, "entryId": 2, "partition": 3, "batch_index": 4, "ack_set": 5,
        "batch_size": 6, "first_chunk_message_id": 7,
    }  # fmt: skip
    md = numbers(pb.MessageMetadata)
    assert md["num_messages_in_batch"] == 11 and md["deliver_at_time"] == 19
    assert md["txnid_least_bits"] == 22 and md["null_partition_key"] == 30
    assert md["uuid"] == 26 and md["chunk_id"] == 29 and "checksum" not in md
    assert numbers(pb.SingleMessageMetadata)["payload_size"] == 3
    assert numbers(pb.BrokerEntryMetadata) == {"broker_timestamp": 1, "index": 2}
    assert numbers(pb.KeySharedMeta) == {
        "keySharedMode": 1,
        "hashRanges": 3,
        "allowOutOfOrderDelivery": 4,
    }
    assert numbers(pb.Schema) == {"name": 1, "schema_data": 3, "type": 4, "properties": 5}
    assert numbers(pb.CommandConsumerStats) == {"request_id": 1, "consumer_id": 4}


def test_message_id_conventions() -> None:
    assert p.MessageId(-1, -1) == p.EARLIEST and p.EARLIEST.is_earliest
    assert p.MessageId(2**63 - 1, 2**63 - 1) == p.LATEST and p.LATEST.is_latest
    mid = p.MessageId(3, 4)
    assert (mid.partition, mid.batch_index, mid.position) == (-1, -1, (3, 4))
    assert str(p.MessageId(1, 2, 3, 4)) == "1:2:3:4"
    m = pb.MessageIdData(ledgerId=2**64 - 1, entryId=2**63)
    assert _convert.message_id_from_pb(m) == p.MessageId(-1, -(2**63))
    with pytest.raises(ValueError):
        p.encode(p.Seek(consumer_id=1, request_id=1, message_id=p.MessageId(-(2**63) - 1, 0)))


def test_commands_are_frozen_and_slotted() -> None:
    flow = p.Flow(consumer_id=1, message_permits=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        flow.consumer_id = 3  # type: ignore[misc]
    assert not hasattr(flow, "__dict__")
    with pytest.raises(TypeError):
        p.Flow(1, 2)  # type: ignore[misc]  # keyword-only


def test_payload_commands_need_payload_encoders() -> None:
    with pytest.raises(ValueError):
        p.encode(p.Send(producer_id=1, sequence_id=1))


def test_pattern_matching_on_commands() -> None:
    (frame,) = p.FrameDecoder().feed(p.encode(p.Flow(consumer_id=7, message_permits=500)))
    match frame.command:
        case p.Flow(consumer_id=cid, message_permits=n):
            assert (cid, n) == (7, 500)
        case _:
            pytest.fail("not a Flow")


def test_message_id_is_a_normal_frozen_dataclass() -> None:
    mid = p.MessageId(1, 2, 3, 4, (5,), 6, p.MessageId(1, 1))
    assert mid == p.MessageId(
        ledger_id=1, entry_id=2, partition=3, batch_index=4, ack_set=(5,), batch_size=6,
        first_chunk_message_id=p.MessageId(1, 1),
    )  # fmt: skip
    assert hash(mid) == hash(p.MessageId(1, 2, 3, 4, (5,), 6, p.MessageId(1, 1)))
    assert dataclasses.replace(mid, partition=9).partition == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        mid.entry_id = 3  # type: ignore[misc]
    assert not hasattr(mid, "__dict__")


def test_fast_constructed_commands_equal_normal_ones() -> None:
    assert _convert._new_send(1, 2, 3, 4, 5, 6, True, False, None) == p.Send(
        producer_id=1, sequence_id=2, num_messages=3, txnid_least_bits=4, txnid_most_bits=5,
        highest_sequence_id=6, is_chunk=True, marker=False,
    )  # fmt: skip
    assert _convert._new_flow(1, 2) == p.Flow(consumer_id=1, message_permits=2)


def test_string_fields_that_are_not_utf8_decode_to_str() -> None:
    """upb returns bytes for a proto2 string field that is not UTF-8; the typed command still
    holds a str (surrogate escapes keep the original bytes), so code that handles names
    never meets bytes where the type says str."""
    sub = p.Subscribe(
        topic="persistent://public/default/tAAt",
        subscription="sBBs",
        consumer_id=1,
        request_id=2,
        sub_type=p.SubType.Exclusive,
        metadata=(("kCCk", "vDDv"),),
    )
    raw = p.encode(sub)
    for marker in (b"AA", b"BB", b"CC", b"DD"):
        raw = raw.replace(marker, b"\xff\xfe")
    # the frame's size fields are unchanged: each marker keeps its length
    (frame,) = p.FrameDecoder().feed(raw)
    cmd = frame.command
    assert isinstance(cmd, p.Subscribe)
    assert cmd.topic == "persistent://public/default/t\udcff\udcfet"
    assert cmd.subscription == "s\udcff\udcfes"
    assert cmd.metadata == (("k\udcff\udcfek", "v\udcff\udcfev"),)
    assert cmd.subscription.encode("utf-8", "surrogateescape") == b"s\xff\xfes"


def test_every_codec_matches_its_proto() -> None:
    """Codecs are derived on first use: derive them all here, where a typed class whose
    fields differ from its protobuf message's raises TypeError."""
    for cd in _convert._CODECS.values():
        cd.build()
