"""Replicated ledgers over bookies: the storage client used by brokers.

Public API: :class:`LedgerClient` (create / open / delete), :class:`LedgerHandle` (add,
read, close, ``last_add_confirmed``), :class:`Entry`, :class:`LedgerMetadata`, and the
errors in :mod:`magnetar.ledger.errors`. See ``docs/storage.md``.
"""

from magnetar.ledger.client import LedgerClient, LedgerClientConfig
from magnetar.ledger.errors import (
    BookieUnavailable,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    LedgerRecoveryError,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
)
from magnetar.ledger.handle import LedgerHandle
from magnetar.ledger.metadata import LedgerMetadata, LedgerState
from magnetar.ledger.replica_read import Entry

__all__ = [
    "BookieUnavailable",
    "Entry",
    "EntryTooLarge",
    "LedgerClient",
    "LedgerClientConfig",
    "LedgerClosed",
    "LedgerFenced",
    "LedgerHandle",
    "LedgerMetadata",
    "LedgerRecoveryError",
    "LedgerState",
    "NoSuchEntry",
    "NoSuchLedger",
    "NotEnoughBookies",
]
