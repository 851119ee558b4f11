"""Errors raised by the ledger client (defined with the bookie's, one hierarchy).

Which calls raise what:

* ``LedgerClient.create``: :class:`NotEnoughBookies`, ``MetadataError``;
* ``LedgerHandle.add``: :class:`EntryTooLarge` (before sending), :class:`LedgerClosed`,
  :class:`LedgerFenced` (a recovery fenced the ledger), :class:`NotEnoughBookies` (no
  replacement for a failed bookie);
* ``LedgerHandle.read``: :class:`NoSuchEntry` (beyond the last confirmed entry),
  :class:`BookieUnavailable` (no replica answered);
* ``LedgerClient.open`` / ``delete``: :class:`NoSuchLedger`; recovery:
  :class:`LedgerRecoveryError` (too few bookies reachable to decide the last entry).
"""

from magnetar.bookie.errors import (
    BadRequest,
    BookieError,
    BookieReadOnly,
    BookieUnavailable,
    DigestMismatch,
    EntryTooLarge,
    LedgerClosed,
    LedgerFenced,
    LedgerRecoveryError,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
)

__all__ = [
    "BadRequest",
    "BookieError",
    "BookieReadOnly",
    "BookieUnavailable",
    "DigestMismatch",
    "EntryTooLarge",
    "LedgerClosed",
    "LedgerFenced",
    "LedgerRecoveryError",
    "NoSuchEntry",
    "NoSuchLedger",
    "NotEnoughBookies",
]
