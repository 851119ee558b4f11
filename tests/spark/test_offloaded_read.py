"""The executor's direct read of offloaded ledgers: objects written by the real offloader to a
local directory and to a real S3-compatible server (moto's, its own process), read back as
the rows a Spark task yields."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from magnetar.client.message import decode_entry
from magnetar.client.message_id import MessageId
from magnetar.offload.block_format import data_key, index_key
from magnetar.offload.object_store import open_object_store
from magnetar.offload.offloader import BlobStoreOffloader
from magnetar.offload.settings import OffloadDriverConfig
from magnetar.protocol import Entry, MessageMetadata, SingleMessageMetadata, build_entry
from magnetar.protocol.batch import build_batch
from magnetar.spark.offload_plan import OffloadedEntries
from magnetar.spark.offloaded_range import OffloadedReadError
from magnetar.spark.offsets import EARLIEST, Position
from magnetar.spark.options import parse_options
from magnetar.spark.partition_range import RangePartition, read_range
from magnetar.spark.rows import message_id_bytes

TOPIC = "persistent://public/default/direct-partition-1"
LEDGER = 42


@pytest.fixture(params=["filesystem", "aws-s3"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> OffloadDriverConfig:
    if request.param == "filesystem":
        return OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    return request.getfixturevalue("s3_config")  # type: ignore[no-any-return]


def _single(i: int) -> bytes:
    md = MessageMetadata(
        producer_name="p",
        sequence_id=i,
        publish_time=1_700_000_000_000 + i,
        partition_key=f"k{i}" if i % 2 else None,
        properties=(("i", str(i)),),
        event_time=1_600_000_000_000 + i if i % 3 == 0 else 0,
    )
    return b"".join(bytes(b) for b in build_entry(md, f"single-{i}".encode()))


def _batch(i: int, size: int) -> bytes:
    records = [
        (
            SingleMessageMetadata(
                partition_key=f"bk{i}-{j}", properties=(("j", str(j)),), event_time=j
            ),
            f"batch-{i}-{j}".encode(),
        )
        for j in range(size)
    ]
    md = MessageMetadata(
        producer_name="q",
        sequence_id=i,
        publish_time=1_700_000_000_000 + i,
        num_messages_in_batch=size,
    )
    return b"".join(bytes(b) for b in build_entry(md, build_batch(records)))


def _entries(count: int) -> list[bytes]:
    return [_batch(i, 1 + i % 4) if i % 2 else _single(i) for i in range(count)]


def _expected(entries: Sequence[bytes], first: int = 0) -> list[tuple[Any, ...]]:
    """(value, key, message id, properties, event time ms) of every message, from the
    way the entries were built."""
    out: list[tuple[Any, ...]] = []
    for i in range(first, len(entries)):
        if i % 2 == 0:
            mid = MessageId(1, LEDGER, i).serialize()
            event = 1_600_000_000_000 + i if i % 3 == 0 else None
            key = f"k{i}" if i % 2 else None
            out.append((f"single-{i}".encode(), key, mid, [("i", str(i))], event))
        else:
            size = 1 + i % 4
            for j in range(size):
                mid = MessageId(1, LEDGER, i, j, batch_size=size).serialize()
                out.append(
                    (f"batch-{i}-{j}".encode(), f"bk{i}-{j}", mid, [("j", str(j))], j or None)
                )
    return out


def _offload(config: OffloadDriverConfig, entries: list[bytes], uuid: str) -> None:
    async def reads(first: int, last: int) -> Sequence[bytes]:
        return entries[first : last + 1]

    offloader = BlobStoreOffloader(open_object_store(config), block_size_max=4096)
    asyncio.run(offloader.offload(uuid, LEDGER, len(entries) - 1, reads, b""))


def _options(config: OffloadDriverConfig) -> dict[str, str]:
    raw = {"service_url": "pulsar://127.0.0.1:1", "topic": TOPIC, "offload.driver": config.driver}
    for name in ("bucket", "region", "endpoint", "directory"):
        value = getattr(config, name)
        if value:
            raw[f"offload.{name}"] = value
    return raw


def _rows(part: RangePartition) -> list[tuple[Any, ...]]:
    table = pa.Table.from_batches(list(read_range(part)), schema=None)
    out = []
    for row in table.to_pylist():
        event = row["event_time"]
        out.append(
            (
                row["value"],
                row["key"],
                row["message_id"],
                row["properties"],
                int(event.timestamp() * 1000) if event is not None else None,
            )
        )
        assert row["topic"] == "persistent://public/default/direct"
        assert row["partition"] == 1
    return out


def test_an_offloaded_ledger_reads_as_the_messages_it_holds(config: OffloadDriverConfig) -> None:
    entries = _entries(300)
    _offload(config, entries, "u-1")
    opts = parse_options(_options(config))
    ref = OffloadedEntries(LEDGER, "u-1", 0, len(entries) - 1)
    part = RangePartition(TOPIC, EARLIEST, Position(LEDGER, 299), opts, None, None, ref)
    assert _rows(part) == _expected(entries)

    # a range from inside a batch: the entry it starts in is read, its earlier members dropped
    start = Position(LEDGER, 101, 0)
    ref = OffloadedEntries(LEDGER, "u-1", 101, 299)
    part = RangePartition(TOPIC, start, Position(LEDGER, 299), opts, None, None, ref)
    assert _rows(part) == _expected(entries, 101)[1:]


def test_a_missing_or_corrupt_object_is_an_error_naming_the_ledger(
    config: OffloadDriverConfig,
) -> None:
    entries = _entries(40)
    _offload(config, entries, "u-2")
    opts = parse_options(_options(config))
    ref = OffloadedEntries(LEDGER, "u-2", 0, 39)
    part = RangePartition(TOPIC, EARLIEST, Position(LEDGER, 39), opts, None, None, ref)
    store = open_object_store(config)

    async def corrupt() -> None:
        key = data_key("u-2", LEDGER)
        data = bytearray(await store.get(key))
        data[200:210] = b"\xff" * 10
        await store.put(key, bytes(data))

    asyncio.run(corrupt())
    with pytest.raises(OffloadedReadError, match=rf"{TOPIC}: .*offloaded ledger {LEDGER}.*"):
        _rows(part)

    asyncio.run(store.delete(index_key("u-2", LEDGER)))
    with pytest.raises(OffloadedReadError, match=rf"ledger {LEDGER}.*index .* is missing"):
        _rows(part)


def _chunk(uuid: str, chunk_id: int, chunks: int, whole: bytes, part: bytes) -> bytes:
    md = MessageMetadata(
        producer_name="c",
        sequence_id=7,
        publish_time=1_700_000_000_500,
        partition_key="chunky",
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=chunks,
        total_chunk_msg_size=len(whole),
    )
    return b"".join(bytes(b) for b in build_entry(md, part))


def test_a_chunked_message_across_offloaded_ledgers_comes_from_the_task_it_began_in(
    tmp_path: Path,
) -> None:
    config = OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    whole = bytes(range(256)) * 40
    thirds = [whole[:3000], whole[3000:6000], whole[6000:]]
    first = [_single(0), _chunk("m", 0, 3, whole, thirds[0])]
    second = [_chunk("m", 1, 3, whole, thirds[1]), _chunk("m", 2, 3, whole, thirds[2]), _single(2)]
    asyncio.run(_offload_ledgers(config, {LEDGER: first, LEDGER + 1: second}))
    opts = parse_options(_options(config))
    range_end = Position(LEDGER + 1, 2)
    next_ref = OffloadedEntries(LEDGER + 1, "u", 0, 2)
    part = RangePartition(
        TOPIC,
        EARLIEST,
        Position(LEDGER, 1),
        opts,
        None,
        None,
        OffloadedEntries(LEDGER, "u", 0, 1),
        following=(next_ref,),
        range_end=range_end,
    )
    got = _rows(part)
    assert [r[0] for r in got] == [b"single-0", whole]
    assert got[1][1] == "chunky"
    later = RangePartition(
        TOPIC, Position(LEDGER + 1, -1), range_end, opts, None, None, next_ref, range_end=range_end
    )
    assert [r[0] for r in _rows(later)] == [b"single-2"]  # the tail is the earlier task's

    # after a range read through the broker, the head is out of reach: said, not skipped
    after_broker = RangePartition(
        TOPIC,
        Position(LEDGER + 1, -1),
        range_end,
        opts,
        None,
        None,
        next_ref,
        range_end=range_end,
        after_broker=True,
    )
    with pytest.raises(OffloadedReadError, match=r"offload\.directRead=false"):
        _rows(after_broker)


async def _offload_ledgers(config: OffloadDriverConfig, ledgers: dict[int, list[bytes]]) -> None:
    offloader = BlobStoreOffloader(open_object_store(config), block_size_max=4096)
    for ledger_id, entries in ledgers.items():

        async def reads(first: int, last: int, entries: list[bytes] = entries) -> Sequence[bytes]:
            return entries[first : last + 1]

        await offloader.offload("u", ledger_id, len(entries) - 1, reads, b"")


@pytest.mark.parametrize("partition", [-1, 0, 3, 200])
def test_message_ids_are_serialized_as_each_message_would_serialize_its_own(
    partition: int,
) -> None:
    """Batch members share their entry's serialized part; whatever the ids' varints hold
    (0x20, the batch index's tag, inside an entry id included)."""
    messages = []
    for ledger_id, entry_id, size in [(32, 32, 200), (1 << 40, 0x20, 3), (5, 7, 0), (5, 8, 130)]:
        data = _batch(entry_id, size) if size else _single(entry_id)
        decoded, _ = decode_entry(
            Entry(data), topic=TOPIC, partition=partition, ledger_id=ledger_id, entry_id=entry_id
        )
        messages.extend(decoded)
    assert message_id_bytes(messages) == [m.message_id().serialize() for m in messages]
