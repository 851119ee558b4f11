"""Hook for tiered storage: offloading a closed ledger and reading it back.

The broker opens managed ledgers without an offloader yet (``ManagedLedger.offload_ledger``
then raises ``OffloadNotConfigured``); :mod:`magnetar.offload` holds the parts an offloader is
built from (Pulsar's block format, the object stores, the blob-store offloader). Given
one, the managed ledger calls :meth:`Offloader.offload` for a closed ledger
(``ManagedLedger.offload_ledger``), marks the segment ``offloaded`` in its metadata, and
from then on serves reads of that ledger through :meth:`Offloader.read` once the bookie
copy is gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

ReadRange = Callable[[int, int], Awaitable[Sequence[bytes]]]
"""Reads entries ``first..last`` (inclusive) of the ledger being offloaded."""


class Offloader(Protocol):
    async def offload(
        self, managed_ledger: str, ledger_id: int, entries: int, read: ReadRange
    ) -> None:
        """Copy entries ``0..entries-1`` of a closed ledger to tiered storage. Must be
        idempotent: a retry after a crash overwrites a partial copy."""
        ...

    async def read(
        self, managed_ledger: str, ledger_id: int, first_entry: int, last_entry: int
    ) -> Sequence[bytes]:
        """Entries ``first..last`` of an offloaded ledger."""
        ...

    async def delete(self, managed_ledger: str, ledger_id: int) -> None:
        """Remove the offloaded copy (when the managed ledger trims the ledger)."""
        ...
