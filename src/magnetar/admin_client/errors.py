"""Errors of the admin REST client: one class per HTTP status the admin API answers.

Every class derives from :class:`AdminError` (a :class:`~magnetar.common.errors.MagnetarError`)
and, where one exists, from the project-wide class of the same meaning, so ``except
AuthorizationError`` catches a 403 as it catches a refused binary-protocol request, and
``retriable`` says whether asking again may help. :func:`error_for_status` picks the class;
the message is the server's ``reason`` (Pulsar's ``{"reason": ...}`` body).
"""

from __future__ import annotations

import json

from magnetar.common.errors import (
    AuthenticationError,
    AuthorizationError,
    MagnetarError,
    NotAllowed,
    ServiceNotReady,
    TooManyRequests,
)

REASON_CHARS_MAX = 500
"""Bound on a reason taken from a body that is not Pulsar's JSON (an HTML error page)."""


class AdminError(MagnetarError):
    """Root of the admin REST client's errors."""


class AdminUnreachable(AdminError):
    """No host of the service URL answered: connection refused, unknown host, timed out."""

    retriable = True


class AdminHttpError(AdminError):
    """The admin service answered with an error status (``status``, its ``reason``)."""

    def __init__(self, method: str, url: str, status: int, reason: str) -> None:
        super().__init__(
            f"{reason} (HTTP {status})" if reason else f"HTTP {status} for {method} {url}"
        )
        self.method = method
        self.url = url
        self.status = status
        self.reason = reason


class AdminBadRequest(AdminHttpError):
    """400: the request's arguments are invalid."""


class AdminUnauthenticated(AdminHttpError, AuthenticationError):
    """401: the credentials were missing or refused."""


class AdminForbidden(AdminHttpError, AuthorizationError):
    """403: the role may not do this."""


class AdminNotFound(AdminHttpError):
    """404: the tenant, namespace, topic or other resource does not exist."""


class AdminNotAllowed(AdminHttpError, NotAllowed):
    """405: the operation does not apply to this resource (e.g. a partitioned topic)."""


class AdminConflict(AdminHttpError):
    """409: the resource already exists, or a conflicting operation is under way."""


class AdminPreconditionFailed(AdminHttpError):
    """412: the resource is in a state that forbids it (a non-empty namespace, clients)."""


class AdminTooManyRequests(AdminHttpError, TooManyRequests):
    """429: rate limited; try again later."""

    retriable = True


class AdminServiceUnavailable(AdminHttpError, ServiceNotReady):
    """503: the broker cannot serve it now (starting, ownership moving); try again."""


_BY_STATUS: dict[int, type[AdminHttpError]] = {
    400: AdminBadRequest,
    401: AdminUnauthenticated,
    403: AdminForbidden,
    404: AdminNotFound,
    405: AdminNotAllowed,
    409: AdminConflict,
    412: AdminPreconditionFailed,
    429: AdminTooManyRequests,
    503: AdminServiceUnavailable,
}


def error_for_status(method: str, url: str, status: int, body: bytes) -> AdminHttpError:
    """The error for an answer with ``status`` (>= 400) and ``body``."""
    cls = _BY_STATUS.get(status, AdminHttpError)
    return cls(method, url, status, reason_of(body))


def reason_of(body: bytes) -> str:
    """The ``reason`` of an error body: Pulsar's ``{"reason": ...}``, FastAPI's
    ``{"detail": ...}``, or the body's text on one line, cut to :data:`REASON_CHARS_MAX`."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:REASON_CHARS_MAX]
    if isinstance(doc, dict):
        for key in ("reason", "detail", "message", "error"):
            value = doc.get(key)
            if isinstance(value, str):
                return value
            if value is not None:
                return json.dumps(value)
    return " ".join(text.split())[:REASON_CHARS_MAX]
