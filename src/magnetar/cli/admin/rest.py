"""The admin CLI's REST client: :class:`magnetar.admin_client.AdminClient` under the names the
command modules use (``rest().get(path)``, ``AdminHttpError``, ``RawResponse``, ``FormPart``).

``--url`` takes a list of hosts (``http://h1:8080,h2:8080``): a host that cannot be connected
to is passed over for the next, within the one ``--timeout`` of each command.
"""

from __future__ import annotations

from magnetar.admin_client import (
    AdminClient,
    AdminError,
    AdminHttpError,
    AdminUnreachable,
    FormPart,
    RawResponse,
    encode_form,
)

AdminRest = AdminClient

__all__ = [
    "AdminError",
    "AdminHttpError",
    "AdminRest",
    "AdminUnreachable",
    "FormPart",
    "RawResponse",
    "encode_form",
]
