"""One HTTP exchange with an admin service of several hosts, bounded in time.

:meth:`Transport.exchange` sends one request and returns the answer whatever its status;
only "nothing answered" raises (:class:`~magnetar.admin_client.errors.AdminUnreachable`).
Its rules, as Pulsar's clients have them for a multi-host service URL:

* **Failover.** The hosts are tried in order, starting from the last one that answered; a
  host that cannot be connected to (refused, unknown, no route, connect timeout) is passed
  over for the next. Only a failure to *connect* moves on: once a request is sent it is
  never sent again elsewhere, so a change is not applied twice. When every host fails to
  connect the error names each host's cause.
* **Redirects** (301/302/303/307/308 to the topic's owner broker) are followed for every
  method, at most :data:`REDIRECTS_MAX` in a row. A redirect to an owner that cannot be
  connected to (it died; ownership is moving) is retried from the service hosts after
  :data:`OWNER_RETRY_DELAY_S`, until the deadline.
* **One deadline** of ``timeout_s`` covers the whole exchange (failover, redirects, the
  answer). Connecting to one host takes at most ``connect_timeout_s`` of it, so a host that
  drops packets cannot use up the budget of the others.
* **Bounded answers**: a body over ``answer_bytes_max`` raises
  :class:`~magnetar.admin_client.errors.AdminError`.

Blocking (``http.client``); async callers run it in a thread. Clock and sleep are injected.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from magnetar.admin_client.errors import AdminError, AdminUnreachable
from magnetar.admin_client.service_url import ServiceUrl, parse_service_url

REDIRECTS_MAX = 5
CONNECT_TIMEOUT_S = 5.0
"""Default bound on connecting to one host (a host that drops SYNs)."""
OWNER_RETRY_DELAY_S = 0.5
"""Wait before asking again when the owner a broker redirected to cannot be reached."""
ANSWER_BYTES_MAX = 64 * 1024 * 1024
"""Default bound on one answer's body (internal stats of a big partitioned topic)."""
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """An answer, any status: ``body`` bytes, ``headers`` (names as sent), final ``url``."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    url: str = ""

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), None)


class _NotConnected(Exception):
    """Connecting failed; the request was not sent."""


class Transport:
    """Exchanges with the service at ``service_url`` (see the module's rules)."""

    def __init__(
        self,
        service_url: str | ServiceUrl,
        *,
        timeout_s: float,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
        answer_bytes_max: int = ANSWER_BYTES_MAX,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Raises :class:`AdminError` for a malformed ``service_url``."""
        self.service_url = (
            service_url if isinstance(service_url, ServiceUrl) else parse_service_url(service_url)
        )
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.answer_bytes_max = answer_bytes_max
        self._ssl_context = ssl_context
        self._monotonic = monotonic
        self._sleep = sleep
        self._preferred = 0

    def exchange(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpAnswer:
        """Send ``method path`` (path and query, from the service URL's prefix) and return
        the final answer after redirects. Raises AdminUnreachable, or AdminError for too
        many redirects or an oversized answer."""
        deadline = self._monotonic() + self.timeout_s
        sent_headers = dict(headers or {})
        while True:
            answer = self._any_host(method, path, body, sent_headers, deadline)
            for _ in range(REDIRECTS_MAX):
                location = answer.header("Location")
                if answer.status not in _REDIRECT_STATUSES or not location:
                    return answer
                target = urljoin(answer.url, location)
                try:
                    answer = self._once(method, target, body, sent_headers, deadline)
                except _NotConnected as exc:
                    if self._monotonic() + OWNER_RETRY_DELAY_S >= deadline:
                        raise AdminUnreachable(
                            f"the owner broker at {_origin(target)} cannot be reached: {exc}"
                        ) from None
                    self._sleep(OWNER_RETRY_DELAY_S)
                    break
            else:
                if answer.status in _REDIRECT_STATUSES and answer.header("Location"):
                    raise AdminError(f"too many redirects for {method} {path}")
                return answer

    def _any_host(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        deadline: float,
    ) -> HttpAnswer:
        hosts = self.service_url.hosts
        causes: list[str] = []
        for step in range(len(hosts)):
            index = (self._preferred + step) % len(hosts)
            url = self.service_url.base_url(index) + path
            try:
                answer = self._once(method, url, body, headers, deadline)
            except _NotConnected as exc:
                causes.append(f"{hosts[index]}: {exc}" if len(hosts) > 1 else str(exc))
                continue
            self._preferred = index
            return answer
        raise AdminUnreachable(
            f"cannot reach the admin service at {self.service_url}: {'; '.join(causes)}"
        )

    def _once(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: dict[str, str],
        deadline: float,
    ) -> HttpAnswer:
        """One request to one URL. Raises _NotConnected when connecting fails (nothing was
        sent), AdminUnreachable when the answer does not come."""
        import http.client  # ~1 MB with the email package: not held until a first request

        parts = urlsplit(url)
        remaining_s = deadline - self._monotonic()
        if remaining_s <= 0:
            raise AdminUnreachable(
                f"the admin service at {self.service_url} did not answer within "
                f"{self.timeout_s:g} s"
            )
        conn: http.client.HTTPConnection
        connect_s = min(remaining_s, self.connect_timeout_s)
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=connect_s, context=self._ssl_context
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=connect_s)
        try:
            try:
                conn.connect()
            except OSError as exc:
                raise _NotConnected(_cause(exc)) from None
            if conn.sock is not None:
                conn.sock.settimeout(max(deadline - self._monotonic(), 0.001))
            target = parts.path or "/"
            if parts.query:
                target += "?" + parts.query
            try:
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read(self.answer_bytes_max + 1)
            except TimeoutError:
                raise AdminUnreachable(
                    f"the admin service at {_origin(url)} did not answer within "
                    f"{self.timeout_s:g} s"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                raise AdminUnreachable(
                    f"connection to the admin service at {_origin(url)} failed: {_cause(exc)}"
                ) from None
            if len(data) > self.answer_bytes_max:
                raise AdminError(
                    f"the answer to {method} {parts.path} is over {self.answer_bytes_max} bytes"
                )
            return HttpAnswer(response.status, data, dict(response.getheaders()), url)
        finally:
            conn.close()


def _cause(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})" if exc.strerror else "unknown host"
    if isinstance(exc, TimeoutError):
        return "connect timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
