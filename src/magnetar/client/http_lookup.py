"""Lookups over the broker's HTTP port, for ``http://`` and ``https://`` service URLs.

Same contract as :class:`~magnetar.client.lookup.LookupService`:

* partitions: ``GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/partitions`` -> ``{"partitions": N}``;
* owner: ``GET /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}`` -> ``{"brokerUrl": ...,
  "brokerUrlTls": ...}`` (the binary URL the client then connects to);
* topics of a namespace: ``GET /admin/v2/namespaces/{tenant}/{ns}/topics``.

The service URL may list several hosts (``http://h1:8080,h2:8080``): each request goes to
the next host in turn (:mod:`magnetar.client.service_url`), and a host that cannot be
reached is passed over for the next one.
Redirects (301/302/307/308, as a broker that does not own the topic answers) are followed,
at most ``max_redirects`` times. Requests run in a worker thread (stdlib ``urllib``; lookups
are rare, so the thread hop costs nothing that matters and the event loop never blocks).
Retriable failures (connection refused, 5xx, 429) are retried with backoff until the
operation timeout; 404 raises TopicNotFound, 401/403 AuthenticationError/AuthorizationError.
``listener_name`` asks for that advertised listener (``?listenerName=``, as the Java client
does); a broker without it answers 500 "the broker do not have <name> listener", raised at
once as ListenerNotFound.
Authentication: ``token`` -> ``Authorization: Bearer``, ``basic`` -> ``Authorization: Basic``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

from magnetar.client.auth import Authentication
from magnetar.client.errors import ConnectError, LookupError_
from magnetar.client.lookup import LookupAnswer
from magnetar.client.retry import retry_until_timeout
from magnetar.client.service_url import ServiceNameResolver, ServiceUrl
from magnetar.common.clock import Clock
from magnetar.common.errors import (
    AuthenticationError,
    AuthorizationError,
    ListenerNotFound,
    ServiceNotReady,
    TooManyRequests,
    TopicNotFound,
)
from magnetar.common.names import NamespaceName, TopicName
from magnetar.protocol import TopicsMode

T = TypeVar("T")


def _redirect_handler(max_redirects: int) -> urllib.request.HTTPRedirectHandler:
    limited = type(
        "LimitedRedirects",
        (urllib.request.HTTPRedirectHandler,),
        {"max_redirections": max_redirects, "max_repeats": max_redirects},
    )
    handler: urllib.request.HTTPRedirectHandler = limited()
    return handler


def _reason_text(body: str) -> str:
    """The ``reason`` of an admin error body ``{"reason": ...}``; the body itself otherwise."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    if isinstance(parsed, dict) and isinstance(parsed.get("reason"), str):
        return str(parsed["reason"])
    return body


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` (local name URL-quoted). Raises
    :class:`~magnetar.common.errors.InvalidTopicName` for an invalid name."""
    name = TopicName.parse(topic)
    return f"{name.domain.value}/{name.tenant}/{name.namespace}/{quote(name.local_name, safe='')}"


class HttpLookupService:
    def __init__(
        self,
        service_url: str,
        *,
        clock: Clock,
        operation_timeout_s: float,
        use_tls: bool,
        authentication: Authentication | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_redirects: int = 20,
        listener_name: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._service_url = service_url
        self._hosts = ServiceNameResolver(ServiceUrl.parse(service_url), rng)
        self._listener_name = listener_name
        self._clock = clock
        self._timeout_s = operation_timeout_s
        self._tls = use_tls
        self._auth = authentication
        self._rng = rng
        handlers: list[Any] = [_redirect_handler(max_redirects)]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    # ------------------------------------------------------------ plumbing

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        auth = self._auth
        if auth is not None:
            method = auth.auth_method_name()
            data = auth.auth_data()
            if method == "token":
                headers["Authorization"] = f"Bearer {data.decode()}"
            elif method == "basic":
                headers["Authorization"] = f"Basic {base64.b64encode(data).decode()}"
        return headers

    def _get_blocking(self, base: str, path: str) -> Any:
        request = urllib.request.Request(base + path, headers=self._headers())
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            reason = exc.read().decode("utf-8", "replace")[:500]
            code = exc.code
            if code in (301, 302, 303, 307, 308):
                raise LookupError_(f"GET {path}: too many redirects") from exc
            if code == 404:
                raise TopicNotFound(f"GET {path}: 404 {reason}") from exc
            if code == 401:
                raise AuthenticationError(f"GET {path}: 401 {reason}") from exc
            if code == 403:
                raise AuthorizationError(f"GET {path}: 403 {reason}") from exc
            if code == 429:
                raise TooManyRequests(f"GET {path}: 429 {reason}") from exc
            if code >= 500 and ListenerNotFound.matches(_reason_text(reason)):
                raise ListenerNotFound(_reason_text(reason)) from exc
            if code >= 500:
                raise ServiceNotReady(f"GET {path}: {code} {reason}") from exc
            raise LookupError_(f"GET {path}: {code} {reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectError(f"GET {base}{path}: {exc}") from exc
        try:
            return json.loads(body)
        except ValueError as exc:
            raise LookupError_(f"GET {path}: answer is not JSON") from exc

    async def _get(self, what: str, path: str) -> Any:
        return await self._retrying(what, lambda: self._get_from_a_host(path))

    async def _get_from_a_host(self, path: str) -> Any:
        """``GET path`` from the next host in turn, or the first after it that can be
        reached; raises the last host's :class:`ConnectError` when none can."""
        error: ConnectError | None = None
        for base in self._hosts.rotation():
            try:
                return await asyncio.to_thread(self._get_blocking, base, path)
            except ConnectError as exc:
                error = exc
        assert error is not None  # a service URL names at least one host
        raise error

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        return await retry_until_timeout(
            what, attempt, clock=self._clock, timeout_s=self._timeout_s,
            waiting_for=self._service_url, rng=self._rng,
        )  # fmt: skip

    # ------------------------------------------------------------ the lookup contract

    async def partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 when it is not partitioned)."""
        answer = await self._get(
            f"partition metadata of {topic}", f"/admin/v2/{topic_path(topic)}/partitions"
        )
        return int(answer.get("partitions", 0)) if isinstance(answer, dict) else 0

    async def lookup(self, topic: str) -> LookupAnswer:
        """The binary URL of the broker owning ``topic``."""
        path = f"/lookup/v2/topic/{topic_path(topic)}"
        if self._listener_name:
            path += f"?listenerName={quote(self._listener_name, safe='')}"
        answer = await self._get(f"lookup of {topic}", path)
        if not isinstance(answer, dict):
            raise LookupError_(f"lookup of {topic}: unexpected answer {answer!r}")
        url = (answer.get("brokerUrlTls") if self._tls else None) or answer.get("brokerUrl")
        if not url:
            raise LookupError_(f"lookup of {topic} returned no broker URL")
        return LookupAnswer(url, url)

    async def topics_of_namespace(self, namespace: str, mode: TopicsMode) -> list[str]:
        """Topic names of ``tenant/ns`` (partitions included), filtered by domain."""
        ns = NamespaceName.parse(namespace)
        answer = await self._get(
            f"topics of {namespace}", f"/admin/v2/namespaces/{ns.tenant}/{ns.namespace}/topics"
        )
        names = [str(t) for t in answer] if isinstance(answer, list) else []
        if mode == TopicsMode.PERSISTENT:
            return [t for t in names if t.startswith("persistent://")]
        if mode == TopicsMode.NON_PERSISTENT:
            return [t for t in names if t.startswith("non-persistent://")]
        return names
