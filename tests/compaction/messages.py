"""Build and open stored entries (single messages and batches) for compaction tests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from magnetar.protocol import (
    CompressionType,
    Entry,
    SingleMessageMetadata,
    build_batch,
    split_batch,
)
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.entry import build_entry
from magnetar.protocol.metadata import MessageMetadata

_sequence = itertools.count()


@dataclass(frozen=True)
class Msg:
    key: str | None
    value: bytes
    null_value: bool = False

    @property
    def tombstone(self) -> bool:
        return self.null_value or not self.value


def single_entry(msg: Msg, compression: CompressionType = CompressionType.NONE) -> bytes:
    """An unbatched message as a producer stores it."""
    payload = compress(compression, msg.value)
    md = MessageMetadata(
        producer_name="test",
        sequence_id=next(_sequence),
        publish_time=1,
        partition_key=msg.key,
        compression=compression,
        uncompressed_size=len(msg.value),
        null_value=msg.null_value,
    )
    return b"".join(build_entry(md, payload))


def batch_entry(msgs: list[Msg], compression: CompressionType = CompressionType.NONE) -> bytes:
    """A batch of ``msgs`` (compressed as a whole)."""
    records = [
        (SingleMessageMetadata(partition_key=m.key, null_value=m.null_value), m.value) for m in msgs
    ]
    raw = build_batch(records)
    md = MessageMetadata(
        producer_name="test",
        sequence_id=next(_sequence),
        publish_time=1,
        num_messages_in_batch=len(msgs),
        compression=compression,
        uncompressed_size=len(raw),
    )
    return b"".join(build_entry(md, compress(compression, raw)))


def open_entry(data: bytes) -> list[Msg]:
    """The messages a consumer would receive from an entry (checksum verified)."""
    entry = Entry(data)
    entry.check_checksum()
    md = entry.metadata
    if md.num_messages_in_batch is None:
        value = bytes(decompress(md.compression, entry.payload, md.uncompressed_size))
        return [Msg(md.partition_key, value, md.null_value)]
    raw = decompress(md.compression, entry.payload, md.uncompressed_size)
    out = []
    for single, payload in split_batch(raw, md.num_messages_in_batch):
        assert not single.compacted_out
        out.append(Msg(single.partition_key, bytes(payload), single.null_value))
    return out
