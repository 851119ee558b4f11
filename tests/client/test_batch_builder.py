"""Batches: hand-written SingleMessageMetadata equals protobuf's bytes; a built batch decodes
back to the same messages through the consumer path, with every compression codec."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.client.batch_builder import BatchBuilder, encode_single_metadata
from magnetar.client.message import decode_entry
from magnetar.protocol import (
    CompressionType,
    Entry,
    SingleMessageMetadata,
    build_batch,
    build_entry,
    decode_metadata,
)

text = st.text(max_size=12)
records = st.lists(
    st.tuples(
        st.binary(max_size=300),
        st.lists(st.tuples(text, text), max_size=3),
        st.none() | text,
        st.none() | st.binary(max_size=8),
        st.integers(0, 2**50),
    ),
    min_size=1,
    max_size=30,
)


@given(
    st.binary(max_size=50),
    st.integers(0, 2**63 - 1),
    st.lists(st.tuples(text, text), max_size=3),
    st.none() | text,
    st.integers(0, 2**50),
    st.none() | st.binary(max_size=8),
    st.booleans(),
)
def test_single_metadata_bytes_equal_protobuf(
    payload: bytes,
    seq: int,
    props: list[tuple[str, str]],
    key: str | None,
    event_time: int,
    okey: bytes | None,
    null_value: bool,
) -> None:
    ours = encode_single_metadata(len(payload), seq, props, key, event_time, okey, null_value)
    single = SingleMessageMetadata(
        properties=tuple(props),
        partition_key=key,
        event_time=event_time,
        ordering_key=okey,
        sequence_id=seq,
        null_value=null_value,
    )
    reference = build_batch([(single, payload)])
    assert reference[4:] == ours + payload
    assert int.from_bytes(reference[:4], "big") == len(ours)


@settings(max_examples=40)
@given(records, st.sampled_from(list(CompressionType)))
def test_batch_round_trip(
    recs: list[tuple[bytes, list[tuple[str, str]], str | None, bytes | None, int]],
    compression: CompressionType,
) -> None:
    builder = BatchBuilder(
        producer_name="p", max_messages=1000, max_bytes=10**7, compression=compression
    )
    for i, (payload, props, key, okey, et) in enumerate(recs):
        builder.add(
            payload,
            100 + i,
            f"h{i}",
            properties=props,
            partition_key=key,
            ordering_key=okey,
            event_time=et,
        )
    op = builder.build(publish_time_ms=1234)
    assert op is not None and len(builder) == 0
    assert op.handles == [f"h{i}" for i in range(len(recs))]
    assert (op.sequence_id, op.highest_sequence_id, op.num_messages) == (
        100,
        99 + len(recs),
        len(recs),
    )
    md = decode_metadata(op.metadata)
    assert md.num_messages_in_batch == len(recs)
    assert md.sequence_id == 100 and md.publish_time == 1234 and md.compression == compression
    assert md.partition_key == recs[0][2]
    entry = Entry(b"".join(build_entry(op.metadata, op.payload)))
    msgs, skipped = decode_entry(entry, topic="t", partition=-1, ledger_id=3, entry_id=4)
    assert skipped == 0
    assert [m.data() for m in msgs] == [r[0] for r in recs]
    assert [m.properties() for m in msgs] == [dict(r[1]) for r in recs]
    assert [m.partition_key() for m in msgs] == [r[2] or "" for r in recs]
    assert [m.ordering_key() for m in msgs] == [r[3] for r in recs]
    assert [m.event_timestamp() for m in msgs] == [r[4] for r in recs]
    assert [m.sequence_id() for m in msgs] == [100 + i for i in range(len(recs))]
    assert [m.message_id().batch_index() for m in msgs] == list(range(len(recs)))
    assert all(m.message_id().batch_size() == len(recs) for m in msgs)


def test_plain_fast_path_equals_general_path() -> None:
    a = BatchBuilder(producer_name="p")
    b = BatchBuilder(producer_name="p")
    for i in range(5):
        a.add_plain(b"x" * i, i, None)
        b.add(b"x" * i, i, None)
    oa, ob = a.build(1), b.build(1)
    assert oa is not None and ob is not None
    assert (oa.metadata, oa.payload) == (ob.metadata, ob.payload)


def test_limits_report_full_and_fits() -> None:
    b = BatchBuilder(producer_name="p", max_messages=3, max_bytes=1000)
    assert not b.add_plain(b"a", 0, None)
    assert not b.add_plain(b"a", 1, None)
    assert b.add_plain(b"a", 2, None)
    b.build(0)
    assert b.fits(5000)  # an empty batch takes anything
    b.add_plain(b"a" * 900, 3, None)
    assert not b.fits(200)
    assert b.discard() == [None] and len(b) == 0


def test_ack_set_skips_acked_indexes() -> None:
    b = BatchBuilder(producer_name="p")
    for i in range(70):
        b.add_plain(bytes([i]), i, None)
    op = b.build(0)
    assert op is not None
    entry = Entry(b"".join(build_entry(op.metadata, op.payload)))
    # word 0: only bits 1 and 3 unacked; word 1: bit 69-64=5 unacked
    msgs, skipped = decode_entry(
        entry, topic="t", partition=0, ledger_id=1, entry_id=1, ack_set=(0b1010, 1 << 5)
    )
    assert [m.message_id().batch_index() for m in msgs] == [1, 3, 69]
    assert skipped == 67
