"""Received batches: members are views into their entry, with their own metadata parsed on
first access. Every accessor must answer what the eager parse of the same bytes answers,
whatever the field order, payload size or producer; a record's framing is still checked on
receipt. Producer side: the batch builder's folded fits check and the receipt's ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.client.batch_builder import BatchBuilder, encode_single_metadata
from magnetar.client.message import (
    CorruptMessage,
    Message,
    MessageRun,
    decode_entry,
    decode_entry_lazily,
    split_batch_payload,
)
from magnetar.client.message_id import MessageId, batch_message_ids
from magnetar.common.errors import ProtocolError
from magnetar.protocol import Entry, MessageMetadata, ValidationError, build_entry
from magnetar.protocol.varint import encode_varint


def _field(tag: int, data: bytes) -> bytes:
    return bytes([tag]) + encode_varint(len(data)) + data


def _record(metadata: bytes, payload: bytes) -> bytes:
    return len(metadata).to_bytes(4, "big") + metadata + payload


def _entry(records: list[bytes], *, schema_version: bytes | None = None) -> Entry:
    md = MessageMetadata(
        producer_name="prod",
        sequence_id=7,
        publish_time=1234,
        num_messages_in_batch=len(records),
        schema_version=schema_version,
    )
    return Entry(b"".join(build_entry(md, b"".join(records))))


def _decode(entry: Entry, **kwargs: object) -> list[Message]:
    msgs, _ = decode_entry(entry, topic="t", partition=2, ledger_id=5, entry_id=9, **kwargs)  # type: ignore[arg-type]
    return msgs


def _accessors(m: Message) -> tuple[object, ...]:
    return (
        m.data(),
        m.properties(),
        m.partition_key(),
        m.has_partition_key(),
        m.ordering_key(),
        m.event_timestamp(),
        m.sequence_id(),
        m.is_null_value(),
    )


records = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 100, 127, 128, 300, 16383, 16384, 20000]).flatmap(
            lambda n: st.just(bytes(range(256)) * (n // 256) + bytes(n % 256))
        ),
        st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=2),
        st.none() | st.text(max_size=6),
        st.none() | st.binary(max_size=4),
        st.integers(0, 2**40),
        st.integers(0, 2**62),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60)
@given(records)
def test_lazy_members_answer_like_the_eager_parse(
    recs: list[tuple[bytes, list[tuple[str, str]], str | None, bytes | None, int, int, bool]],
) -> None:
    raw = [
        _record(encode_single_metadata(len(p), seq, props, key, et, okey, null), p)
        for p, props, key, okey, et, seq, null in recs
    ]
    msgs = _decode(_entry(raw))
    eager = split_batch_payload(b"".join(raw), len(raw))
    assert [_accessors(m) for m in msgs] == [
        (data, dict(props or {}), key or "", key is not None, okey, et, seq, null)
        for data, props, key, et, okey, seq, null in eager
    ]
    assert [m.position for m in msgs] == [(5, 9, i) for i in range(len(recs))]
    assert all(m.batch_size() == len(recs) and m.publish_timestamp() == 1234 for m in msgs)
    assert all(m.producer_name() == "prod" and m.topic_name() == "t" for m in msgs)


def test_fields_after_a_leading_payload_size_are_found_in_any_order() -> None:
    # payload_size first, then key, properties and ordering key: not the canonical order.
    meta = (
        b"\x18\x03"
        + _field(0x12, b"k1")
        + _field(0x0A, _field(0x0A, b"a") + _field(0x12, b"b"))
        + _field(0x3A, b"ok")
        + b"\x40\x2a"
    )
    # payload_size last (not leading): the record is parsed in full on receipt.
    meta2 = _field(0x12, b"k2") + b"\x28\x05" + b"\x18\x02"
    first, second = _decode(_entry([_record(meta, b"abc"), _record(meta2, b"xy")]))
    assert _accessors(first) == (b"abc", {"a": "b"}, "k1", True, b"ok", 0, 42, False)
    assert _accessors(second) == (b"xy", {}, "k2", True, None, 5, -1, False)


def test_a_malformed_field_after_the_payload_size_fails_its_accessor_only() -> None:
    bad = b"\x18\x02\x40"  # sequence id's varint missing
    good = b"\x18\x02\x40\x01"
    ok, broken = _decode(_entry([_record(good, b"ab"), _record(bad, b"cd")]))
    assert ok.sequence_id() == 1 and broken.data() == b"cd"
    assert broken.message_id() == MessageId(2, 5, 9, 1, batch_size=2)
    with pytest.raises(ProtocolError):
        broken.sequence_id()


@pytest.mark.parametrize(
    "raw",
    [
        _record(b"\x18\x09\x40\x01", b"short"),  # payload_size beyond the batch
        _record(b"\x40\x01", b"ab"),  # no payload_size at all
        b"\x00\x00\x00\x09\x18",  # metadata size beyond the batch
    ],
)
def test_bad_framing_still_fails_the_whole_entry(raw: bytes) -> None:
    with pytest.raises(CorruptMessage) as info:
        _decode(_entry([_record(b"\x18\x01\x40\x00", b"a"), raw]))
    assert info.value.validation_error == ValidationError.BatchDeSerializeError


def test_ack_set_skips_without_building_messages_and_data_is_sliced_once() -> None:
    raw = [_record(b"\x18\x01\x40" + bytes([i]), bytes([65 + i])) for i in range(5)]
    msgs, skipped = decode_entry(
        _entry(raw), topic="t", partition=-1, ledger_id=1, entry_id=2, ack_set=(0b10110,)
    )
    assert skipped == 2 and [m.data() for m in msgs] == [b"B", b"C", b"E"]
    assert msgs[0].data() is msgs[0].data()
    assert [m.sequence_id() for m in msgs] == [1, 2, 4]


def test_a_run_builds_each_kept_member_when_taken() -> None:
    raw = [_record(b"\x18\x01\x40" + bytes([i]), bytes([65 + i])) for i in range(4)]
    raw.append(_record(_field(0x12, b"key") + b"\x18\x01", b"Z"))  # parsed in full
    entry = _entry(raw, schema_version=b"\x01")
    run, skipped = decode_entry_lazily(
        entry, topic="t", partition=2, ledger_id=5, entry_id=9, ack_set=(0b11010,)
    )
    assert isinstance(run, MessageRun) and skipped == 2
    assert run.remaining == 3 and run.position == (5, 9, 1)
    run.decoder, run.consumer_ref = "schema", "consumer"
    first = run.take()
    assert run.remaining == 2 and run.position == (5, 9, 3)
    rest = run.take_all()
    assert run.remaining == 0
    taken = [first, *rest]
    assert [_accessors(m) for m in taken] == [_accessors(m) for m in _decode(entry)[1:4:2]] + [
        (b"Z", {}, "key", True, None, 0, -1, False)
    ]
    assert [m.position for m in taken] == [(5, 9, 1), (5, 9, 3), (5, 9, 4)]
    assert all(m.decoder == "schema" and m.consumer_ref == "consumer" for m in taken)
    assert all(m.schema_version() == b"\x01" for m in taken)
    none, skipped = decode_entry_lazily(
        entry, topic="t", partition=2, ledger_id=5, entry_id=9, ack_set=(0,)
    )
    assert none is None and skipped == 5


def test_constructed_message_keeps_every_field() -> None:
    m = Message(
        b"payload",
        topic="t",
        partition=1,
        ledger_id=3,
        entry_id=4,
        properties={"a": "b"},
        partition_key="k",
        ordering_key=b"o",
        publish_time=10,
        event_time=11,
        redelivery_count=2,
        schema_version=b"\x00",
        sequence_id=12,
        producer_name="p",
        null_value=True,
    )
    assert _accessors(m) == (b"payload", {"a": "b"}, "k", True, b"o", 11, 12, True)
    assert (m.publish_timestamp(), m.redelivery_count(), m.schema_version()) == (10, 2, b"\x00")
    assert m.message_id() == MessageId(1, 3, 4) and repr(m).endswith("7 bytes)")


def test_try_add_plain_adds_nothing_when_the_message_does_not_fit() -> None:
    b = BatchBuilder(producer_name="p", max_messages=10, max_bytes=100)
    assert b.try_add_plain(b"a" * 50, 0, "h0") is False
    assert b.try_add_plain(b"a" * 80, 1, "h1") is None  # does not fit: nothing added
    assert len(b) == 1
    with pytest.raises(ValueError, match="does not fit"):
        b.add_plain(b"a" * 80, 1, "h1")
    op = b.build(0)
    assert op is not None and op.handles == ["h0"] and op.highest_sequence_id == 0
    assert b.try_add_plain(b"a" * 500, 1, "h1") is True  # an empty batch takes any message


def test_receipt_ids_equal_constructed_ids() -> None:
    ids = batch_message_ids(3, 10, 20, 4)
    assert ids == [MessageId(3, 10, 20, i, batch_size=4) for i in range(4)]
    assert [i.batch_size() for i in ids] == [4] * 4
    assert all(i.first_chunk_message_id() is None for i in ids)
    assert len({hash(i) for i in ids}) == 4
