"""The typed admin REST client (Pulsar's ``PulsarAdmin``), used by the CLI, the Functions
Worker, the Spark source and the brokers themselves. Standard library only; importing it
loads no server code. See ``docs/admin.md``."""

from magnetar.admin_client.client import (
    AdminClient,
    FormPart,
    RawResponse,
    encode_form,
    topic_path,
)
from magnetar.admin_client.errors import (
    AdminBadRequest,
    AdminConflict,
    AdminError,
    AdminForbidden,
    AdminHttpError,
    AdminNotAllowed,
    AdminNotFound,
    AdminPreconditionFailed,
    AdminServiceUnavailable,
    AdminTooManyRequests,
    AdminUnauthenticated,
    AdminUnreachable,
)
from magnetar.admin_client.service_url import HostPort, ServiceUrl, parse_service_url
from magnetar.admin_client.transport import HttpAnswer

__all__ = [
    "AdminBadRequest",
    "AdminClient",
    "AdminConflict",
    "AdminError",
    "AdminForbidden",
    "AdminHttpError",
    "AdminNotAllowed",
    "AdminNotFound",
    "AdminPreconditionFailed",
    "AdminServiceUnavailable",
    "AdminTooManyRequests",
    "AdminUnauthenticated",
    "AdminUnreachable",
    "FormPart",
    "HostPort",
    "HttpAnswer",
    "RawResponse",
    "ServiceUrl",
    "encode_form",
    "parse_service_url",
    "topic_path",
]
