"""Errors raised by the managed ledger. Each says which calls raise it."""

from __future__ import annotations

from magnetar.common.errors import (
    MagnetarError,
    MetadataError,
    NotAllowed,
    PersistenceError,
    ProducerBlockedQuotaExceededException,
    ServerError,
    ServiceNotReady,
    TopicTerminated,
)


class ManagedLedgerError(PersistenceError):
    """A storage operation of the managed ledger failed (retriable)."""


class ManagedLedgerFenced(ManagedLedgerError):
    """Another process opened this managed ledger and fenced our ledger, or changed the
    metadata under us. Raised by ``add_entry`` and metadata updates; the ledger is then
    closed. Not retriable here: the new owner serves the topic (redo the lookup)."""

    code = ServerError.ServiceNotReady
    retriable = False
    refresh_lookup = True


class EntryTooLargeForStorage(NotAllowed):
    """``add_entry`` of an entry larger than the storage takes (the ledger client's
    ``entry_size_max_bytes``). Fails that append only, at once: nothing is stored, the
    current ledger stays as it is (no rollover) and later appends are unaffected. Never
    retriable: the same entry can never fit."""


class ManagedLedgerClosed(ServiceNotReady):
    """The managed ledger (or cursor) was closed; raised by every later call."""


class ManagedLedgerTerminated(TopicTerminated):
    """``add_entry`` after :meth:`ManagedLedger.terminate`."""


class MetadataConflict(MetadataError):
    """A versioned metadata update lost a race that retrying cannot fix."""


class InvalidCursorPosition(MagnetarError):
    """An acknowledgement, seek or reset names a position the log does not hold."""

    code = ServerError.NotAllowedError


class CursorNotFound(MagnetarError):
    """``delete_cursor``/``open_cursor`` of a name that does not exist (when required)."""

    code = ServerError.SubscriptionNotFound


class BacklogQuotaExceeded(ProducerBlockedQuotaExceededException):
    """``add_entry`` while a backlog quota with the ``producer_exception`` policy is
    exceeded."""


class OffloadNotConfigured(NotAllowed):
    """An offload was requested but no :class:`Offloader` is configured."""
