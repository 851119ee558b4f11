"""Pulsar's block format for an offloaded ledger: a data object of blocks and an index object.

Sans-IO: bytes in, values out. The layout is the one Pulsar's blob-store offloader writes, so
an offloaded ledger looks like Pulsar's in the bucket (all integers big-endian)::

    data object  "<uuid>-ledger-<id>"        one block per multipart part
    +---------------------------------------------------------------------------+
    | block header, 128 bytes                                                   |
    |   int32 magic 0xFBDBABCB | int64 header length (128) | int64 block length |
    |   int64 first entry id   | zero padding to 128                            |
    +---------------------------------------------------------------------------+
    | entries, each  int32 size | int64 entry id | size bytes                    |
    +---------------------------------------------------------------------------+
    | padding: the bytes FE DC DE AD repeated up to the block length            |
    +---------------------------------------------------------------------------+

    index object "<uuid>-ledger-<id>-index"
    int32 magic 0xDE47DE47 | int32 index length | int64 data object length
    int64 data header length (128) | int32 block count | int32 metadata length
    metadata (the ledger's metadata as the metadata store keeps it)
    per block: int64 first entry id | int32 part number (1-based) | int64 block offset

Blocks are at most ``block_size_max`` bytes; an entry never spans two blocks, so a block holds
at least one entry whatever its size (a block grows past the maximum for one entry larger
than it). A block is as long as its content needs (Pulsar sizes the last block to fit too).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

BLOCK_MAGIC: Final = 0xFBDBABCB
INDEX_MAGIC: Final = 0xDE47DE47
BLOCK_HEADER_BYTES: Final = 128
ENTRY_HEADER_BYTES: Final = 4 + 8
PADDING: Final = bytes.fromhex("FEDCDEAD")
BLOCK_SIZE_MAX_DEFAULT: Final = 64 * 1024 * 1024
"""Pulsar's ``managedLedgerOffloadMaxBlockSizeInBytes`` default."""

_BLOCK_HEADER = struct.Struct(">iqqq")
_ENTRY_HEADER = struct.Struct(">iq")
_INDEX_HEADER = struct.Struct(">iiqqii")
_INDEX_ENTRY = struct.Struct(">qiq")


class BlockFormatError(ValueError):
    """Bytes that are not a block or an index of this format; the message says what is wrong."""


def data_key(uuid: str, ledger_id: int) -> str:
    """The data object's name, as Pulsar names it."""
    return f"{uuid}-ledger-{ledger_id}"


def index_key(uuid: str, ledger_id: int) -> str:
    return f"{data_key(uuid, ledger_id)}-index"


@dataclass(frozen=True, slots=True)
class BlockRef:
    """Where one block lies in the data object."""

    first_entry_id: int
    part: int
    """1-based, the multipart part the block was uploaded as."""
    offset: int
    """Of the block's header from the start of the data object."""


@dataclass(frozen=True, slots=True)
class OffloadIndex:
    """The index object's content: blocks in entry order."""

    data_object_length: int
    ledger_metadata: bytes
    blocks: tuple[BlockRef, ...]

    def block_for(self, entry_id: int) -> int:
        """The position in :attr:`blocks` of the block holding ``entry_id`` (the last block
        whose first entry is ``<= entry_id``); raises :class:`KeyError` before the first."""
        firsts = [b.first_entry_id for b in self.blocks]
        i = bisect.bisect_right(firsts, entry_id) - 1
        if i < 0:
            raise KeyError(entry_id)
        return i

    def block_span(self, position: int) -> tuple[int, int]:
        """``(offset, length)`` of the block at ``position`` in the data object."""
        start = self.blocks[position].offset
        if position + 1 < len(self.blocks):
            return start, self.blocks[position + 1].offset - start
        return start, self.data_object_length - start


def block_fits(used_bytes: int, entry_bytes: int, block_size_max: int) -> bool:
    """Whether an entry of ``entry_bytes`` joins a block already ``used_bytes`` long (header
    included) without passing ``block_size_max``. A block's first entry always joins."""
    return used_bytes + ENTRY_HEADER_BYTES + entry_bytes <= block_size_max


def plan_blocks(sizes: Iterable[int], block_size_max: int) -> Iterator[int]:
    """How many of the entries (given by their sizes, in order) each block holds."""
    count = 0
    used = BLOCK_HEADER_BYTES
    for size in sizes:
        if count and not block_fits(used, size, block_size_max):
            yield count
            count, used = 0, BLOCK_HEADER_BYTES
        count += 1
        used += ENTRY_HEADER_BYTES + size
    if count:
        yield count


def encode_block(
    first_entry_id: int, entries: Sequence[bytes], block_length: int | None = None
) -> list[bytes]:
    """One block as a list of buffers (header, entry headers and payloads, padding) to write
    one after the other; ``block_length`` pads it to that length (default: no padding)."""
    content = BLOCK_HEADER_BYTES + sum(ENTRY_HEADER_BYTES + len(e) for e in entries)
    length = content if block_length is None else block_length
    if length < content:
        raise ValueError(f"block length {length} below its content ({content} bytes)")
    header = _BLOCK_HEADER.pack(_signed32(BLOCK_MAGIC), BLOCK_HEADER_BYTES, length, first_entry_id)
    parts = [header + bytes(BLOCK_HEADER_BYTES - len(header))]
    for offset, entry in enumerate(entries):
        parts.append(_ENTRY_HEADER.pack(len(entry), first_entry_id + offset))
        parts.append(entry)
    if length > content:
        pad = length - content
        parts.append((PADDING * (pad // len(PADDING) + 1))[:pad])
    return parts


def decode_block(
    block: bytes | memoryview, expected_first_entry_id: int | None = None
) -> list[tuple[int, memoryview]]:
    """The ``(entry id, payload)`` pairs of one whole block (views into ``block``); raises
    :class:`BlockFormatError` when the block is not whole or not of this format."""
    view = memoryview(block)
    if len(view) < BLOCK_HEADER_BYTES:
        raise BlockFormatError(f"block of {len(view)} bytes is shorter than its header")
    magic, header_length, block_length, first = _BLOCK_HEADER.unpack_from(view)
    if magic != _signed32(BLOCK_MAGIC):
        raise BlockFormatError(f"block magic {magic & 0xFFFFFFFF:#x}, expected {BLOCK_MAGIC:#x}")
    if header_length != BLOCK_HEADER_BYTES or block_length != len(view):
        raise BlockFormatError(
            f"block header says {header_length} + {block_length} bytes, have {len(view)}"
        )
    if expected_first_entry_id is not None and first != expected_first_entry_id:
        raise BlockFormatError(
            f"block starts at entry {first}, the index says {expected_first_entry_id}"
        )
    out: list[tuple[int, memoryview]] = []
    pos = BLOCK_HEADER_BYTES
    end = len(view)
    expected = first
    while pos + ENTRY_HEADER_BYTES <= end:
        if bytes(view[pos : pos + 4]) == PADDING:
            break
        size, entry_id = _ENTRY_HEADER.unpack_from(view, pos)
        pos += ENTRY_HEADER_BYTES
        if size < 0 or pos + size > end or entry_id != expected:
            raise BlockFormatError(f"corrupt entry header at byte {pos - ENTRY_HEADER_BYTES}")
        out.append((entry_id, view[pos : pos + size]))
        pos += size
        expected += 1
    return out


def encode_index(index: OffloadIndex) -> bytes:
    length = _INDEX_HEADER.size + len(index.ledger_metadata) + _INDEX_ENTRY.size * len(index.blocks)
    head = _INDEX_HEADER.pack(
        _signed32(INDEX_MAGIC),
        length,
        index.data_object_length,
        BLOCK_HEADER_BYTES,
        len(index.blocks),
        len(index.ledger_metadata),
    )
    body = b"".join(_INDEX_ENTRY.pack(b.first_entry_id, b.part, b.offset) for b in index.blocks)
    return head + index.ledger_metadata + body


def decode_index(data: bytes) -> OffloadIndex:
    """Raises :class:`BlockFormatError` for anything but a whole index object."""
    if len(data) < _INDEX_HEADER.size:
        raise BlockFormatError(f"index of {len(data)} bytes is shorter than its header")
    magic, length, data_length, header_length, count, meta_length = _INDEX_HEADER.unpack_from(data)
    if magic != _signed32(INDEX_MAGIC):
        raise BlockFormatError(f"index magic {magic & 0xFFFFFFFF:#x}, expected {INDEX_MAGIC:#x}")
    if length != len(data) or count < 0 or meta_length < 0:
        raise BlockFormatError(f"index says {length} bytes, have {len(data)}")
    if header_length != BLOCK_HEADER_BYTES:
        raise BlockFormatError(f"index names a block header of {header_length} bytes")
    pos = _INDEX_HEADER.size
    metadata = data[pos : pos + meta_length]
    pos += meta_length
    if pos + count * _INDEX_ENTRY.size != len(data):
        raise BlockFormatError(f"index of {count} blocks does not fill its {len(data)} bytes")
    blocks = tuple(
        BlockRef(*_INDEX_ENTRY.unpack_from(data, pos + i * _INDEX_ENTRY.size)) for i in range(count)
    )
    return OffloadIndex(data_length, metadata, blocks)


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value
