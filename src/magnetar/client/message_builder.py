"""Non-batched SENDs, sans I/O: one message, or one large message split into chunks.

Chunking (as the C++ producer does it): the payload is compressed first, then cut into
pieces of at most ``chunk_max_bytes``; every chunk is its own SEND with the same
``sequence_id``, the same ``uuid`` (``"<producerName>-<sequenceId>"``),
``num_chunks_from_msg`` and ``total_chunk_msg_size`` (the compressed size), ``chunk_id``
0..N-1 and ``CommandSend.is_chunk``. Compression fields are repeated on every chunk. The
message's handle rides on the last chunk only; each chunk gets its own receipt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from magnetar.client.batch_builder import OpSend
from magnetar.protocol import CompressionType, MessageMetadata, encode_metadata
from magnetar.protocol.compression import compress

CHUNK_METADATA_RESERVE_BYTES = 1024
"""Room kept for metadata when a chunk size is derived from the broker's max message size."""


def build_message_metadata(
    *,
    producer_name: str,
    sequence_id: int,
    publish_time_ms: int,
    properties: Sequence[tuple[str, str]] = (),
    partition_key: str | None = None,
    ordering_key: bytes | None = None,
    event_time: int = 0,
    deliver_at_ms: int | None = None,
    compression: CompressionType = CompressionType.NONE,
    uncompressed_size: int = 0,
    schema_version: bytes | None = None,
    null_value: bool = False,
    replicate_to: Sequence[str] = (),
    uuid: str | None = None,
    chunk_id: int | None = None,
    num_chunks: int | None = None,
    total_chunk_size: int | None = None,
) -> bytes:
    return encode_metadata(
        MessageMetadata(
            producer_name=producer_name,
            sequence_id=sequence_id,
            publish_time=publish_time_ms,
            properties=tuple(properties),
            partition_key=partition_key,
            replicate_to=tuple(replicate_to),
            ordering_key=ordering_key,
            event_time=event_time,
            deliver_at_time=deliver_at_ms,
            compression=compression,
            uncompressed_size=uncompressed_size if compression != CompressionType.NONE else 0,
            schema_version=schema_version,
            null_value=null_value,
            uuid=uuid,
            chunk_id=chunk_id,
            num_chunks_from_msg=num_chunks,
            total_chunk_msg_size=total_chunk_size,
        )
    )


def build_sends(
    payload: bytes,
    handle: Any,
    *,
    producer_name: str,
    sequence_id: int,
    publish_time_ms: int,
    chunk_max_bytes: int | None,
    properties: Sequence[tuple[str, str]] = (),
    partition_key: str | None = None,
    ordering_key: bytes | None = None,
    event_time: int = 0,
    deliver_at_ms: int | None = None,
    compression: CompressionType = CompressionType.NONE,
    schema_version: bytes | None = None,
    null_value: bool = False,
    replicate_to: Sequence[str] = (),
) -> list[OpSend]:
    """The SENDs for one non-batched message: one, or several chunks when the compressed
    payload exceeds ``chunk_max_bytes`` (None: never chunk; the caller checks the size)."""
    body = compress(compression, payload) if compression != CompressionType.NONE else payload
    common: dict[str, Any] = {
        "producer_name": producer_name,
        "sequence_id": sequence_id,
        "publish_time_ms": publish_time_ms,
        "properties": properties,
        "partition_key": partition_key,
        "ordering_key": ordering_key,
        "event_time": event_time,
        "deliver_at_ms": deliver_at_ms,
        "compression": compression,
        "uncompressed_size": len(payload),
        "schema_version": schema_version,
        "null_value": null_value,
        "replicate_to": replicate_to,
    }
    if chunk_max_bytes is None or len(body) <= chunk_max_bytes:
        return [
            OpSend(
                sequence_id=sequence_id,
                highest_sequence_id=sequence_id,
                num_messages=1,
                metadata=build_message_metadata(**common),
                payload=body,
                handles=[handle],
                batched=False,
                payload_bytes_total=len(payload),
            )
        ]
    if chunk_max_bytes < 1:
        raise ValueError("chunk_max_bytes must be positive")
    num_chunks = -(-len(body) // chunk_max_bytes)
    uuid = f"{producer_name}-{sequence_id}"
    ops = []
    view = memoryview(body)
    for chunk_id in range(num_chunks):
        piece = bytes(view[chunk_id * chunk_max_bytes : (chunk_id + 1) * chunk_max_bytes])
        last = chunk_id == num_chunks - 1
        ops.append(
            OpSend(
                sequence_id=sequence_id,
                highest_sequence_id=sequence_id,
                num_messages=1,
                metadata=build_message_metadata(
                    **common,
                    uuid=uuid,
                    chunk_id=chunk_id,
                    num_chunks=num_chunks,
                    total_chunk_size=len(body),
                ),
                payload=piece,
                handles=[handle] if last else [],
                batched=False,
                is_chunk=True,
                chunk_id=chunk_id,
                num_chunks=num_chunks,
                payload_bytes_total=len(payload) if last else 0,
            )
        )
    return ops
