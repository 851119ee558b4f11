"""Golden bytes: every command's frame checked field by field against the reference layout."""

from __future__ import annotations

import struct
from typing import Any

import crc32c
import pytest

import magnetar.protocol as p
from magnetar.protocol import CommandType, MessageId

from .samples import REFERENCE_TYPES, SAMPLES
from .wire import assert_layout, read_fields

ENTRY_PAYLOAD = b"payload-bytes"
ENTRY_METADATA = p.MessageMetadata(producer_name="prod", sequence_id=2, publish_time=1700000000000)


def _entry() -> bytes:
    return b"".join(p.build_entry(ENTRY_METADATA, ENTRY_PAYLOAD))


def _frame_of(cmd: Any) -> bytes:
    if cmd.TYPE in p.PAYLOAD_COMMANDS:
        return b"".join(p.encode_payload_command(cmd, _entry()))
    return p.encode(cmd)


def _split_frame(frame: bytes) -> tuple[bytes, bytes]:
    """(BaseCommand bytes, rest) after checking totalSize and commandSize."""
    (total,) = struct.unpack(">I", frame[:4])
    assert total == len(frame) - 4, "totalSize counts every byte after itself"
    (cmd_size,) = struct.unpack(">I", frame[4:8])
    assert 8 + cmd_size <= len(frame)
    return frame[8 : 8 + cmd_size], frame[8 + cmd_size :]


def test_crc32c_is_castagnoli() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert p.crc32c_of(b"1234", memoryview(b"56789")) == 0xE3069283


def test_command_types_match_reference_table() -> None:
    assert {t.name: t.value for t in CommandType} == REFERENCE_TYPES


def test_samples_cover_every_command_type() -> None:
    covered = [cmd.TYPE for cmd, _ in SAMPLES]
    assert sorted(covered) == sorted(CommandType), "one sample per command type"
    assert set(p.COMMAND_CLASSES) == set(CommandType)


@pytest.mark.parametrize(
    ("cmd", "expected"), SAMPLES, ids=[type(cmd).__name__ for cmd, _ in SAMPLES]
)
def test_golden_layout(cmd: Any, expected: dict[int, Any]) -> None:
    frame = _frame_of(cmd)
    base, rest = _split_frame(frame)
    # BaseCommand: field 1 is the type; the sub-message's field number equals the type.
    assert_layout(base, {1: int(cmd.TYPE), int(cmd.TYPE): expected}, type(cmd).__name__)
    if cmd.TYPE in p.PAYLOAD_COMMANDS:
        assert rest == _entry()
        assert rest[:2] == b"\x0e\x01"
        (checksum,) = struct.unpack(">I", rest[2:6])
        assert checksum == crc32c.crc32c(rest[6:])
    else:
        assert rest == b""


@pytest.mark.parametrize(
    ("cmd", "expected"), SAMPLES, ids=[type(cmd).__name__ for cmd, _ in SAMPLES]
)
def test_round_trip(cmd: Any, expected: dict[int, Any]) -> None:
    frames = p.FrameDecoder().feed(_frame_of(cmd))
    assert len(frames) == 1
    assert frames[0].command == cmd
    if cmd.TYPE in p.PAYLOAD_COMMANDS:
        entry = frames[0].entry
        assert entry is not None and bytes(entry.data) == _entry()
    else:
        assert frames[0].entry is None


def test_ping_exact_bytes() -> None:
    # totalSize 9, commandSize 5, type=18 (0x08 0x12), field 18 length 0 (0x92 0x01 0x00).
    assert p.encode(p.Ping()) == bytes.fromhex("00000009 00000005 0812 920100")
    assert p.encode(p.Pong()) == bytes.fromhex("00000009 00000005 0813 9a0100")


def test_flow_exact_bytes() -> None:
    # type=11, field 11 (0x5a) len 5: consumer_id=3 (08 03), messagePermits=1000 (10 e8 07).
    frame = p.encode(p.Flow(consumer_id=3, message_permits=1000))
    assert frame == bytes.fromhex("0000000d 00000009 080b 5a05 0803 10e807")


def test_defaults_are_omitted_and_required_fields_kept() -> None:
    cmd = p.Subscribe(
        topic="t", subscription="s", sub_type=p.SubType.Exclusive, consumer_id=0, request_id=0
    )
    base, _ = _split_frame(p.encode(cmd))
    # Required fields are present even when zero; optional defaults are left out.
    assert_layout(base, {1: 4, 4: {1: "t", 2: "s", 3: 0, 4: 0, 5: 0}})
    receipt = p.SendReceipt(producer_id=0, sequence_id=0, message_id=MessageId(0, 0))
    base, _ = _split_frame(p.encode(receipt))
    assert_layout(base, {1: 7, 7: {1: 0, 2: 0, 3: {1: 0, 2: 0}}})


def test_send_frame_layout() -> None:
    metadata = p.MessageMetadata(
        producer_name="standalone-0-1",
        sequence_id=42,
        publish_time=1700000000123,
        num_messages_in_batch=1,
        partition_key="key",
    )
    frame = b"".join(p.encode_send(7, 42, metadata, b"hello world", num_messages=1))
    base, rest = _split_frame(frame)
    # num_messages is present although equal to its default: the producer gave it.
    assert_layout(base, {1: 6, 6: {1: 7, 2: 42, 3: 1}})
    assert rest[:2] == b"\x0e\x01"
    (checksum,) = struct.unpack(">I", rest[2:6])
    assert checksum == crc32c.crc32c(rest[6:]), "CRC covers exactly the bytes after it"
    (meta_size,) = struct.unpack(">I", rest[6:10])
    meta = rest[10 : 10 + meta_size]
    assert_layout(meta, {1: "standalone-0-1", 2: 42, 3: 1700000000123, 6: "key", 11: 1})
    assert rest[10 + meta_size :] == b"hello world"


def test_send_without_checksum_layout() -> None:
    md = p.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    frame = b"".join(p.encode_send(1, 1, md, b"x", checksum=False))
    _, rest = _split_frame(frame)
    (meta_size,) = struct.unpack(">I", rest[:4])
    assert_layout(rest[4 : 4 + meta_size], {1: "p", 2: 1, 3: 2})
    assert rest[4 + meta_size :] == b"x"
    (decoded,) = p.FrameDecoder().feed(frame)
    assert decoded.entry is not None and decoded.entry.checksum is None
    assert decoded.entry.verify_checksum() and bytes(decoded.entry.payload) == b"x"


def test_message_frame_with_broker_entry_metadata_layout() -> None:
    entry = _entry()
    parts = p.encode_message(
        5,
        MessageId(12, 34, partition=1),
        2,
        entry,
        broker_entry_metadata=p.BrokerEntryMetadata(broker_timestamp=1700000000999, index=77),
    )
    assert parts[-1] is entry, "the entry is passed through, not copied"
    frame = b"".join(parts)
    base, rest = _split_frame(frame)
    assert_layout(base, {1: 9, 9: {1: 5, 2: {1: 12, 2: 34, 3: 1}, 3: 2}})
    assert rest[:2] == b"\x0e\x02"
    (bem_size,) = struct.unpack(">I", rest[2:6])
    assert_layout(rest[6 : 6 + bem_size], {1: 1700000000999, 2: 77})
    assert rest[6 + bem_size :] == entry
    (decoded,) = p.FrameDecoder().feed(frame)
    assert decoded.broker_entry_metadata == p.BrokerEntryMetadata(
        broker_timestamp=1700000000999, index=77
    )
    assert decoded.entry is not None and decoded.entry.verify_checksum()


def test_message_id_signed_conventions_on_the_wire() -> None:
    base, _ = _split_frame(p.encode(p.Seek(consumer_id=1, request_id=2, message_id=p.EARLIEST)))
    seek = dict((n, v) for n, _, v in read_fields(base))[28]
    mid = dict((n, v) for n, _, v in read_fields(seek))[3]
    # -1 travels as uint64 2^64-1: a ten-byte varint of 0xff..0x01.
    assert mid == b"\x08" + b"\xff" * 9 + b"\x01" + b"\x10" + b"\xff" * 9 + b"\x01"
    (frame,) = p.FrameDecoder().feed(
        p.encode(p.Seek(consumer_id=1, request_id=2, message_id=p.LATEST))
    )
    assert isinstance(frame.command, p.Seek) and frame.command.message_id == p.LATEST
    assert frame.command.message_id.is_latest
