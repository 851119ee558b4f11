"""Errors of the storage layer (bookies and the ledger client).

Each bookie response status maps to exactly one class (:func:`error_for_status`); the
ledger client raises these to its users, re-exported as ``magnetar.ledger.errors``.
"""

from __future__ import annotations

from magnetar.bookie.protocol import bookie_pb2 as pb
from magnetar.common.errors import MagnetarError, PersistenceError


class BookieError(PersistenceError):
    """A bookie failed a request or became unreachable. Retriable on another bookie."""


class BookieUnavailable(BookieError):
    """The connection to a bookie failed, closed, or a request timed out."""


class BookieReadOnly(BookieError):
    """The bookie is in read-only mode (disk nearly full): it rejects adds, serves reads."""


class LedgerFenced(PersistenceError):
    """The ledger was fenced by a recovery: this writer may no longer add to it.

    Raised by ``LedgerHandle.add`` and ``close`` once any bookie reports the fence or the
    ledger's metadata shows it is in recovery or closed by someone else. Not retriable."""

    retriable = False


class LedgerClosed(PersistenceError):
    """An add to a ledger that is closed (or being closed) by this handle, or a read-only
    handle."""

    retriable = False


class NoSuchLedger(PersistenceError):
    """The ledger does not exist (no metadata, or this bookie holds nothing of it)."""

    retriable = False


class NoSuchEntry(PersistenceError):
    """The entry does not exist (beyond the last entry, or not stored on this bookie)."""

    retriable = False


class NotEnoughBookies(PersistenceError):
    """Fewer writable bookies are available than the ensemble needs. Retriable later."""


class EntryTooLarge(PersistenceError):
    """An entry above the size limit. Raised before anything is sent."""

    retriable = False


class BadRequest(PersistenceError):
    """The bookie rejected a request as malformed (bad checksum, unknown operation)."""

    retriable = False


class DigestMismatch(PersistenceError):
    """An entry read back does not match its stored CRC32C: try another replica."""


class CookieMismatch(MagnetarError):
    """The data directory belongs to another bookie id (or the registered cookie belongs to
    another data directory): the bookie refuses to start."""


class JournalCorrupt(MagnetarError):
    """Journal replay found a damaged record followed by valid ones (not a torn tail): the
    bookie refuses to start unless told to skip invalid records."""


class IndexCorrupt(MagnetarError):
    """The index file the checkpoint names is missing or shorter than the checkpoint says:
    files the bookie had synced are gone, so it refuses to start rather than serve without
    the ledgers they held."""


class LedgerRecoveryError(PersistenceError):
    """Recovery could not reach enough bookies to decide the ledger's last entry."""


_BY_STATUS: dict[int, type[PersistenceError]] = {
    pb.NO_SUCH_LEDGER: NoSuchLedger,
    pb.NO_SUCH_ENTRY: NoSuchEntry,
    pb.FENCED: LedgerFenced,
    pb.READ_ONLY: BookieReadOnly,
    pb.TOO_LARGE: EntryTooLarge,
    pb.BAD_REQUEST: BadRequest,
    pb.INTERNAL_ERROR: BookieError,
}

STATUS_BY_ERROR: dict[type[PersistenceError], int] = {v: k for k, v in _BY_STATUS.items()}


def error_for_status(status: int, message: str) -> PersistenceError:
    """The error class for a non-OK response status (``BookieError`` if unknown)."""
    return _BY_STATUS.get(status, BookieError)(message or f"bookie status {status}")
