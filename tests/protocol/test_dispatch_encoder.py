"""``encode_message_at``, the dispatch path's MESSAGE encoder, builds exactly the bytes of
the general ``encode_message`` for every id it is given (large and negative ones included)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import magnetar.protocol as p
from tests.call_count import calls_made

ids = st.integers(-1, (1 << 63) - 1)


@given(
    consumer_id=st.integers(0, (1 << 64) - 1),
    ledger_id=ids,
    entry_id=ids,
    partition=st.integers(-1, 1 << 20),
    redelivery_count=st.integers(0, 1 << 32),
    entry=st.binary(max_size=64),
    as_view=st.booleans(),
)
def test_same_bytes_as_encode_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    entry: bytes,
    as_view: bool,
) -> None:
    data: bytes | memoryview = memoryview(entry) if as_view else entry
    fast = p.encode_message_at(consumer_id, ledger_id, entry_id, partition, data, redelivery_count)
    general = p.encode_message(
        consumer_id, p.MessageId(ledger_id, entry_id, partition), redelivery_count, data
    )
    assert b"".join(fast) == b"".join(general)
    assert fast[-1] is data  # the stored entry is passed through, not copied


def test_decodes_back_to_the_message() -> None:
    entry = b"".join(
        p.build_entry(p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2), b"x")
    )
    (frame,) = p.FrameDecoder().feed(b"".join(p.encode_message_at(7, 123_456, 70_000, 2, entry)))
    assert frame.command == p.Message(consumer_id=7, message_id=p.MessageId(123_456, 70_000, 2))
    assert frame.entry is not None and bytes(frame.entry.data) == bytes(entry)


@given(
    consumer_id=st.integers(0, (1 << 64) - 1),
    partition=st.integers(-1, 1 << 20),
    ledger_id=ids,
    entry_ids=st.lists(ids, min_size=1, max_size=8),
    ledger_steps=st.lists(st.booleans(), min_size=8, max_size=8),
    redelivery=st.one_of(st.none(), st.lists(st.integers(0, 1 << 32), min_size=8, max_size=8)),
    entry=st.binary(max_size=64),
)
def test_a_run_encodes_as_each_entry_alone(
    consumer_id: int,
    partition: int,
    ledger_id: int,
    entry_ids: list[int],
    ledger_steps: list[bool],
    redelivery: list[int] | None,
    entry: bytes,
) -> None:
    """``encode_messages_at`` writes, per entry of a run, the bytes of
    ``encode_message_at`` (runs may cross ledgers and varint lengths of entry ids)."""
    positions = []
    for entry_id, step in zip(entry_ids, ledger_steps, strict=False):
        ledger_id += step
        positions.append((ledger_id, entry_id))
    entries = [entry + b"%d" % i for i in range(len(positions))]
    counts = None if redelivery is None else redelivery[: len(positions)]
    run = p.encode_messages_at(
        consumer_id, partition, positions, entries, [len(e) for e in entries], counts
    )
    alone: list[bytes | memoryview] = []
    for i, ((ledger, entry_id), data) in enumerate(zip(positions, entries, strict=True)):
        rc = 0 if counts is None else counts[i]
        alone += p.encode_message_at(consumer_id, ledger, entry_id, partition, data, rc)
    assert [bytes(b) for b in run] == [bytes(b) for b in alone]
    assert run[1::2] == entries and all(a is b for a, b in zip(run[1::2], entries, strict=True))


def test_a_run_costs_one_call_per_entry() -> None:
    """Per entry of a run the encoder makes one call (the header's ``pack``), across the
    one- to three-byte entry ids."""
    from magnetar.protocol import hand_encoders

    hand_encoders.varint_tables()  # built once, by a process's first encoding

    def calls(first: int, n: int) -> int:
        positions = [(7, e) for e in range(first, first + n)]
        entries = [b"x"] * n
        sizes = [1] * n
        return calls_made(lambda: p.encode_messages_at(3, 0, positions, entries, sizes))

    for first in (0, 100, 16_000):
        assert calls(first, 1000) - calls(first, 10) <= 990 + 16  # + a new prefix or two


def test_a_run_across_varint_lengths_of_entry_ids() -> None:
    edges = [0, 127, 128, 16_383, 16_384, 16_511, 50_000, (1 << 21) - 1, 1 << 21, 1 << 28]
    positions = [(9, e) for e in edges]
    entries = [b"%d" % e for e in edges]
    run = p.encode_messages_at(4, 1, positions, entries, [len(e) for e in entries])
    alone = [
        b
        for e, data in zip(edges, entries, strict=True)
        for b in p.encode_message_at(4, 9, e, 1, data)
    ]
    assert [bytes(b) for b in run] == [bytes(b) for b in alone]


def test_the_varint_tables_hold_every_one_and_two_byte_varint() -> None:
    from magnetar.protocol import hand_encoders

    def naive(value: int) -> bytes:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)

    table, low14_more = hand_encoders.varint_tables()
    assert [naive(i) for i in range(1 << 14)] == table
    # the first two bytes of the three-byte varint of every value with these low 14 bits
    assert [naive(i | 1 << 14)[:2] for i in range(1 << 14)] == low14_more


def test_the_first_encoding_builds_the_tables_and_agrees_with_later_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until first indexed the tables are stand-ins (an idle process never builds them);
    the call that builds them encodes as every later one does (the pure-Python encoders)."""
    from magnetar.protocol import hand_encoders

    positions = [(7, 5), (7, 300), (7, 20_000), (7, 3_000_000), (300, 1)]
    entries = [b"e%d" % i for i in range(len(positions))]
    sizes = [len(e) for e in entries]
    later = [
        hand_encoders.py_encode_messages_at(3, -1, positions, entries, sizes),
        hand_encoders.py_encode_send_receipt_at(1, 200, 7, 20_000, 0),
        hand_encoders.encode_message_at(200, 9, 300, 2, b"x"),
    ]
    for name, which in (("_VARINT_TABLE", 0), ("_VARINT_LOW14_MORE", 1)):
        monkeypatch.setattr(hand_encoders, name, hand_encoders._TableUntilUsed(which))
    first = [hand_encoders.py_encode_messages_at(3, -1, positions, entries, sizes)]
    assert isinstance(hand_encoders._VARINT_TABLE, list)  # built by that call
    for name, which in (("_VARINT_TABLE", 0), ("_VARINT_LOW14_MORE", 1)):
        monkeypatch.setattr(hand_encoders, name, hand_encoders._TableUntilUsed(which))
    first.append(hand_encoders.py_encode_send_receipt_at(1, 200, 7, 20_000, 0))
    for name, which in (("_VARINT_TABLE", 0), ("_VARINT_LOW14_MORE", 1)):
        monkeypatch.setattr(hand_encoders, name, hand_encoders._TableUntilUsed(which))
    first.append(hand_encoders.encode_message_at(200, 9, 300, 2, b"x"))
    assert first == later
