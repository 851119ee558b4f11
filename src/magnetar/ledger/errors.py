"""Errors raised by the ledger client: the bookie protocol's (one class per refusal status,
:mod:`magnetar.bookie_protocol.errors`) and the client's own, one hierarchy.

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

from magnetar.bookie_protocol.errors import (
    BadRequest,
    BookieError,
    BookieReadOnly,
    BookieUnavailable,
    EntryTooLarge,
    LedgerFenced,
    NoSuchEntry,
    NoSuchLedger,
)
from magnetar.common.errors import PersistenceError


class LedgerClosed(PersistenceError):
    """An add to a ledger that is closed (or being closed) by this handle, or a read-only
    handle."""

    retriable = False


class NotEnoughBookies(PersistenceError):
    """Fewer writable bookies are available than the ensemble needs. Retriable later."""


class DigestMismatch(PersistenceError):
    """An entry read back does not match its stored CRC32C: try another replica."""


class LedgerRecoveryError(PersistenceError):
    """Recovery could not reach enough bookies to decide the ledger's last entry."""


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
