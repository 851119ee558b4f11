"""Binary lookups: partition metadata and topic ownership, following redirects.

``LOOKUP`` answers either Connect (this broker owns the topic; connect to the given URL)
or Redirect (ask the given broker, with ``authoritative`` as returned). At most
``max_redirects`` redirects are followed. Lookups go to one of the service URL's hosts
(``pulsar://h1:6650,h2:6650``), the next in turn (:mod:`magnetar.client.service_url`); a host
that refuses the connection is passed over for the next. Retriable failures
(``ServiceNotReady``, ``MetadataError``, ``TooManyRequests``, every host refusing, connection
loss) are retried with backoff until the operation timeout has passed
(:mod:`magnetar.client.retry`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from magnetar.client.connection import Connection
from magnetar.client.connection_pool import ConnectionPool
from magnetar.client.errors import ConnectError, LookupError_
from magnetar.client.retry import retry_until_timeout
from magnetar.client.service_url import ServiceNameResolver, ServiceUrl
from magnetar.common.clock import Clock
from magnetar.common.errors import error_for_code
from magnetar.protocol import (
    GetTopicsOfNamespace,
    GetTopicsOfNamespaceResponse,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    MetadataResult,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
    TopicsMode,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    logical_url: str
    physical_url: str


class Lookup(Protocol):
    """What producers, consumers and the client need from a lookup service (binary here,
    HTTP in :mod:`magnetar.client.http_lookup`)."""

    async def partitions(self, topic: str) -> int: ...

    async def lookup(self, topic: str) -> LookupAnswer: ...

    async def topics_of_namespace(self, namespace: str, mode: TopicsMode) -> list[str]: ...


class LookupService:
    def __init__(
        self,
        pool: ConnectionPool,
        service_url: str,
        *,
        request_ids: itertools.count[int],
        clock: Clock,
        operation_timeout_s: float,
        use_tls: bool,
        max_redirects: int = 20,
        listener_name: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._pool = pool
        self._service_url = service_url
        self._hosts = ServiceNameResolver(ServiceUrl.parse(service_url), rng)
        self._ids = request_ids
        self._clock = clock
        self._timeout_s = operation_timeout_s
        self._tls = use_tls
        self._max_redirects = max_redirects
        self._listener_name = listener_name
        self._rng = rng

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        return await retry_until_timeout(
            what, attempt, clock=self._clock, timeout_s=self._timeout_s,
            waiting_for=self._service_url, rng=self._rng,
        )  # fmt: skip

    async def _service_connection(self) -> tuple[Connection, str]:
        """A connection to one of the service URL's hosts, and that host's URL: the next
        host in turn, or the first after it that accepts. Raises the last host's
        :class:`ConnectError` when none does (retriable: the caller backs off and retries),
        and any other error (a refused TLS certificate, a handshake error) at once."""
        error: ConnectError | None = None
        for url in self._hosts.rotation():
            try:
                return await self._pool.get(url), url
            except ConnectError as exc:
                if not exc.retriable:
                    raise
                error = exc
        assert error is not None  # a service URL names at least one host
        raise error

    async def partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 when it is not partitioned)."""

        async def attempt() -> int:
            conn, _ = await self._service_connection()
            rid = next(self._ids)
            resp: PartitionedTopicMetadataResponse = await conn.request(
                PartitionedTopicMetadata(topic=topic, request_id=rid), rid, self._timeout_s
            )
            if resp.response == MetadataResult.Failed or resp.error is not None:
                raise error_for_code(resp.error or 0, resp.message or "partition metadata failed")
            return resp.partitions or 0

        return await self._retrying(f"partition metadata of {topic}", attempt)

    async def lookup(self, topic: str) -> LookupAnswer:
        """The broker owning ``topic``. Raises LookupError_ after too many redirects."""

        async def attempt() -> LookupAnswer:
            conn, service_host = await self._service_connection()
            authoritative = False
            for _ in range(self._max_redirects + 1):
                rid = next(self._ids)
                resp: LookupTopicResponse = await conn.request(
                    LookupTopic(
                        topic=topic,
                        request_id=rid,
                        authoritative=authoritative,
                        advertised_listener_name=self._listener_name,
                    ),
                    rid,
                    self._timeout_s,
                )
                if (
                    resp.response == LookupResult.Failed
                    or resp.response is None
                    or resp.error is not None
                ):
                    raise error_for_code(
                        resp.error or 0, resp.message or f"lookup of {topic} failed"
                    )
                target = (
                    resp.broker_service_url_tls if self._tls else resp.broker_service_url
                ) or (resp.broker_service_url or resp.broker_service_url_tls)
                if not target:
                    raise LookupError_(f"lookup of {topic} returned no broker URL")
                if resp.response == LookupResult.Redirect:
                    conn = await self._pool.get(target)
                    authoritative = resp.authoritative
                    continue
                if resp.proxy_through_service_url:
                    return LookupAnswer(target, service_host)
                return LookupAnswer(target, target)
            raise LookupError_(
                f"lookup of {topic} redirected more than {self._max_redirects} times"
            )

        return await self._retrying(f"lookup of {topic}", attempt)

    async def topics_of_namespace(self, namespace: str, mode: TopicsMode) -> list[str]:
        """Topic names of ``tenant/ns`` (partitions included), by GET_TOPICS_OF_NAMESPACE."""

        async def attempt() -> list[str]:
            conn, _ = await self._service_connection()
            rid = next(self._ids)
            resp: GetTopicsOfNamespaceResponse = await conn.request(
                GetTopicsOfNamespace(request_id=rid, namespace=namespace, mode=mode),
                rid,
                self._timeout_s,
            )
            return list(resp.topics)

        return await self._retrying(f"topics of {namespace}", attempt)
