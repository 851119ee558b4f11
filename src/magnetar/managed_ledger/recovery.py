"""Recovering the ledger a previous owner was writing, when a managed ledger is opened.

The ledger is opened for recovery (fencing its writer on the bookies and closing it at its
last recoverable entry). The ledger list in the metadata was last written when that ledger
started (or at a trim), so its entry, byte and message counts there are stale: entries
come from the recovery, and bytes and per-entry message counts from reading the entries
back through the owner's ``messages_of`` (the broker reads each entry's batch size). Without
``messages_of`` a recovered ledger counts one message an entry and the storage's length.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.ledger_list import LedgerSegment
from magnetar.managed_ledger.storage import LedgerReader, LedgerStorage


async def recover_ledger(
    storage: LedgerStorage,
    segment: LedgerSegment,
    messages_of: Callable[[bytes], int] | None,
    config: ManagedLedgerConfig,
    now_ms: int,
) -> LedgerReader:
    """Fence and close ``segment``'s ledger, set its counts (see the module docstring) and
    close time; returns the reader it was opened with. Raises the storage's errors."""
    reader = await storage.open_ledger(segment.ledger_id, recovery=True)
    segment.entries = reader.last_add_confirmed + 1
    segment.size_bytes = reader.length
    prefix = None
    if messages_of is not None:
        prefix, segment.size_bytes = await count_messages(
            reader, segment.entries, messages_of, config
        )
    segment.messages = prefix[-1] if prefix is not None else segment.entries
    segment.message_prefix = prefix if segment.messages != segment.entries else None
    segment.closed_ms = now_ms
    segment.last_add_ms = max(segment.last_add_ms, now_ms)
    return reader


async def count_messages(
    reader: LedgerReader,
    entries: int,
    messages_of: Callable[[bytes], int],
    config: ManagedLedgerConfig,
) -> tuple[array[int], int]:
    """The message-count prefix sum of entries ``0 .. entries - 1`` of ``reader`` (length
    ``entries + 1``) and their bytes. An entry ``messages_of`` cannot parse counts as one
    message. Reads ``read_ahead_entries`` first, then as many entries as
    ``read_ahead_bytes_max`` holds at the average entry size so far (at most
    ``read_batch_max_entries``), so memory stays bounded whatever the entries' size."""
    prefix = array("q", [0])
    total = 0
    size_bytes = 0
    first = 0
    step = max(min(config.read_ahead_entries, config.read_batch_max_entries), 1)
    while first < entries:
        last = min(first + step, entries) - 1
        for entry in await reader.read(first, last):
            size_bytes += len(entry.data)
            try:
                total += max(messages_of(entry.data), 1)
            except MagnetarError:  # unparseable: it is still one entry to deliver
                total += 1
            prefix.append(total)
        first = last + 1
        average = max(size_bytes // first, 1)
        step = max(min(config.read_ahead_bytes_max // average, config.read_batch_max_entries), 1)
    return prefix, size_bytes
