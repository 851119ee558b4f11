"""Pulsar's block format, byte for byte: the golden bytes below were laid out by hand from the
format's description (header fields, entry headers, padding, index fields)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.offload.block_format import (
    BLOCK_HEADER_BYTES,
    BlockFormatError,
    BlockRef,
    OffloadIndex,
    data_key,
    decode_block,
    decode_index,
    encode_block,
    encode_index,
    index_key,
    plan_blocks,
)


def test_a_block_is_header_entries_and_padding_as_pulsar_lays_them_out() -> None:
    block = b"".join(encode_block(7, [b"ab", b"c"], block_length=BLOCK_HEADER_BYTES + 14 + 13 + 6))
    header = (
        bytes.fromhex("FBDBABCB")
        + (128).to_bytes(8, "big")
        + (BLOCK_HEADER_BYTES + 33).to_bytes(8, "big")
        + (7).to_bytes(8, "big")
    )
    assert block[:128] == header + bytes(128 - len(header))
    assert block[128:142] == (2).to_bytes(4, "big") + (7).to_bytes(8, "big") + b"ab"
    assert block[142:155] == (1).to_bytes(4, "big") + (8).to_bytes(8, "big") + b"c"
    assert block[155:] == bytes.fromhex("FEDCDEADFEDC")
    assert [(i, bytes(p)) for i, p in decode_block(block, 7)] == [(7, b"ab"), (8, b"c")]


def test_the_index_object_names_each_blocks_first_entry_part_and_offset() -> None:
    index = OffloadIndex(500, b"{}", (BlockRef(0, 1, 0), BlockRef(40, 2, 300)))
    data = encode_index(index)
    assert data[:4] == bytes.fromhex("DE47DE47")
    assert int.from_bytes(data[4:8], "big") == len(data) == 4 + 4 + 8 + 8 + 4 + 4 + 2 + 2 * 20
    assert int.from_bytes(data[8:16], "big") == 500
    assert int.from_bytes(data[16:24], "big") == 128
    assert int.from_bytes(data[24:28], "big") == 2
    assert data[32:34] == b"{}"
    assert data[34:54] == (0).to_bytes(8, "big") + (1).to_bytes(4, "big") + (0).to_bytes(8, "big")
    assert decode_index(data) == index
    assert index.block_for(39) == 0 and index.block_for(40) == 1 and index.block_for(10**6) == 1
    assert index.block_span(1) == (300, 200)


def test_objects_are_named_as_pulsar_names_them() -> None:
    assert data_key("u-1", 42) == "u-1-ledger-42"
    assert index_key("u-1", 42) == "u-1-ledger-42-index"


def test_blocks_hold_whole_entries_within_the_maximum_and_one_entry_at_least() -> None:
    # header 128 + (12 + 100) per entry: two entries fit 400 bytes, a third does not
    assert list(plan_blocks([100] * 5, 400)) == [2, 2, 1]
    assert list(plan_blocks([1000, 10], 400)) == [1, 1]  # an entry bigger than a block
    assert list(plan_blocks([], 400)) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:100],
        lambda b: b"\x00" + b[1:],
        lambda b: b[:-1],
        lambda b: b[:128] + (999).to_bytes(4, "big") + b[132:],
    ],
    ids=["short", "magic", "length", "entry-size"],
)
def test_a_damaged_block_is_refused_never_misread(damage: object) -> None:
    block = b"".join(encode_block(0, [b"x" * 20, b"y" * 5]))
    with pytest.raises(BlockFormatError):
        decode_block(damage(block))  # type: ignore[operator]


def test_a_block_that_starts_elsewhere_than_its_index_says_is_refused() -> None:
    with pytest.raises(BlockFormatError, match="index says 3"):
        decode_block(b"".join(encode_block(4, [b"z"])), 3)


def test_a_damaged_index_is_refused() -> None:
    data = encode_index(OffloadIndex(10, b"m", (BlockRef(0, 1, 0),)))
    for bad in (data[:10], b"\x00" + data[1:], data + b"\x00"):
        with pytest.raises(BlockFormatError):
            decode_index(bad)


@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(min_value=0, max_value=10**12))
def test_any_entries_round_trip_through_blocks_planned_for_them(
    entries: list[bytes], first: int
) -> None:
    pos = 0
    for count in plan_blocks([len(e) for e in entries], 700):
        chunk = entries[pos : pos + count]
        decoded = decode_block(b"".join(encode_block(first + pos, chunk)), first + pos)
        assert [bytes(p) for _, p in decoded] == chunk
        assert [i for i, _ in decoded] == list(range(first + pos, first + pos + count))
        pos += count
    assert pos == len(entries)
