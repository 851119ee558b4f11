"""Reading an offloaded ledger's entries straight from the object store, in a Spark executor.

The executor opens the store the ``offload.*`` options name (credentials from its
environment), reads the ledger's index object once, then whole blocks with ranged GETs
(:class:`~magnetar.offload.offloader.BlobStoreOffloader`), a run of entries at a time. Each
stored entry becomes messages exactly as a consumer turns a dispatched entry into messages
(:func:`entry_messages`, over the client's own decoding), so rows built from them are the
rows the broker path builds.

Errors: :class:`OffloadedReadError` naming the partition and the ledger when an object is
missing or corrupt, an entry does not decode, or the store fails (Spark retries the task up
to ``spark.task.maxFailures`` times; a missing or corrupt object fails every attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from magnetar.client import Message
from magnetar.client.chunk_reassembler import ChunkReassembler, reassembled_message
from magnetar.client.message import decode_entry, entry_payload
from magnetar.client.message_id import MessageId
from magnetar.common.errors import MagnetarError
from magnetar.offload.block_format import BLOCK_SIZE_MAX_DEFAULT
from magnetar.offload.object_store import ObjectStoreError, open_object_store
from magnetar.offload.offloader import BlobStoreOffloader, OffloadedDataError
from magnetar.offload.settings import OffloadDriverConfig
from magnetar.protocol import Entry
from magnetar.spark.offload_plan import OffloadedEntries
from magnetar.spark.rows import ROWS_PER_BATCH_MAX
from magnetar.spark.topic_catalog import SparkSourceError

ENTRIES_PER_READ_MAX = 1000
"""Entries asked of the offloader at a time, at most."""
FIRST_READ_ENTRIES = 100
"""Entries of a range's first read (later reads are sized by the entries read so far)."""
READ_BYTES_MAX = 16 * 1024 * 1024
"""About how many bytes of entries one read brings (two are in memory: one decoded, one
coming)."""
BLOCK_CACHE_BYTES = 2 * BLOCK_SIZE_MAX_DEFAULT
"""The task's block cache: the block being read stays whole whatever the block size, so each
block is fetched once."""


class OffloadedReadError(SparkSourceError):
    """An offloaded ledger could not be read from the object store; the message names the
    partition, the ledger and the cause."""


class EntryDecoder:
    """Stored entries of one partition -> the messages a consumer receives for them (sans-IO).

    A chunked message comes out whole, at its last chunk, once every chunk was fed; a chunk
    whose first chunk was not fed (it precedes the range) is dropped, as the consumer drops
    it, and counted in :attr:`dropped_chunks`. Raises
    :class:`~magnetar.common.errors.MagnetarError` (``CorruptMessage``, ``ProtocolError``)
    for an entry that does not decode."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._chunks = ChunkReassembler()
        self.dropped_chunks = 0

    @property
    def pending_chunked(self) -> int:
        """Chunked messages begun and not complete yet."""
        return len(self._chunks)

    def entry_messages(
        self, ledger_id: int, entry_id: int, data: bytes, *, only_pending: bool = False
    ) -> list[Message]:
        """The messages of one entry. ``only_pending``: only chunks that continue messages
        already begun are taken (what completes them), everything else is skipped."""
        entry = Entry(data)
        md = entry.metadata
        chunked = md.chunk_id is not None and bool(md.num_chunks_from_msg)
        chunked = chunked and (md.num_chunks_from_msg or 0) > 1
        if only_pending and (not chunked or md.chunk_id == 0):
            return []
        if chunked:
            assert md.chunk_id is not None and md.num_chunks_from_msg is not None
            chunk_mid = MessageId(self.partition, ledger_id, entry_id)
            done, discarded = self._chunks.add(
                md.uuid or "",
                md.chunk_id,
                md.num_chunks_from_msg,
                md.total_chunk_msg_size or 0,
                entry_payload(entry, md),
                chunk_mid,
                0,
            )
            self.dropped_chunks += len(discarded)
            if done is None:
                return []
            msg = reassembled_message(
                done, md, topic=self.topic, partition=self.partition, redelivery_count=0
            )
            return [msg]
        messages, _ = decode_entry(
            entry,
            topic=self.topic,
            partition=self.partition,
            ledger_id=ledger_id,
            entry_id=entry_id,
        )
        return messages


class OffloadedEntryReader:
    """The messages of :class:`~magnetar.spark.offload_plan.OffloadedEntries` of one
    partition, read from the store ``config`` names. One per task; not thread-safe.

    Entries are fed to one :class:`EntryDecoder` in order; an entry at or before the last
    one fed is skipped, so ranges that overlap by an entry (the next piece of a split
    ledger) feed it once."""

    def __init__(
        self, config: OffloadDriverConfig, partition_name: str, partition_index: int
    ) -> None:
        self.config = config
        self.partition_name = partition_name
        self.decoder = EntryDecoder(partition_name, partition_index)
        self._offloader: BlobStoreOffloader | None = None
        self._fed: tuple[int, int] = (-1, -1)

    def error(self, ledger_id: int, why: object) -> OffloadedReadError:
        return OffloadedReadError(
            f"{self.partition_name}: reading offloaded ledger {ledger_id} from "
            f"{self.config.driver} store failed: {why}"
        )

    async def _read(self, ref: OffloadedEntries, first: int, last: int) -> list[bytes]:
        assert self._offloader is not None
        try:
            entries = await self._offloader.read(ref.uuid, ref.ledger_id, first, last)
        except (OffloadedDataError, ObjectStoreError) as exc:
            raise self.error(ref.ledger_id, exc) from None
        if len(entries) != last - first + 1:
            raise self.error(ref.ledger_id, f"{len(entries)} entries of {first}..{last} found")
        return entries

    async def messages(
        self, ref: OffloadedEntries, *, only_pending: bool = False
    ) -> AsyncGenerator[list[Message]]:
        """Runs of messages of entries ``ref.first_entry_id..ref.last_entry_id``, in order,
        each of whole entries and about ROWS_PER_BATCH_MAX messages (``only_pending``: see
        :meth:`EntryDecoder.entry_messages`). Raises OffloadedReadError.

        Entries are read a run at a time, runs sized to about READ_BYTES_MAX by the entries
        read so far; the next run's GETs start before this run's entries are decoded (the
        object store's client works on its own threads), so fetching overlaps decoding."""
        if self._offloader is None:
            try:
                store = open_object_store(self.config)
            except (ValueError, ObjectStoreError) as exc:
                raise self.error(ref.ledger_id, exc) from None
            self._offloader = BlobStoreOffloader(store, block_cache_bytes=BLOCK_CACHE_BYTES)
        first = ref.first_entry_id
        if self._fed[0] == ref.ledger_id:
            first = max(first, self._fed[1] + 1)
        if first > ref.last_entry_id:
            return
        count = FIRST_READ_ENTRIES
        last = min(first + count - 1, ref.last_entry_id)
        reading: asyncio.Future[list[bytes]] | None = asyncio.ensure_future(
            self._read(ref, first, last)
        )
        try:
            while reading is not None:
                entries = await reading
                reading = None
                size = sum(len(e) for e in entries)
                count = max(
                    1, min(ENTRIES_PER_READ_MAX, READ_BYTES_MAX * len(entries) // (size or 1))
                )
                this_first, first = first, last + 1
                if first <= ref.last_entry_id:
                    last = min(first + count - 1, ref.last_entry_id)
                    reading = asyncio.ensure_future(self._read(ref, first, last))
                    await asyncio.sleep(0)  # lets it send its GET before decoding starts
                out: list[Message] = []
                for entry_id, data in enumerate(entries, this_first):
                    try:
                        found = self.decoder.entry_messages(
                            ref.ledger_id, entry_id, data, only_pending=only_pending
                        )
                    except MagnetarError as exc:
                        raise self.error(ref.ledger_id, f"entry {entry_id}: {exc}") from None
                    out.extend(found)
                    self._fed = (ref.ledger_id, entry_id)
                    if len(out) >= ROWS_PER_BATCH_MAX:
                        yield out
                        out = []
                if out:
                    yield out
        finally:
            if reading is not None:
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, SparkSourceError):
                    await reading
