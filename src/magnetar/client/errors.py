"""Errors the client raises, all under :class:`magnetar.common.errors.MagnetarError`.

Errors that come from the broker are the shared classes of :mod:`magnetar.common.errors`
(built with :func:`~magnetar.common.errors.error_for_code`); the classes here are the
client's own conditions. Names follow the official client's exceptions where one exists
(``pulsar.Timeout``, ``pulsar.AlreadyClosed``, ``pulsar.ProducerQueueIsFull`` ...).
"""

from __future__ import annotations

from magnetar.common.errors import MagnetarError


class ClientError(MagnetarError):
    """Root of the client's own errors."""


class Timeout(ClientError):
    """An operation did not complete within its timeout (``operation_timeout_ms``,
    ``send_timeout_ms`` or a ``receive`` timeout)."""

    retriable = True


class ConnectError(ClientError):
    """A connection to a broker could not be established or was lost mid-request."""

    retriable = True
    refresh_lookup = True


class TlsHandshakeError(ConnectError):
    """The broker's certificate was refused: it does not chain to a trusted CA
    (``tls_trust_certs_file_path``) or, with ``tls_validate_hostname``, does not name the
    host connected to. Not retriable: retrying cannot change the certificate's verdict."""

    retriable = False


class AlreadyClosed(ClientError):
    """The client, producer, consumer or reader was closed."""


class ProducerQueueIsFull(ClientError):
    """``send_async`` found ``max_pending_messages`` messages pending (and the caller asked
    not to wait)."""


class MessageTooBig(ClientError):
    """A message exceeds the broker's ``max_message_size`` and chunking is disabled."""


class InvalidConfiguration(ClientError):
    """An option or a combination of options is not supported."""


class LookupError_(ClientError):
    """A topic lookup failed or redirected too many times (``TooManyLookupRequestException``)."""


class NotConnected(ClientError):
    """The operation needs a connection the producer or consumer does not currently have."""

    retriable = True


class CumulativeAcknowledgementNotAllowed(ClientError):
    """Cumulative acks are refused on Shared and Key_Shared subscriptions."""


class SchemaSerializationError(ClientError):
    """A value does not match the schema it is sent or read with."""
