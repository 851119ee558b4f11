"""Which brokers the proxy talks to, and which addresses it may forward a client to.

Two sources, either or both (Pulsar's proxy takes ``metadataStoreUrl`` or
``brokerServiceURL``/``brokerWebServiceURL``):

* :class:`MetadataDiscovery`: the brokers registered now under ``/loadbalance/brokers`` in
  the cluster's metadata store (each broker's ephemeral registration; a dead broker's goes
  when its session expires), re-read every ``refresh_interval_s`` and on demand;
* static URLs (:func:`static_endpoints`): ``pulsar://a:6650,b:6650`` and
  ``http://a:8080,b:8080``, paired by position; often one load-balanced address each.

:class:`BrokerDirectory` combines them and keeps the owners that lookups answered, and
decides whether a client's ``proxy_to_broker_url`` may be forwarded to
(:meth:`BrokerDirectory.allows`): a broker discovered or named by a lookup answer, or an
address on an allowed port (Pulsar's ``brokerProxyAllowedTargetPorts``, 6650 and 6651 by
default), so that the proxy is not an open relay to any address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.common.errors import MagnetarError
from magnetar.proxy.handshake import host_port, target_address

if TYPE_CHECKING:
    from magnetar.metadata import MetadataStore

log = logging.getLogger(__name__)

LOOKUP_OWNERS_MAX = 1024
"""Owner addresses remembered from lookup answers (oldest forgotten first)."""
DEFAULT_ALLOWED_TARGET_PORTS = frozenset({6650, 6651})


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One broker's (or one load-balanced group's) addresses."""

    service_url: str
    """``pulsar://host:port``."""
    http_url: str | None = None
    """``http://host:port``; None when only the binary URL is known."""

    @property
    def address(self) -> str:
        """``host:port`` of :attr:`service_url`."""
        return host_port(self.service_url)


def _split(urls: str, schemes: tuple[str, ...]) -> list[str]:
    """``scheme://a:1,b:2`` (or ``scheme://a:1,scheme://b:2``) as one URL per host. Raises
    ValueError naming the text."""
    text = urls.strip()
    scheme = next((s for s in schemes if text.startswith(s)), None)
    if scheme is None:
        raise ValueError(f"{urls!r} does not start with {' or '.join(schemes)}")
    found = []
    for part in text[len(scheme) :].split(","):
        part = part.strip().removeprefix(scheme).rstrip("/")
        if not part:
            continue
        host_port(part)  # raises ValueError for a malformed host:port
        found.append(scheme + part)
    if not found:
        raise ValueError(f"{urls!r} names no host")
    return found


def static_endpoints(
    service_urls: str | None, web_service_urls: str | None
) -> list[BrokerEndpoint]:
    """The endpoints of ``brokerServiceURL``/``brokerWebServiceURL``, paired by position
    (the last HTTP URL serves the binary URLs beyond it). Raises ValueError."""
    binary = _split(service_urls, ("pulsar://",)) if service_urls else []
    http = _split(web_service_urls, ("http://", "https://")) if web_service_urls else []
    if not binary:
        return []
    return [
        BrokerEndpoint(url, http[min(i, len(http) - 1)] if http else None)
        for i, url in enumerate(binary)
    ]


class BrokerSource(Protocol):
    """A live view of the brokers."""

    def endpoints(self) -> Sequence[BrokerEndpoint]:
        """The brokers known now (may be empty)."""
        ...

    async def refresh(self) -> None:
        """Read the brokers again now; raises nothing (a failure keeps the last view)."""
        ...

    async def start(self) -> None:
        """Connect and read once. Raises :class:`~magnetar.common.errors.MagnetarError`
        when the source cannot be reached."""
        ...

    async def close(self) -> None: ...


class MetadataDiscovery:
    """The registered brokers, read from the metadata store at ``metadata_url``."""

    def __init__(
        self, metadata_url: str, *, session_timeout_s: float, refresh_interval_s: float
    ) -> None:
        self.metadata_url = metadata_url
        self._session_timeout_s = session_timeout_s
        self._refresh_interval_s = refresh_interval_s
        self._store: MetadataStore | None = None
        self._endpoints: list[BrokerEndpoint] = []
        self._task: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Lock | None = None

    def endpoints(self) -> Sequence[BrokerEndpoint]:
        return self._endpoints

    async def start(self) -> None:
        from magnetar import metadata

        self._refreshing = asyncio.Lock()
        self._store = await metadata.connect(
            self.metadata_url, session_timeout_s=self._session_timeout_s
        )
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._poll(), name="discovery")

    async def refresh(self) -> None:
        from magnetar.broker.controller.election import REGISTRATIONS_PATH
        from magnetar.broker.ownership import BrokerAddress, registered_brokers
        from magnetar.metadata import NotFound, SessionExpired

        store = self._store
        if store is None or self._refreshing is None:
            return
        async with self._refreshing:
            try:
                found = []
                for broker_id in await registered_brokers(store):
                    with contextlib.suppress(NotFound):
                        got = await store.get(f"{REGISTRATIONS_PATH}/{broker_id}")
                        address = BrokerAddress.from_json(got.value)
                        found.append(BrokerEndpoint(address.service_url, address.http_url))
            except SessionExpired:
                await self._reconnect()
                return
            except MagnetarError as exc:
                log.warning("reading the brokers from %s failed: %s", self.metadata_url, exc)
                return
            if found != self._endpoints:
                log.info("brokers: %s", ", ".join(e.address for e in found) or "none")
            self._endpoints = found

    async def _reconnect(self) -> None:
        """A new session after the old one expired (the proxy keeps its last view until
        the next refresh reads the brokers again)."""
        from magnetar import metadata

        log.warning("the metadata session to %s expired; opening a new one", self.metadata_url)
        old, self._store = self._store, None
        if old is not None:
            with contextlib.suppress(MagnetarError):
                await old.close()
        try:
            self._store = await metadata.connect(
                self.metadata_url, session_timeout_s=self._session_timeout_s
            )
        except MagnetarError as exc:
            log.warning("reconnecting to %s failed: %s", self.metadata_url, exc)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_interval_s)
            if self._store is None:
                await self._reconnect()
            await self.refresh()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        store, self._store = self._store, None
        if store is not None:
            await store.close()


class BrokerDirectory:
    """The brokers the proxy sends lookups to and forwards clients to (see the module
    docstring). Not thread-safe: used on the event loop."""

    def __init__(
        self,
        *,
        static: Sequence[BrokerEndpoint] = (),
        source: BrokerSource | None = None,
        allowed_target_ports: frozenset[int] = DEFAULT_ALLOWED_TARGET_PORTS,
    ) -> None:
        self._static = list(static)
        self._source = source
        self._allowed_ports = allowed_target_ports
        self._owners: OrderedDict[str, None] = OrderedDict()
        self._next = 0

    async def start(self) -> None:
        if self._source is not None:
            await self._source.start()

    async def close(self) -> None:
        if self._source is not None:
            await self._source.close()

    def endpoints(self) -> list[BrokerEndpoint]:
        """The discovered brokers, then the static ones."""
        found = list(self._source.endpoints()) if self._source is not None else []
        return found + [e for e in self._static if e not in found]

    def rotation(self) -> list[BrokerEndpoint]:
        """:meth:`endpoints`, each call starting one further along (lookups spread)."""
        endpoints = self.endpoints()
        if not endpoints:
            return []
        self._next = (self._next + 1) % len(endpoints)
        return endpoints[self._next :] + endpoints[: self._next]

    def http_urls(self) -> list[str]:
        return [e.http_url for e in self.rotation() if e.http_url is not None]

    def remember_owner(self, service_url: str) -> None:
        """A lookup answered with ``service_url``: clients may be forwarded to it."""
        try:
            address = host_port(service_url)
        except ValueError:
            return
        self._owners[address] = None
        self._owners.move_to_end(address)
        while len(self._owners) > LOOKUP_OWNERS_MAX:
            self._owners.popitem(last=False)

    def _known(self, address: str) -> bool:
        return address in self._owners or any(e.address == address for e in self.endpoints())

    async def allows(self, proxy_to_broker_url: str) -> bool:
        """Whether a client may be forwarded to ``proxy_to_broker_url`` (discovery is read
        again once for an address it does not know). Raises ValueError when it is not
        ``host:port``."""
        host, port = target_address(proxy_to_broker_url)
        address = f"{host}:{port}"
        if self._known(address) or port in self._allowed_ports:
            return True
        if self._source is not None:
            await self._source.refresh()
        return self._known(address)

    async def refresh(self) -> None:
        if self._source is not None:
            await self._source.refresh()
