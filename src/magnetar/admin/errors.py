"""Admin REST errors: each class carries its HTTP status; every error reaches the client as
JSON ``{"reason": "..."}`` (Pulsar's shape), and no request can stop the process.

:func:`http_error` maps errors raised by lower layers (topic names, metadata store, policies,
managed ledger) to a status, so route code only raises the :class:`RestError` subclasses
for decisions the admin layer makes itself.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.broker.policies import PolicyError
from magnetar.common.errors import (
    InvalidSubscriptionName,
    InvalidTopicName,
    ListenerNotFound,
    MagnetarError,
    ServiceNotReady,
    SubscriptionNotFound,
    TopicNotFound,
    TopicTerminated,
)
from magnetar.managed_ledger.errors import CursorNotFound, ManagedLedgerTerminated
from magnetar.metadata.store import NodeExists, NotFound


class RestError(MagnetarError):
    """An admin request failed with HTTP ``status``; the message is the ``reason``."""

    status: ClassVar[int] = 500


class BadRequest(RestError):
    """Malformed input: bad JSON, a value of the wrong type, an invalid name."""

    status = 400


class Unauthenticated(RestError):
    """Credentials missing or refused."""

    status = 401


class Forbidden(RestError):
    """The role may not do this."""

    status = 403


class ResourceNotFound(RestError):
    status = 404


class MethodNotAllowed(RestError):
    """The operation does not apply to this kind of resource (e.g. peeking a partitioned
    topic)."""

    status = 405


class Conflict(RestError):
    """The resource already exists."""

    status = 409


class PreconditionFailed(RestError):
    """The resource is in a state that forbids the operation (not empty, consumers
    connected, unknown cluster)."""

    status = 412


def http_error(exc: BaseException) -> tuple[int, str]:
    """The status and reason for ``exc``. Anything not classified is a 500 whose reason
    names only the error's class: its message may hold internal metadata paths."""
    if isinstance(exc, RestError):
        return exc.status, exc.message
    if isinstance(exc, InvalidTopicName | InvalidSubscriptionName | PolicyError):
        return 400, str(exc)
    if isinstance(exc, TopicNotFound):  # "Topic … does not exist", "Namespace … does not exist"
        return 404, exc.message or "Topic not found"
    if isinstance(exc, SubscriptionNotFound | CursorNotFound):
        return 404, "Subscription not found"
    if isinstance(exc, NotFound):
        return 404, "Not found"
    if isinstance(exc, NodeExists):
        return 409, "Already exists"
    if isinstance(exc, ManagedLedgerTerminated | TopicTerminated):
        return 412, "Topic is terminated"
    if isinstance(exc, ListenerNotFound):  # Pulsar's status and words for a lookup
        return 500, exc.message
    if isinstance(exc, ServiceNotReady):
        return 503, "Service not ready, try again"
    return 500, f"Internal error: {exc.__class__.__name__}"
