"""Stored entries, lazy metadata, checksums and batch payloads."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import magnetar.protocol as p
from magnetar.common.errors import ChecksumMismatch, ProtocolError

FULL_METADATA = p.MessageMetadata(
    producer_name="prod",
    sequence_id=10,
    publish_time=1700000000000,
    properties=(("a", "1"), ("b", "2")),
    replicated_from="other",
    partition_key="pk",
    replicate_to=("c1", "c2"),
    compression=p.CompressionType.ZSTD,
    uncompressed_size=999,
    num_messages_in_batch=3,
    event_time=5,
    encryption_keys=(p.EncryptionKeys(key="k", value=b"v", metadata=(("m", "n"),)),),
    encryption_algo="RSA",
    encryption_param=b"iv",
    schema_version=b"\x00\x00\x00\x00\x00\x00\x00\x01",
    partition_key_b64_encoded=True,
    ordering_key=b"ok",
    deliver_at_time=1700000005000,
    marker_type=2,
    txnid_least_bits=3,
    txnid_most_bits=4,
    highest_sequence_id=12,
    null_value=True,
    uuid="prod-10",
    num_chunks_from_msg=3,
    total_chunk_msg_size=3000,
    chunk_id=2,
    null_partition_key=True,
)


def _entry(md: p.MessageMetadata, payload: bytes) -> p.Entry:
    return p.Entry(b"".join(p.build_entry(md, payload)))


def test_entry_layout_and_checksum() -> None:
    md = p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    parts = p.build_entry(md, b"payload")
    assert parts[1] == b"payload"
    raw = b"".join(parts)
    assert raw[:2] == b"\x0e\x01"
    assert struct.unpack(">I", raw[2:6])[0] == crc32c.crc32c(raw[6:])
    entry = p.Entry(raw)
    assert entry.has_checksum and entry.verify_checksum()
    entry.check_checksum()
    assert bytes(entry.payload) == b"payload"
    assert p.decode_metadata(entry.metadata_bytes) == md
    assert len(entry) == len(raw)


@pytest.mark.parametrize("offset", [2, 12, -1])
def test_corrupted_entry_fails_the_checksum(offset: int) -> None:
    raw = bytearray(
        b"".join(
            p.build_entry(
                p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"xyz"
            )
        )
    )
    raw[offset] ^= 0x40
    entry = p.Entry(bytes(raw))
    assert not entry.verify_checksum()
    with pytest.raises(ChecksumMismatch):
        entry.check_checksum()


def test_metadata_view_reads_every_broker_field() -> None:
    md = _entry(FULL_METADATA, b"x").metadata
    assert md.producer_name == "prod"
    assert md.sequence_id == 10 and md.highest_sequence_id == 12
    assert md.publish_time == 1700000000000 and md.event_time == 5
    assert md.num_messages_in_batch == 3 and md.num_messages == 3
    assert md.partition_key == "pk" and md.ordering_key == b"ok"
    assert md.deliver_at_time == 1700000005000
    assert md.properties == (("a", "1"), ("b", "2"))
    assert md.compression is p.CompressionType.ZSTD and md.uncompressed_size == 999
    assert md.schema_version == b"\x00" * 7 + b"\x01"
    assert md.replicated_from == "other" and md.marker_type == 2
    assert md.txnid == (4, 3) and md.null_value
    assert md.uuid == "prod-10" and md.chunk_id == 2 and md.num_chunks_from_msg == 3
    assert md.total_chunk_msg_size == 3000 and md.is_chunk and md.is_last_chunk
    assert md.to_message_metadata() == FULL_METADATA


def test_metadata_view_absent_fields() -> None:
    md = _entry(p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"").metadata
    assert md.num_messages_in_batch is None and md.num_messages == 1
    assert md.partition_key is None and md.ordering_key is None and md.deliver_at_time is None
    assert md.uuid is None and md.chunk_id is None and not md.is_chunk and md.is_last_chunk
    assert md.txnid is None and md.schema_version is None and md.properties == ()


def test_batch_of_one_keeps_num_messages_in_batch() -> None:
    md = p.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=1
    )
    raw = p.encode_metadata(md)
    assert b"\x58\x01" in raw  # field 11 = 1 is on the wire although it is the default
    assert p.decode_metadata(raw).num_messages_in_batch == 1


def test_entry_without_checksum() -> None:
    md = p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    entry = p.Entry(b"".join(p.build_entry(md, b"abc", checksum=False)))
    assert entry.checksum is None and entry.verify_checksum()
    assert entry.metadata.sequence_id == 1 and bytes(entry.payload) == b"abc"


@pytest.mark.parametrize(
    "raw", [b"", b"\x0e\x01\x00\x00", b"\x0e\x01\x00\x00\x00\x00\x00", b"\x00\x00\x00\x05abc"]
)
def test_truncated_entries(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        p.Entry(raw)


def test_malformed_metadata_is_a_protocol_error() -> None:
    entry = p.Entry(b"\x00\x00\x00\x02\x08\x01")  # metadata with only field 1 as varint
    with pytest.raises(ProtocolError):
        _ = entry.metadata


records = st.lists(
    st.tuples(
        st.builds(
            p.SingleMessageMetadata,
            properties=st.lists(
                st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=2
            ).map(tuple),
            partition_key=st.none() | st.text(max_size=8),
            event_time=st.integers(0, 1 << 40),
            sequence_id=st.none() | st.integers(0, 1 << 40),
            null_value=st.booleans(),
        ),
        st.binary(max_size=64),
    ),
    max_size=10,
)


@settings(max_examples=100, deadline=None)
@given(records=records)
def test_batch_round_trip(records: list[tuple[p.SingleMessageMetadata, bytes]]) -> None:
    payload = p.build_batch(records)
    for count in (len(records), None):
        split = p.split_batch(payload, count)
        assert [bytes(b) for _, b in split] == [b for _, b in records]
        for (single, data), (want, _) in zip(split, records, strict=True):
            assert single.payload_size == len(data)
            assert single == p.SingleMessageMetadata(
                payload_size=len(data),
                properties=want.properties,
                partition_key=want.partition_key,
                event_time=want.event_time,
                sequence_id=want.sequence_id,
                null_value=want.null_value,
            )


def test_batch_layout() -> None:
    payload = p.build_batch([(p.SingleMessageMetadata(partition_key="k"), b"hello")])
    (size,) = struct.unpack(">I", payload[:4])
    meta = payload[4 : 4 + size]
    assert meta == b"\x12\x01k\x18\x05"  # partition_key=2 "k", payload_size=3 -> 5
    assert payload[4 + size :] == b"hello"


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        (b"\x00\x00", 1),
        (b"\x00\x00\x00\x09\x18\x01", 1),
        (b"\x00\x00\x00\x02\x18\x05ab", 1),
        (b"", 1),
        (b"", -1),
    ],
)
def test_malformed_batches(payload: bytes, count: int) -> None:
    with pytest.raises(ProtocolError):
        p.split_batch(payload, count)


def test_batch_ignores_trailing_bytes_when_counted() -> None:
    payload = p.build_batch([(p.SingleMessageMetadata(), b"a")]) + b"\xff\xff"
    assert [bytes(b) for _, b in p.split_batch(payload, 1)] == [b"a"]
    with pytest.raises(ProtocolError):
        p.split_batch(payload)
