"""Reassembly of chunked messages on the consumer side, sans I/O.

Chunks of one message share a ``uuid`` and arrive in ``chunk_id`` order (one producer, one
topic). The reassembler keeps at most ``max_pending_messages`` incomplete messages and
drops any older than ``expire_ms``; what it drops is returned so the consumer can ack (or
redeliver) those chunks. A chunk that does not continue its message (wrong ``chunk_id``)
discards the partial message, as the C++ client does. :func:`reassembled_message` makes the
application's message of a complete one.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.protocol import EntryMetadata
from magnetar.protocol.compression import decompress


@dataclass(slots=True)
class _Pending:
    total_size: int
    num_chunks: int
    started_ms: int
    parts: list[bytes] = field(default_factory=list)
    ids: list[MessageId] = field(default_factory=list)
    size: int = 0


@dataclass(frozen=True, slots=True)
class Reassembled:
    payload: bytes
    chunk_ids: tuple[MessageId, ...]


class ChunkReassembler:
    """Feed chunks with :meth:`add`; get the whole payload when the last chunk arrives."""

    def __init__(self, *, max_pending_messages: int = 10, expire_ms: int = 60_000) -> None:
        if max_pending_messages < 1:
            raise ValueError("max_pending_messages must be positive")
        self.max_pending_messages = max_pending_messages
        self.expire_ms = expire_ms
        self._pending: OrderedDict[str, _Pending] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self,
        uuid: str,
        chunk_id: int,
        num_chunks: int,
        total_size: int,
        data: bytes,
        message_id: MessageId,
        now_ms: int,
    ) -> tuple[Reassembled | None, list[MessageId]]:
        """Add one chunk. Returns the reassembled message when complete (else None) and the
        chunk ids of partial messages discarded by this call (evicted or broken)."""
        discarded: list[MessageId] = []
        pending = self._pending.get(uuid)
        if pending is None:
            if chunk_id != 0:
                return None, [message_id]  # a tail without its head: nothing to join
            while len(self._pending) >= self.max_pending_messages:
                _, oldest = self._pending.popitem(last=False)
                discarded.extend(oldest.ids)
            pending = self._pending[uuid] = _Pending(total_size, num_chunks, now_ms)
        elif chunk_id != len(pending.ids) or num_chunks != pending.num_chunks:
            del self._pending[uuid]
            discarded.extend(pending.ids)
            discarded.append(message_id)
            return None, discarded
        pending.parts.append(data)
        pending.ids.append(message_id)
        pending.size += len(data)
        if pending.size > pending.total_size:
            del self._pending[uuid]
            discarded.extend(pending.ids)
            return None, discarded
        if len(pending.ids) < pending.num_chunks:
            return None, discarded
        del self._pending[uuid]
        return Reassembled(b"".join(pending.parts), tuple(pending.ids)), discarded

    def expire(self, now_ms: int) -> list[MessageId]:
        """Drop partial messages older than ``expire_ms``; returns their chunk ids."""
        dropped: list[MessageId] = []
        for uuid in [
            u for u, p in self._pending.items() if now_ms - p.started_ms >= self.expire_ms
        ]:
            dropped.extend(self._pending.pop(uuid).ids)
        return dropped

    def clear(self) -> None:
        self._pending.clear()


def reassembled_message(
    done: Reassembled, md: EntryMetadata, *, topic: str, partition: int, redelivery_count: int
) -> Message:
    """The message of a complete chunked one: ``done``'s payload decompressed, the fields
    of ``md`` (the last chunk's metadata, which every chunk repeats), the last chunk's
    position as its id and every chunk's id in ``chunk_ids`` (acknowledging it acks them
    all). Raises CompressionError for a payload that does not decompress."""
    payload = bytes(decompress(md.compression, done.payload, md.uncompressed_size))
    last = done.chunk_ids[-1]
    msg = Message(
        payload,
        topic=topic,
        partition=partition,
        ledger_id=last.ledger_id(),
        entry_id=last.entry_id(),
        properties=dict(md.properties) or None,
        partition_key=md.partition_key,
        ordering_key=md.ordering_key,
        publish_time=md.publish_time,
        event_time=md.event_time,
        redelivery_count=redelivery_count,
        schema_version=md.schema_version,
        sequence_id=md.sequence_id,
        producer_name=md.producer_name,
    )
    msg.chunk_ids = done.chunk_ids
    return msg
