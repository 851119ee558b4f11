"""Errors of the bookie protocol: one class per refusal status, and the transport's own.

A bookie refuses a request with a :class:`~magnetar.bookie_protocol.codec.Status`; each
status but OK is one class here, which declares it as ``status`` (the server answers
``type(error).status`` and ``str(error)``), and :func:`error_for_status` turns a status and
message back into the class. :class:`BookieUnavailable` has no status: a transport raises it
when the bookie cannot answer at all. The ledger client re-exports these with its own
(``magnetar.ledger.errors``).
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.bookie_protocol.codec import Status
from magnetar.common.errors import PersistenceError


class BookieError(PersistenceError):
    """A bookie failed a request (INTERNAL_ERROR: a failed journal write or read, an index
    that cannot be read back) or became unreachable. Retriable on another bookie."""

    status: ClassVar[Status] = Status.INTERNAL_ERROR


class BookieUnavailable(BookieError):
    """The connection to a bookie failed, closed, or a request timed out; or an in-process
    bookie is not serving. Never sent by a bookie."""


class BookieReadOnly(BookieError):
    """The bookie is in read-only mode (disk nearly full, or a storage fault): it rejects
    adds, serves reads."""

    status = Status.READ_ONLY


class LedgerFenced(PersistenceError):
    """The ledger was fenced by a recovery: this writer may no longer add to it.

    Raised by ``LedgerHandle.add`` and ``close`` once any bookie reports the fence or the
    ledger's metadata shows it is in recovery or closed by someone else. Not retriable."""

    status: ClassVar[Status] = Status.FENCED
    retriable = False


class NoSuchLedger(PersistenceError):
    """The ledger does not exist (no metadata, or this bookie holds nothing of it)."""

    status: ClassVar[Status] = Status.NO_SUCH_LEDGER
    retriable = False


class NoSuchEntry(PersistenceError):
    """The entry does not exist (beyond the last entry, or not stored on this bookie)."""

    status: ClassVar[Status] = Status.NO_SUCH_ENTRY
    retriable = False


class EntryTooLarge(PersistenceError):
    """An entry above the size limit. The ledger client raises it before anything is sent;
    a bookie answers TOO_LARGE."""

    status: ClassVar[Status] = Status.TOO_LARGE
    retriable = False


class BadRequest(PersistenceError):
    """The bookie rejected a request as malformed (bad checksum, bad entry id, unknown
    operation)."""

    status: ClassVar[Status] = Status.BAD_REQUEST
    retriable = False


StatusError = BookieError | LedgerFenced | NoSuchLedger | NoSuchEntry | EntryTooLarge | BadRequest
"""An error a bookie answers with a status (its class's ``status``)."""

_BY_STATUS: dict[int, type[StatusError]] = {
    cls.status: cls
    for cls in (NoSuchLedger, NoSuchEntry, LedgerFenced, BookieReadOnly, EntryTooLarge, BadRequest)
}


def error_for_status(status: int, message: str) -> StatusError:
    """The error for a non-OK response status (``BookieError`` if unknown)."""
    return _BY_STATUS.get(status, BookieError)(message or f"bookie status {status}")


__all__ = [
    "BadRequest",
    "BookieError",
    "BookieReadOnly",
    "BookieUnavailable",
    "EntryTooLarge",
    "LedgerFenced",
    "NoSuchEntry",
    "NoSuchLedger",
    "StatusError",
    "error_for_status",
]
