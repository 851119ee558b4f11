"""Copies closed ledgers into an object store and reads them back.

One object pair per ledger and attempt (``<uuid>-ledger-<id>`` and its ``-index``, see
:mod:`.block_format`). The data object is streamed up block by block while entries are read
from the bookies a run at a time, so an offload holds at most one upload part and one read run
in memory, never the ledger. The index is written last: a ledger whose index object exists is
complete, and :meth:`BlobStoreOffloader.offload` returns only then. A crash or failure before
that leaves objects that no index names; the caller records the attempt's uuid before it
starts (Pulsar's offload context), so the next attempt deletes them with :meth:`delete`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from magnetar.common.errors import PersistenceError

from .block_format import (
    BLOCK_HEADER_BYTES,
    BLOCK_SIZE_MAX_DEFAULT,
    ENTRY_HEADER_BYTES,
    BlockFormatError,
    BlockRef,
    OffloadIndex,
    block_fits,
    data_key,
    decode_block,
    decode_index,
    encode_block,
    encode_index,
    index_key,
)
from .object_store import (
    PART_SIZE_BYTES,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    open_object_store,
)
from .settings import OffloadDriverConfig

ReadRange = Callable[[int, int], Awaitable[Sequence[bytes]]]
"""Reads entries ``first..last`` (inclusive) of the ledger being offloaded."""

READ_RUN_ENTRIES = 100
"""Entries read from the bookies at a time while offloading (Pulsar reads 100)."""
BLOCK_CACHE_BYTES_DEFAULT = 32 * 1024 * 1024


class OffloadedDataError(PersistenceError):
    """An offloaded ledger's objects are missing or corrupt; the message names the ledger.
    Not retriable: reading again finds the same bytes."""

    retriable = False


@dataclass(frozen=True, slots=True)
class OffloadResult:
    uuid: str
    data_bytes: int
    blocks: int
    entries: int


class BlobStoreOffloader:
    """Offloads ledgers to ``store`` and opens readers of offloaded ledgers.

    Readers share one cache of whole blocks, bounded by ``block_cache_bytes``: a catch-up
    read fetches a block once (a ranged GET of the whole block: read-ahead), then serves the
    block's other entries from memory.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        block_size_max: int = BLOCK_SIZE_MAX_DEFAULT,
        block_cache_bytes: int = BLOCK_CACHE_BYTES_DEFAULT,
        config: OffloadDriverConfig | None = None,
    ) -> None:
        self.store = store
        self.config = config
        """The driver this offloader was opened from (None: built around a given store)."""
        self.block_size_max = block_size_max
        self._cache = BlockCache(block_cache_bytes)
        self._indexes: OrderedDict[tuple[str, int], OffloadIndex] = OrderedDict()

    @classmethod
    def open(cls, config: OffloadDriverConfig, **kwargs: int) -> BlobStoreOffloader:
        """The offloader of ``config``'s object store (``kwargs``: the sizes above).
        Raises :class:`ValueError` for settings that cannot work."""
        return cls(open_object_store(config), config=config, **kwargs)

    @property
    def driver_name(self) -> str:
        return "filesystem" if self.config is None else self.config.driver

    @property
    def driver_metadata(self) -> dict[str, str]:
        """Where the objects go, as recorded in each ledger's offload context."""
        if self.config is None:
            return {"location": self.store.description}
        found = {
            "bucket": self.config.bucket,
            "region": self.config.region,
            "endpoint": self.config.endpoint,
            "directory": self.config.directory,
        }
        return {k: v for k, v in found.items() if v}

    async def offload(
        self, uuid: str, ledger_id: int, last_entry_id: int, read: ReadRange, metadata: bytes
    ) -> OffloadResult:
        """Copies entries ``0..last_entry_id`` of a closed ledger; ``metadata`` goes into the
        index. Raises :class:`~.object_store.ObjectStoreError` when the store fails (nothing
        is then complete) and whatever ``read`` raises."""
        blocks: list[BlockRef] = []
        written = 0
        entries = last_entry_id + 1

        source_error: list[BaseException] = []

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal written
            pending: list[bytes] = []
            pending_bytes = 0
            async for first, payloads in _noting_errors(self._blocks(entries, read), source_error):
                blocks.append(BlockRef(first, len(blocks) + 1, written))
                for part in encode_block(first, payloads):
                    pending.append(part)
                    pending_bytes += len(part)
                    written += len(part)
                if pending_bytes >= PART_SIZE_BYTES:
                    yield b"".join(pending)
                    pending, pending_bytes = [], 0
            if pending or written == 0:
                yield b"".join(pending)

        try:
            await self.store.put_stream(data_key(uuid, ledger_id), chunks())
        except ObjectStoreError:
            if source_error:  # the upload failed because reading the ledger did
                raise source_error[0] from None
            raise
        index = OffloadIndex(written, metadata, tuple(blocks))
        await self.store.put(index_key(uuid, ledger_id), encode_index(index))
        return OffloadResult(uuid, written, len(blocks), entries)

    async def _blocks(
        self, entries: int, read: ReadRange
    ) -> AsyncIterator[tuple[int, list[bytes]]]:
        """Entries in blocks of at most ``block_size_max`` bytes, read a run at a time."""
        first_in_block = 0
        block: list[bytes] = []
        used = BLOCK_HEADER_BYTES
        next_entry = 0
        while next_entry < entries:
            last = min(next_entry + READ_RUN_ENTRIES, entries) - 1
            run = await read(next_entry, last)
            if len(run) != last - next_entry + 1:
                raise PersistenceError(f"read {len(run)} entries of {next_entry}..{last}")
            for payload in run:
                if block and not block_fits(used, len(payload), self.block_size_max):
                    yield first_in_block, block
                    first_in_block, block, used = next_entry, [], BLOCK_HEADER_BYTES
                block.append(bytes(payload))
                used += ENTRY_HEADER_BYTES + len(payload)
                next_entry += 1
        if block:
            yield first_in_block, block

    async def read(self, uuid: str, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries ``first..last`` of an offloaded ledger. Raises
        :class:`OffloadedDataError` when its objects are missing or corrupt, or do not hold
        the entries; :class:`~.object_store.ObjectStoreError` when the store fails."""
        index = await self._index(uuid, ledger_id)
        out: list[bytes] = []
        entry = first
        while entry <= last:
            try:
                position = index.block_for(entry)
            except KeyError:
                raise OffloadedDataError(
                    f"ledger {ledger_id}: no offloaded block holds entry {entry}"
                ) from None
            block = await self._block(uuid, ledger_id, index, position)
            start = block[0][0]
            for entry_id, payload in block[entry - start :]:
                if entry_id > last:
                    break
                out.append(bytes(payload))
                entry = entry_id + 1
            if entry <= block[-1][0]:
                break
            if entry <= last and position + 1 >= len(index.blocks):
                raise OffloadedDataError(
                    f"ledger {ledger_id}: entry {entry} is past the offloaded copy"
                )
        return out

    async def _index(self, uuid: str, ledger_id: int) -> OffloadIndex:
        key = (uuid, ledger_id)
        cached = self._indexes.get(key)
        if cached is not None:
            self._indexes.move_to_end(key)
            return cached
        try:
            index = decode_index(await self.store.get(index_key(uuid, ledger_id)))
        except ObjectNotFound:
            raise OffloadedDataError(
                f"ledger {ledger_id}: the offloaded index {index_key(uuid, ledger_id)} is missing"
            ) from None
        except BlockFormatError as exc:
            raise OffloadedDataError(
                f"ledger {ledger_id}: corrupt offloaded index: {exc}"
            ) from None
        self._indexes[key] = index
        while len(self._indexes) > 1024:
            self._indexes.popitem(last=False)
        return index

    async def _block(
        self, uuid: str, ledger_id: int, index: OffloadIndex, position: int
    ) -> list[tuple[int, memoryview]]:
        key = (uuid, ledger_id, position)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        offset, length = index.block_span(position)
        try:
            data = await self.store.get_range(data_key(uuid, ledger_id), offset, length)
        except ObjectNotFound:
            raise OffloadedDataError(
                f"ledger {ledger_id}: the offloaded data {data_key(uuid, ledger_id)} is missing"
            ) from None
        try:
            block = decode_block(data, index.blocks[position].first_entry_id)
        except BlockFormatError as exc:
            raise OffloadedDataError(
                f"ledger {ledger_id}: corrupt offloaded block {position + 1}: {exc}"
            ) from None
        if not block:
            raise OffloadedDataError(f"ledger {ledger_id}: offloaded block {position + 1} is empty")
        self._cache.put(key, block, len(data))
        return block

    async def delete(self, uuid: str, ledger_id: int) -> None:
        """Removes the ledger's objects of that attempt (idempotent); the index goes first, so
        a ledger is never seen complete with its data gone."""
        await self.store.delete(index_key(uuid, ledger_id))
        await self.store.delete(data_key(uuid, ledger_id))
        self._indexes.pop((uuid, ledger_id), None)
        self._cache.drop(lambda k: k[0] == uuid and k[1] == ledger_id)

    async def is_complete(self, uuid: str, ledger_id: int) -> bool:
        """Whether the attempt's index object exists (and so its data object is whole)."""
        try:
            await self.store.size(index_key(uuid, ledger_id))
        except ObjectNotFound:
            return False
        return True


async def _noting_errors(
    source: AsyncIterator[tuple[int, list[bytes]]], errors: list[BaseException]
) -> AsyncIterator[tuple[int, list[bytes]]]:
    """``source``, remembering what it raised (the store wraps errors of the stream it reads)."""
    try:
        async for item in source:
            yield item
    except BaseException as exc:
        errors.append(exc)
        raise


class BlockCache:
    """Decoded blocks by ``(uuid, ledger, block)``, least recently used first out, bounded by
    the bytes of the blocks' objects."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._blocks: OrderedDict[
            tuple[str, int, int], tuple[list[tuple[int, memoryview]], int]
        ] = OrderedDict()
        self.bytes = 0

    def get(self, key: tuple[str, int, int]) -> list[tuple[int, memoryview]] | None:
        found = self._blocks.get(key)
        if found is None:
            return None
        self._blocks.move_to_end(key)
        return found[0]

    def put(
        self, key: tuple[str, int, int], block: list[tuple[int, memoryview]], size: int
    ) -> None:
        if size > self.bytes_max:
            return
        old = self._blocks.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._blocks[key] = (block, size)
        self.bytes += size
        while self.bytes > self.bytes_max:
            _, (_, dropped) = self._blocks.popitem(last=False)
            self.bytes -= dropped

    def drop(self, matches: Callable[[tuple[str, int, int]], bool]) -> None:
        for key in [k for k in self._blocks if matches(k)]:
            self.bytes -= self._blocks.pop(key)[1]
