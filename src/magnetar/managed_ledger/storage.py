"""What the managed ledger needs from the ledger client (``magnetar.ledger``).

The managed ledger is written against these protocols, not the concrete client, so the
seam stays small: create a ledger, add to it in order, read ranges, close, open a closed
ledger for reading, open for recovery (which fences its writer), delete.
:class:`LedgerClientStorage` provides them over :class:`magnetar.ledger.LedgerClient`
(whose ``LedgerHandle`` satisfies :class:`LedgerWriter` and :class:`LedgerReader` as is).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

from magnetar.ledger import (
    EntryTooLarge,
    LedgerClient,
    LedgerFenced,
    LedgerHandle,
    NoSuchLedger,
)


class StoredEntry(Protocol):
    @property
    def data(self) -> bytes: ...


class LedgerReader(Protocol):
    """A ledger open for reading."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def last_add_confirmed(self) -> int:
        """Highest entry id acknowledged by an ack quorum (-1 if none)."""
        ...

    @property
    def length(self) -> int:
        """Payload bytes stored (final once the ledger is closed)."""
        ...

    async def read(self, first: int, last: int | None = None) -> Sequence[StoredEntry]:
        """Entries ``first..last`` (inclusive, all ``<= last_add_confirmed``)."""
        ...

    async def close(self) -> None: ...


class LedgerWriter(LedgerReader, Protocol):
    """A ledger open for appends by this process (its only writer)."""

    def add_nowait(self, data: bytes) -> asyncio.Future[int]:
        """Append one entry; the future gives its entry id. Ids follow call order and
        futures complete in entry order. Fails with the client's fenced error once another
        process recovered the ledger, and with an error for which :func:`never_fits` holds
        when the entry is larger than the storage takes: then that entry alone is refused,
        before it uses an entry id, and the ledger goes on taking later entries."""
        ...

    def add_run(
        self,
        datas: Sequence[bytes],
        callback: Callable[[int, int, int, BaseException | None], None],
    ) -> None:
        """Append ``datas`` as consecutive entries without a future (the managed ledger's
        hot path). ``callback(offset, count, first_entry_id, error)`` reports pieces of the
        run: entries ``offset`` … ``offset + count - 1`` stored as ``first_entry_id`` …
        (``error`` None) or failed (``first_entry_id`` -1). Every entry is in one piece;
        stored pieces come in entry order; never called before this method returns. An
        entry refused because it can never fit (:func:`never_fits`) takes no entry id."""
        ...


class LedgerStorage(Protocol):
    """The ledger client as the managed ledger uses it."""

    async def create_ledger(self, properties: dict[str, str]) -> LedgerWriter:
        """A new ledger with the storage's ensemble and quorums."""
        ...

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> LedgerReader:
        """Open for reading. ``recovery=True`` fences any writer and closes the ledger at
        its last recoverable entry first (needed for a ledger that may still be open)."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger; a missing ledger is not an error."""
        ...


class LedgerClientStorage:
    """:class:`LedgerStorage` over the real ledger client, with fixed quorums."""

    __slots__ = (
        "ack_quorum",
        "client",
        "ensemble_size",
        "write_quorum",
    )

    def __init__(
        self,
        client: LedgerClient,
        *,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
    ) -> None:
        self.client = client
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum

    async def create_ledger(self, properties: dict[str, str]) -> LedgerHandle:
        return await self.client.create(
            ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            properties=properties,
        )

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> LedgerHandle:
        return await self.client.open(ledger_id, recovery=recovery)

    async def delete_ledger(self, ledger_id: int) -> None:
        with contextlib.suppress(NoSuchLedger):
            await self.client.delete(ledger_id)


def is_fenced(exc: BaseException) -> bool:
    """Whether a ledger client error means another writer fenced this one."""
    return isinstance(exc, LedgerFenced)


def never_fits(exc: BaseException) -> bool:
    """Whether a ledger client error refuses this one entry for good (larger than any
    ledger takes): the ledger is unaffected, so the append fails alone, with no rollover
    and no retry."""
    return isinstance(exc, EntryTooLarge)
