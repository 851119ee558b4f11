"""Batch payloads: many messages in one entry.

After decompression (with ``MessageMetadata.compression``) a batched payload is::

    repeat num_messages_in_batch times:
        [singleMetaSize:u32][SingleMessageMetadata][payload_size bytes]

The broker never unpacks batches on its hot path; consumers (and tools such as compaction
and peek) do.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.common.errors import ProtocolError
from magnetar.common.lazy_module import lazy_module
from magnetar.protocol.message_id import BytesLike
from magnetar.protocol.metadata import SingleMessageMetadata

if TYPE_CHECKING:
    from magnetar.protocol import _convert
    from magnetar.protocol.generated import PulsarApi_pb2 as pb
else:  # imported at the first frame: an idle process holds no protobuf classes
    _convert = lazy_module("magnetar.protocol._convert")
    pb = lazy_module("magnetar.protocol.generated.PulsarApi_pb2")

_U32 = struct.Struct(">I")

BATCH_MESSAGES_MAX = 1_000_000
"""Upper bound on records accepted by :func:`split_batch` (bounds work on hostile input)."""


def split_batch(
    payload: BytesLike, count: int | None = None
) -> list[tuple[SingleMessageMetadata, memoryview]]:
    """Split a decompressed batch payload into ``(metadata, payload)`` records.

    Reads ``count`` records (``num_messages_in_batch``), or until the end if ``count`` is
    None; bytes after the last record are ignored, as Pulsar clients do. The payload views
    share the given buffer (no copy). Raises ProtocolError on truncated or malformed input.
    """
    view = memoryview(payload)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    n = len(view)
    limit = BATCH_MESSAGES_MAX if count is None else count
    if limit < 0 or limit > BATCH_MESSAGES_MAX:
        raise ProtocolError(f"batch message count {count} out of range")
    records: list[tuple[SingleMessageMetadata, memoryview]] = []
    pos = 0
    m = pb.SingleMessageMetadata()
    while len(records) < limit:
        if count is None and pos == n:
            break
        if n - pos < 4:
            raise ProtocolError(f"batch truncated at record {len(records)}")
        size = _U32.unpack_from(view, pos)[0]
        pos += 4
        if size > n - pos:
            raise ProtocolError(f"batch record {len(records)} metadata overruns the payload")
        m.Clear()
        _convert.parse_into(m, view[pos : pos + size], "SingleMessageMetadata")
        pos += size
        length = m.payload_size
        if length < 0 or length > n - pos:
            raise ProtocolError(f"batch record {len(records)} payload overruns the payload")
        records.append(
            (_convert.struct_from_pb(SingleMessageMetadata, m), view[pos : pos + length])
        )
        pos += length
    return records


def build_batch(records: Iterable[tuple[SingleMessageMetadata, BytesLike]]) -> bytes:
    """Concatenate records into a batch payload (before compression).

    Each record's ``payload_size`` is set from its payload, whatever the metadata says.
    """
    parts: list[BytesLike] = []
    codec = _convert.codec(SingleMessageMetadata)
    for single, payload in records:
        m = pb.SingleMessageMetadata()
        codec.fill(m, single)
        m.payload_size = memoryview(payload).nbytes
        meta = m.SerializeToString()
        parts.append(_U32.pack(len(meta)))
        parts.append(meta)
        parts.append(payload)
    return b"".join(parts)
