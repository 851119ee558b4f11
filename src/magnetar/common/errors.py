"""One error hierarchy for the whole project.

Every error Magnetar raises on purpose derives from :class:`MagnetarError`. Each class
declares three facts as class attributes, so retry loops need no policy tables:

* ``code`` — the Pulsar wire ``ServerError`` sent to clients when this error ends a request;
* ``retriable`` — the same request may succeed if tried again later;
* ``refresh_lookup`` — the caller must redo the topic lookup before retrying (ownership moved).

Packages lower in the stack (metadata, bookie, ledger) subclass these; the broker maps any
``MagnetarError`` to a wire error with :func:`wire_error`, and the client turns a wire error
back into the matching class with :func:`error_for_code`.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ServerError(enum.IntEnum):
    """Pulsar's ``ServerError`` enum (PulsarApi.proto), values as on the wire."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


class MagnetarError(Exception):
    """Root of every error Magnetar raises deliberately.

    Subclasses override the class attributes; instances carry a human-readable message.
    """

    code: ClassVar[ServerError] = ServerError.UnknownError
    retriable: ClassVar[bool] = False
    refresh_lookup: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)

    @property
    def message(self) -> str:
        return str(self)


class ProtocolError(MagnetarError):
    """Bytes on a connection that break the wire format: bad framing, an oversized frame,
    unparsable protobuf, a missing required field. The connection must be closed."""

    code = ServerError.UnknownError


class FrameTooLarge(ProtocolError):
    """A frame announced a size above the configured maximum. Raised before buffering it."""


class ChecksumMismatch(MagnetarError):
    """A payload's CRC32C does not match the checksum carried in the frame."""

    code = ServerError.ChecksumError


class MetadataError(MagnetarError):
    """The metadata store failed or refused an operation.

    Retriable, as Pulsar's Java client treats the wire ``MetadataError``: a broker answers
    it while its metadata session is being re-established or its ownership is moving, and
    the same request succeeds once the store (or another broker) answers again."""

    code = ServerError.MetadataError
    retriable = True


class PersistenceError(MagnetarError):
    """Storage could not persist or read data (bookies, ledgers)."""

    code = ServerError.PersistenceError
    retriable = True


class ServiceNotReady(MagnetarError):
    """The service is starting, stopping, or moving ownership; try again."""

    code = ServerError.ServiceNotReady
    retriable = True
    refresh_lookup = True


class ListenerNotFound(MagnetarError):
    """A lookup named an advertised listener the broker does not have.

    On the wire this is ServiceNotReady with the text ``the broker do not have <name>
    listener`` (Pulsar's code and words; the official C++ client recognises that text).
    Unlike ServiceNotReady it is not retriable: asking again cannot create the listener, so
    :func:`error_for_code` turns that wire error back into this class by its text.
    """

    code = ServerError.ServiceNotReady

    @classmethod
    def for_listener(cls, name: str) -> ListenerNotFound:
        return cls(f"the broker do not have {name} listener")

    @classmethod
    def matches(cls, message: str) -> bool:
        """Whether ``message`` is this error's wire text."""
        return message.startswith("the broker do not have ") and message.endswith(" listener")


class AuthenticationError(MagnetarError):
    code = ServerError.AuthenticationError


class AuthorizationError(MagnetarError):
    code = ServerError.AuthorizationError


class TopicNotFound(MagnetarError):
    code = ServerError.TopicNotFound


class SubscriptionNotFound(MagnetarError):
    code = ServerError.SubscriptionNotFound


class ConsumerNotFound(MagnetarError):
    code = ServerError.ConsumerNotFound


class InvalidTopicName(MagnetarError):
    """A topic, tenant, namespace or cluster name breaks the naming rules
    (:mod:`magnetar.common.names`)."""

    code = ServerError.InvalidTopicName


class TopicNameNotAllowed(InvalidTopicName):
    """A topic name that Pulsar's own naming rules accept but Magnetar refuses (``.``,
    ``..``, control characters, text that is not UTF-8, over-long names; see
    :mod:`magnetar.common.names`).

    Answered ``NotAllowedError`` rather than ``InvalidTopicName``: the official C++-based
    clients treat ``InvalidTopicName`` from a lookup as retriable and would retry until
    their operation timeout, reporting only "TimeOut"; ``NotAllowedError`` fails at once
    with the reason."""

    code = ServerError.NotAllowedError


class InvalidSubscriptionName(MagnetarError):
    """A subscription name breaks the naming rules (:mod:`magnetar.common.names`).

    The wire has no dedicated code; Pulsar's broker answers ``ProducerBusy`` (its
    ``NamingException``), which the official clients report as a busy producer. Magnetar
    answers ``NotAllowedError``, which they report as "not allowed", with the reason in the
    message."""

    code = ServerError.NotAllowedError


class ConsumerBusy(MagnetarError):
    code = ServerError.ConsumerBusy


class ProducerBusy(MagnetarError):
    code = ServerError.ProducerBusy


class ProducerFenced(MagnetarError):
    code = ServerError.ProducerFenced


class ConsumerAssignError(MagnetarError):
    code = ServerError.ConsumerAssignError


class TopicTerminated(MagnetarError):
    code = ServerError.TopicTerminatedError


class NotAllowed(MagnetarError):
    code = ServerError.NotAllowedError


class TooManyRequests(MagnetarError):
    code = ServerError.TooManyRequests
    retriable = True


class IncompatibleSchema(MagnetarError):
    code = ServerError.IncompatibleSchema


class ProducerBlockedQuotaExceeded(MagnetarError):
    code = ServerError.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(MagnetarError):
    code = ServerError.ProducerBlockedQuotaExceededException


class UnsupportedVersion(MagnetarError):
    code = ServerError.UnsupportedVersionError


def _by_code() -> dict[ServerError, type[MagnetarError]]:
    table: dict[ServerError, type[MagnetarError]] = {}
    for cls in (
        MetadataError,
        PersistenceError,
        AuthenticationError,
        AuthorizationError,
        ConsumerBusy,
        ServiceNotReady,
        ProducerBlockedQuotaExceeded,
        ProducerBlockedQuotaExceededException,
        ChecksumMismatch,
        UnsupportedVersion,
        TopicNotFound,
        SubscriptionNotFound,
        ConsumerNotFound,
        TooManyRequests,
        TopicTerminated,
        ProducerBusy,
        InvalidTopicName,
        IncompatibleSchema,
        ConsumerAssignError,
        NotAllowed,
        ProducerFenced,
    ):
        table[cls.code] = cls
    return table


_ERROR_BY_CODE = _by_code()


def error_for_code(code: int, message: str) -> MagnetarError:
    """Build the error class matching a wire ``ServerError`` (``MagnetarError`` if unknown)."""
    try:
        cls = _ERROR_BY_CODE[ServerError(code)]
    except (KeyError, ValueError):
        return MagnetarError(message)
    if cls is ServiceNotReady and ListenerNotFound.matches(message):
        return ListenerNotFound(message)
    return cls(message)


def wire_error(exc: BaseException) -> tuple[ServerError, str]:
    """The wire code and message to send for ``exc``; unexpected exceptions are UnknownError."""
    if isinstance(exc, MagnetarError):
        return exc.code, exc.message
    return ServerError.UnknownError, f"{type(exc).__name__}: {exc}"
