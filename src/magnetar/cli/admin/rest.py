"""A small blocking client of the admin REST API (Pulsar's ``/admin/v2`` paths, §8.1).

Standard library only (``urllib.request``), one request per call, each bounded by
``timeout_s``. Redirects (307/308 to the owner broker) are followed for every method, at
most :data:`REDIRECTS_MAX` times.

Errors raised by :meth:`AdminRest.request`:

* :class:`AdminHttpError` — the server answered 4xx/5xx; ``reason`` is the server's
  ``{"reason": ...}`` (or FastAPI's ``{"detail": ...}``, or the raw body);
* :class:`AdminUnreachable` — no answer: connection refused, unknown host, timeout.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from magnetar.common.errors import MagnetarError

REDIRECTS_MAX = 5
ERROR_BODY_MAX_BYTES = 64 * 1024


class AdminError(MagnetarError):
    """Root of the admin CLI's REST errors."""


class AdminHttpError(AdminError):
    """The admin service answered with an error status."""

    def __init__(self, method: str, url: str, status: int, reason: str) -> None:
        super().__init__(
            f"{reason} (HTTP {status})" if reason else f"HTTP {status} for {method} {url}"
        )
        self.status = status
        self.reason = reason


class AdminUnreachable(AdminError):
    """The admin service could not be reached at all."""

    retriable = True


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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _reason_of(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:500]
    if isinstance(doc, dict):
        for key in ("reason", "detail", "message", "error"):
            value = doc.get(key)
            if isinstance(value, str):
                return value
            if value is not None:
                return json.dumps(value)
    return " ".join(text.split())[:500]


class AdminRest:
    """The admin REST API at ``base_url`` (``http://host:8080``)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 30.0,
        auth_token: str | None = None,
        authorization: str | None = None,
    ) -> None:
        """``authorization`` is the ``Authorization`` header sent with every request
        (``Bearer <auth_token>`` when only a token is given)."""
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise AdminError(f"invalid admin URL {base_url!r} (expected http://host:port)")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._authorization = authorization or (f"Bearer {auth_token}" if auth_token else None)
        self._opener = urllib.request.build_opener(_NoRedirect())

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bool = False,
        form: list[FormPart] | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON (None for an empty body), or a
        :class:`RawResponse` if ``raw``. ``body`` is sent as JSON unless it is None;
        ``form`` is sent as ``multipart/form-data`` instead (uploads)."""
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(
                {k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()}
            )
        data = None if body is None else json.dumps(body).encode()
        content_type = "application/json"
        if form is not None:
            content_type, data = encode_form(form)
        for _ in range(REDIRECTS_MAX + 1):
            req = urllib.request.Request(url, data=data, method=method)
            req.add_header("Accept", "application/json")
            if data is not None:
                req.add_header("Content-Type", content_type)
            if self._authorization:
                req.add_header("Authorization", self._authorization)
            try:
                with self._opener.open(req, timeout=self.timeout_s) as resp:
                    payload: bytes = resp.read()
                    if raw:
                        return RawResponse(payload, dict(resp.headers.items()))
                    if not payload.strip():
                        return None
                    try:
                        return json.loads(payload)
                    except ValueError:
                        return payload.decode("utf-8", errors="replace")
            except urllib.error.HTTPError as e:
                location = e.headers.get("Location") if e.headers else None
                if e.code in (301, 302, 303, 307, 308) and location:
                    url = urllib.parse.urljoin(url, location)
                    continue
                reason = _reason_of(e.read(ERROR_BODY_MAX_BYTES))
                raise AdminHttpError(method, url, e.code, reason) from None
            except urllib.error.URLError as e:
                cause = e.reason
                what = cause.strerror if isinstance(cause, OSError) and cause.strerror else cause
                raise AdminUnreachable(
                    f"cannot reach the admin service at {self.base_url}: {what}"
                ) from None
            except TimeoutError:
                raise AdminUnreachable(
                    f"the admin service at {self.base_url} did not answer within {self.timeout_s:g} s"
                ) from None
            except (ConnectionError, OSError) as e:
                raise AdminUnreachable(
                    f"connection to the admin service at {self.base_url} failed: {e}"
                ) from None
        raise AdminError(f"too many redirects for {method} {path}")

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def put(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("PUT", path, body, query=query or None)

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.request("POST", path, body, query=query or None)

    def delete(self, path: str, **query: Any) -> Any:
        return self.request("DELETE", path, query=query or None)
