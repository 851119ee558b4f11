"""The answer to a request whose handling failed, whatever the failure was.

Every request the broker receives carries a ``request_id`` and the client waits for an
answer to it; a request that raised and went unanswered leaves the client waiting until its
own operation timeout. :func:`failure_reply` turns any exception into the answer the client
expects for that command: LOOKUP and PARTITIONED_METADATA are answered with their own
response type marked ``Failed`` (that is how Pulsar answers them), GET_SCHEMA and
GET_OR_CREATE_SCHEMA with their response's error fields, everything else with ERROR.

A :class:`~magnetar.common.errors.MagnetarError` is answered with its wire code and message,
except :class:`~magnetar.metadata.store.SessionExpired`: a request that ran into the end of
this broker's metadata session is answered ServiceNotReady, as every request for a topic is
once the session is lost (the broker can no longer vouch for the topic; the client looks
it up again and finds the owner), not with the store's MetadataError.
Anything else is a bug: it is logged with its traceback and answered ``UnknownError``
"Internal error: <class>", without the exception's text (which may hold internal paths).
"""

from __future__ import annotations

import logging

from magnetar.common.errors import MagnetarError, ServerError
from magnetar.metadata.store import SessionExpired
from magnetar.protocol import (
    Command,
    Error,
    GetOrCreateSchema,
    GetOrCreateSchemaResponse,
    GetSchema,
    GetSchemaResponse,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    MetadataResult,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
)

log = logging.getLogger(__name__)

MESSAGE_LENGTH_MAX_CHARS = 1024
"""Error messages are cut to this length (they may quote a client's long name)."""


def failure(exc: BaseException, what: str) -> tuple[ServerError, str]:
    """The wire code and message answering a request that raised ``exc``; logs unexpected
    exceptions (``what`` says which request, for the log)."""
    if isinstance(exc, SessionExpired):
        code = ServerError.ServiceNotReady
        message = f"this broker lost its metadata session ({exc.message}); look it up again"
    elif isinstance(exc, MagnetarError):
        code, message = exc.code, exc.message
    else:
        log.error("%s failed", what, exc_info=exc)
        code, message = ServerError.UnknownError, f"Internal error: {type(exc).__name__}"
    # Text that arrived as non-UTF-8 bytes (surrogate escapes) cannot be encoded back.
    message = message[:MESSAGE_LENGTH_MAX_CHARS].encode("utf-8", "backslashreplace").decode()
    return code, message


def failure_reply(cmd: Command, exc: BaseException) -> Command | None:
    """The answer to request ``cmd`` that raised ``exc``; None if ``cmd`` has no
    ``request_id`` (nothing to answer: the caller deals with ``exc``)."""
    request_id = getattr(cmd, "request_id", None)
    if not isinstance(request_id, int):
        return None
    code, message = failure(exc, cmd.TYPE.name)
    match cmd:
        case LookupTopic():
            return LookupTopicResponse(
                request_id=request_id, response=LookupResult.Failed, error=code, message=message
            )
        case PartitionedTopicMetadata():
            return PartitionedTopicMetadataResponse(
                request_id=request_id, response=MetadataResult.Failed, error=code, message=message
            )
        case GetSchema():
            return GetSchemaResponse(request_id=request_id, error_code=code, error_message=message)
        case GetOrCreateSchema():
            return GetOrCreateSchemaResponse(
                request_id=request_id, error_code=code, error_message=message
            )
        case _:
            return Error(request_id=request_id, error=code, message=message)
