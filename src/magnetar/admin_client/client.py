"""The admin REST client (Pulsar's ``PulsarAdmin``): Pulsar's ``/admin/v2`` and ``/admin/v3``
paths over :class:`~magnetar.admin_client.transport.Transport` (multi-host service URLs,
redirects, one deadline per call).

Two levels:

* :meth:`AdminClient.request` (and ``get``/``put``/``post``/``delete``): any path; the
  decoded JSON answer (None for an empty body), a :class:`RawResponse` when ``raw``. An
  error status raises the :class:`~magnetar.admin_client.errors.AdminHttpError` subclass of
  that status (:func:`~magnetar.admin_client.errors.error_for_status`).
* Typed methods for what the project's callers ask (tenant info, namespace list and
  permissions, topic stats and internal stats, partitioned-topic metadata, deduplication,
  compaction, deleting a topic): same errors.

:meth:`AdminClient.exchange` is below both: the answer whatever its status, for callers that
pass answers on (a worker forwarding to its leader, a broker asking a partition's owner).

Credentials: ``authorization`` is the ``Authorization`` header sent with every request
(``Bearer <auth_token>`` when only a token is given; see
:meth:`magnetar.auth.client_credentials.ClientCredentials.http_authorization`); TLS through
``https://`` URLs and ``ssl_context``. Blocking; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from magnetar.admin_client.errors import AdminError, error_for_status
from magnetar.admin_client.service_url import ServiceUrl
from magnetar.admin_client.transport import (
    ANSWER_BYTES_MAX,
    CONNECT_TIMEOUT_S,
    HttpAnswer,
    Transport,
)
from magnetar.common.names import TopicName

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A non-JSON answer (peeked message payloads): body bytes and response headers."""

    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FormPart:
    """One part of a ``multipart/form-data`` body."""

    name: str
    data: bytes
    content_type: str = "application/json"
    file_name: str | None = None


def encode_form(parts: list[FormPart]) -> tuple[str, bytes]:
    """(Content-Type header, body) of a ``multipart/form-data`` request."""
    boundary = f"magnetar-{uuid.uuid4().hex}"
    out = bytearray()
    for part in parts:
        disposition = f'form-data; name="{part.name}"'
        if part.file_name is not None:
            safe = part.file_name.replace('"', "_").replace("\r", "_").replace("\n", "_")
            disposition += f'; filename="{safe}"'
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        out += f"Content-Type: {part.content_type}\r\n\r\n".encode()
        out += part.data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", bytes(out)


def topic_path(topic: str | TopicName, action: str = "") -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}/{local}[/{action}]`` of a topic (any
    spelling :class:`TopicName` accepts), the local name URL-quoted."""
    name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    path = (
        f"/admin/v2/{name.domain.value}/{name.tenant}/{name.namespace}/"
        f"{quote(name.local_name, safe='')}"
    )
    return f"{path}/{action}" if action else path


def _segment(text: str) -> str:
    return quote(text, safe="")


class AdminClient:
    """The admin REST API at ``service_url`` (``http://h1:8080[,h2:8080…]``)."""

    def __init__(
        self,
        service_url: str | ServiceUrl,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        auth_token: str | None = None,
        authorization: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
        answer_bytes_max: int = ANSWER_BYTES_MAX,
    ) -> None:
        """``headers`` go with every request (e.g. ``ClientCredentials.http_headers()``).
        Raises :class:`AdminError` for a malformed ``service_url``."""
        self.transport = Transport(
            service_url,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            ssl_context=ssl_context,
            answer_bytes_max=answer_bytes_max,
        )
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json", **(headers or {})}
        value = authorization or (f"Bearer {auth_token}" if auth_token else None)
        if value:
            self._headers["Authorization"] = value

    @property
    def service_url(self) -> str:
        return str(self.transport.service_url)

    # ------------------------------------------------------------------ generic

    def exchange(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        """The answer to one request, whatever its status (``headers`` add to or override
        the client's). Raises AdminUnreachable (nothing answered) or AdminError."""
        return self.transport.exchange(method, path, body, {**self._headers, **(headers or {})})

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        raw: bool = False,
        form: list[FormPart] | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON (None for an empty body; text when the
        body is not JSON), or a :class:`RawResponse` if ``raw``. ``body`` is sent as JSON
        unless it is None; ``form`` as ``multipart/form-data`` instead (uploads). Raises
        the AdminHttpError subclass of an error status, AdminUnreachable, AdminError."""
        if query:
            path += "?" + urlencode(
                {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
            )
        data = None if body is None else json.dumps(body).encode()
        headers: dict[str, str] = {}
        if form is not None:
            headers["Content-Type"], data = encode_form(form)
        elif data is not None:
            headers["Content-Type"] = "application/json"
        answer = self.exchange(method, path, data, headers)
        if answer.status >= 300:
            raise error_for_status(method, answer.url, answer.status, answer.body)
        if raw:
            return RawResponse(answer.body, answer.headers)
        if not answer.body.strip():
            return None
        try:
            return json.loads(answer.body)
        except ValueError:
            return answer.body.decode("utf-8", errors="replace")

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def put(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("PUT", path, body, query=query or None)

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("POST", path, body, query=query or None)

    def delete(self, path: str, **query: Any) -> Any:
        return self.request("DELETE", path, query=query or None)

    # ------------------------------------------------------------------ typed

    def tenant_info(self, tenant: str) -> dict[str, Any]:
        """TenantInfo (``adminRoles``, ``allowedClusters``). AdminNotFound if none."""
        return _object(self.get(f"/admin/v2/tenants/{_segment(tenant)}"), "tenant info")

    def namespaces(self, tenant: str) -> list[str]:
        """The tenant's namespaces as ``tenant/namespace``. AdminNotFound for no tenant."""
        got = self.get(f"/admin/v2/namespaces/{_segment(tenant)}")
        if not isinstance(got, list):
            raise AdminError(f"the namespaces of {tenant} are not a JSON list")
        return [str(n) for n in got]

    def namespace_permissions(self, tenant: str, namespace: str) -> dict[str, Any]:
        """Role -> granted actions on the namespace. AdminNotFound for no namespace."""
        got = self.get(f"/admin/v2/namespaces/{_segment(tenant)}/{_segment(namespace)}/permissions")
        return _object(got or {}, "namespace permissions")

    def topic_stats(self, topic: str | TopicName) -> dict[str, Any]:
        """TopicStats of a topic or one partition. AdminNotFound if not loaded anywhere."""
        return _object(self.get(topic_path(topic, "stats")), "topic stats")

    def topic_internal_stats(self, topic: str | TopicName) -> dict[str, Any]:
        """The managed ledger's internal stats (``ledgers[]``, cursors)."""
        return _object(self.get(topic_path(topic, "internalStats")), "internal stats")

    def partitions(self, topic: str | TopicName) -> int:
        """The partitioned topic's partition count (0: not partitioned)."""
        got = _object(self.get(topic_path(topic, "partitions")), "partitioned metadata")
        return int(got.get("partitions") or 0)

    def set_topic_deduplication(self, topic: str | TopicName, enabled: bool) -> None:
        """Set the topic-level ``deduplicationEnabled`` policy."""
        self.post(topic_path(topic, "deduplicationEnabled"), enabled)

    def trigger_compaction(self, topic: str | TopicName) -> None:
        """Start compacting the topic. AdminConflict while one already runs."""
        self.put(topic_path(topic, "compaction"))

    def delete_topic(self, topic: str | TopicName, *, force: bool = False) -> None:
        """Delete a non-partitioned topic or one partition."""
        self.delete(topic_path(topic), force=force)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AdminError(f"the {what} answer is not a JSON object")
    return value
