"""The client side of the proxy's binary protocol: one :class:`ProxyConnection` per client.

A connection starts with CONNECT (read whole, :class:`~magnetar.proxy.handshake.FirstFrame`;
anything that is not a Pulsar CONNECT closes it). With authentication on, the credentials
are checked here, with the brokers' providers; refused ones get Error
``AuthenticationError`` and the connection closes. Then one of two lives:

* **Lookup connection** (no ``proxy_to_broker_url``): the proxy answers CONNECTED itself and
  serves LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA and
  GET_OR_CREATE_SCHEMA by asking a broker over a connection of its own acting for this
  client (the proxy's role, the client's as ``original_principal``): a lookup follows the
  brokers' redirects here and is answered with the owner's URL and
  ``proxy_through_service_url``, so the client connects to the proxy again for that broker.
  Producers, consumers and the like are refused on it (NotAllowed).
* **Piped connection** (CONNECT names ``proxy_to_broker_url``, a broker the directory
  allows): the proxy connects to that broker as itself for the client, relays the broker's
  CONNECTED (or its refusal) and from then on copies bytes both ways without parsing. When
  either side closes, so does the other; the client then looks up again (ownership moved).

Every request is answered, whatever went wrong (a broker that cannot be reached:
ServiceNotReady, which clients retry). Memory: a connection holds at most one handshake
frame, one partial frame of a lookup connection, and what the transports buffer; reading
stops while the other side's write buffer is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

from magnetar import __version__
from magnetar.broker.error_reply import failure_reply
from magnetar.common.errors import (
    AuthenticationError,
    ProtocolError,
    ServerError,
    ServiceNotReady,
    error_for_code,
)
from magnetar.protocol import (
    PROTOCOL_VERSION,
    Command,
    Connect,
    Connected,
    Error,
    FeatureFlags,
    FrameDecoder,
    GetOrCreateSchema,
    GetSchema,
    GetTopicsOfNamespace,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    PartitionedTopicMetadata,
    Ping,
    Pong,
    encode,
)
from magnetar.protocol.frame import DEFAULT_MAX_FRAME_SIZE_BYTES, DEFAULT_MAX_MESSAGE_SIZE_BYTES
from magnetar.proxy.broker_link import BrokerLink, BrokerRefused, no_delay
from magnetar.proxy.handshake import (
    FirstFrame,
    ProxyCredentials,
    broker_connect,
    client_auth,
    target_address,
)

if TYPE_CHECKING:
    from magnetar.auth.authentication import AuthenticationService
    from magnetar.common.clock import Clock, Timer
    from magnetar.proxy.config import ProxyConfig
    from magnetar.proxy.discovery import BrokerDirectory
    from magnetar.proxy.stats import ConnectionStats, ProxyStats

log = logging.getLogger(__name__)

PROXY_VERSION = f"Magnetar-Proxy-{__version__}"
REFUSED_REQUEST_ID = 2**64 - 1
"""Request id of an Error refusing a CONNECT (Pulsar's -1)."""
REDIRECTS_MAX = 5
LOOKUP_LINKS_MAX = 16
"""Broker connections one lookup connection keeps open (one per broker asked)."""
BROKERS_TRIED_MAX = 3
"""Brokers a request is tried on before the client is told ServiceNotReady."""

_FORWARDED_COUNTERS: dict[type[Any], str] = {
    PartitionedTopicMetadata: "pulsar_proxy_partitions_metadata_requests",
    GetTopicsOfNamespace: "pulsar_proxy_get_topics_of_namespace_requests",
    GetSchema: "pulsar_proxy_get_schema_requests",
    GetOrCreateSchema: "pulsar_proxy_get_schema_requests",
}
"""Requests of a lookup connection forwarded to any broker as they are."""


class BinaryProxy:
    """What every client connection shares; :meth:`connection` is the protocol factory."""

    def __init__(
        self,
        config: ProxyConfig,
        directory: BrokerDirectory,
        authentication: AuthenticationService,
        stats: ProxyStats,
        clock: Clock,
    ) -> None:
        self.config = config
        self.directory = directory
        self.authentication = authentication
        self.stats = stats
        self.clock = clock
        creds = config.broker_client.client_authentication()
        self.credentials = (
            ProxyCredentials()
            if creds is None
            else ProxyCredentials(creds.auth_method_name(), creds.auth_data())
        )
        self.open: set[ProxyConnection] = set()

    def connection(self) -> ProxyConnection:
        return ProxyConnection(self)

    def close_all(self) -> None:
        for conn in list(self.open):
            conn.close()


class ProxyConnection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, proxy: BinaryProxy) -> None:
        self._proxy = proxy
        self._transport: asyncio.Transport | None = None
        self._first: FirstFrame | None = FirstFrame()
        self._decoder: FrameDecoder | None = None
        self._early: list[bytes] = []
        """Client bytes after CONNECT, held until the broker side is ready."""
        self._link: BrokerLink | None = None
        """The broker of a piped connection."""
        self._lookup_links: dict[str, BrokerLink] = {}
        self._principal: str | None = None
        self._auth: tuple[str | None, bytes | None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stats: ConnectionStats | None = None
        self._handshake_timer: Timer | None = None
        self._expiry_timer: Timer | None = None
        self.closed = False

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, transport)
        no_delay(transport)
        proxy = self._proxy
        peer = transport.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if len(proxy.open) >= proxy.config.max_connections:
            proxy.stats.count("pulsar_proxy_rejected_connections")
            log.warning("refusing %s: %d connections open", address, len(proxy.open))
            self._refuse(ServerError.ServiceNotReady, "too many connections to the proxy")
            return
        proxy.open.add(self)
        self._stats = proxy.stats.opened(address, proxy.clock.now_ms())
        self._handshake_timer = proxy.clock.call_later(
            proxy.config.connect_timeout_s, self._handshake_overdue
        )

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        link = self._link
        if link is not None:
            assert self._stats is not None
            self._proxy.stats.copied(self._stats, from_client=len(data))
            link.write(data)
        elif self._first is not None:
            self._on_handshake_bytes(data)
        elif self._decoder is not None:
            self._on_lookup_bytes(data)
        else:  # the broker side is being connected
            self._early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._teardown()

    def pause_writing(self) -> None:
        if self._link is not None:
            self._link.set_reading(False)

    def resume_writing(self) -> None:
        if self._link is not None:
            self._link.set_reading(True)

    # --- the pipe's client end (magnetar.proxy.broker_link.PipeEnd) -----------------------

    def from_broker(self, data: bytes) -> None:
        if self._transport is not None and not self.closed:
            assert self._stats is not None
            self._proxy.stats.copied(self._stats, to_client=len(data))
            self._transport.write(data)

    def broker_closed(self) -> None:
        self.close()

    def set_reading(self, reading: bool) -> None:
        transport = self._transport
        if transport is None or self.closed or transport.is_closing():
            return
        with contextlib.suppress(RuntimeError):
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    # --- the handshake -------------------------------------------------------------------

    def _handshake_overdue(self) -> None:
        if self._first is not None and not self.closed:
            log.info("closing %s: no CONNECT in time", self._address())
            self._proxy.stats.count("pulsar_proxy_rejected_connections")
            self.close()

    def _on_handshake_bytes(self, data: bytes) -> None:
        assert self._first is not None
        try:
            handshake = self._first.feed(data)
        except ProtocolError as exc:
            log.info("closing %s: %s", self._address(), exc)
            self._proxy.stats.count("pulsar_proxy_rejected_connections")
            self.close()
            return
        if handshake is None:
            return
        self._first = None
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
        cmd = handshake.command
        if not isinstance(cmd, Connect):
            log.info("closing %s: %s before CONNECT", self._address(), cmd.TYPE.name)
            self._proxy.stats.count("pulsar_proxy_rejected_connections")
            self._refuse(ServerError.UnknownError, f"expected CONNECT, got {cmd.TYPE.name}")
            return
        if not self._authenticate(cmd):
            return
        if cmd.proxy_to_broker_url:
            self._early.append(handshake.rest)
            self.set_reading(False)  # until the broker side is ready
            self._spawn(self._connect_broker(cmd))
            return
        self._decoder = FrameDecoder(max_frame_size_bytes=DEFAULT_MAX_FRAME_SIZE_BYTES)
        self._write(
            Connected(
                server_version=PROXY_VERSION,
                protocol_version=min(cmd.protocol_version, PROTOCOL_VERSION),
                max_message_size=DEFAULT_MAX_MESSAGE_SIZE_BYTES,
                feature_flags=FeatureFlags(),
            )
        )
        if handshake.rest:
            self._on_lookup_bytes(handshake.rest)

    def _authenticate(self, cmd: Connect) -> bool:
        proxy = self._proxy
        if not proxy.authentication.enabled:
            return True
        peer_cert = None
        transport = self._transport
        if transport is not None and transport.get_extra_info("sslcontext") is not None:
            peer_cert = transport.get_extra_info("peercert")
        method, data = client_auth(cmd)
        try:
            identity = proxy.authentication.authenticate(
                method, data, peer_cert, proxy.clock.now_ms() / 1000
            )
        except AuthenticationError as exc:
            log.info("connection %s: authentication refused: %s", self._address(), exc)
            proxy.stats.count("pulsar_proxy_authentication_failures")
            self._refuse(ServerError.AuthenticationError, f"Unable to authenticate: {exc}")
            return False
        self._principal = identity.role
        if proxy.config.forward_credentials:
            self._auth = (method, data)
        if self._stats is not None:
            self._stats.role = identity.role
        if identity.expires_at_s is not None:
            # Expired credentials end the connection: the client reconnects with fresh ones
            # (a piped connection's frames are not parsed, so no AUTH_CHALLENGE here).
            remaining_s = identity.expires_at_s - proxy.clock.now_ms() / 1000
            self._expiry_timer = proxy.clock.call_later(max(remaining_s, 0.0), self._expired)
        return True

    def _expired(self) -> None:
        if not self.closed:
            log.info("closing %s: its credentials expired", self._address())
            self.close()

    async def _connect_broker(self, cmd: Connect) -> None:
        proxy = self._proxy
        target = cmd.proxy_to_broker_url or ""
        try:
            allowed = await proxy.directory.allows(target)
        except ValueError as exc:
            self._refuse(ServerError.ServiceNotReady, str(exc))
            return
        if not allowed:
            log.warning("%s asked for %r, not a known broker", self._address(), target)
            self._refuse(ServerError.ServiceNotReady, f"{target} is not a broker of this proxy")
            return
        host, port = target_address(target)
        connect = broker_connect(
            client_version=PROXY_VERSION,
            credentials=proxy.credentials,
            original_principal=self._principal,
            original_auth=self._auth,
            client=cmd,
        )
        try:
            link, handshake = await BrokerLink.open(
                host, port, connect, proxy.credentials, timeout_s=proxy.config.connect_timeout_s
            )
        except BrokerRefused as exc:
            log.info("%s: broker %s:%d refused: %s", self._address(), host, port, exc)
            self._refuse(exc.error.error, exc.error.message)
            return
        except ServiceNotReady as exc:
            log.info("%s: %s", self._address(), exc)
            self._refuse(ServerError.ServiceNotReady, str(exc))
            return
        if self.closed or self._transport is None:
            link.close()
            return
        self._link = link
        if self._stats is not None:
            self._stats.broker = f"{host}:{port}"
        self.from_broker(handshake.frame)  # the broker's CONNECTED, verbatim
        early, self._early = b"".join(self._early), []
        if early:
            if self._stats is not None:
                proxy.stats.copied(self._stats, from_client=len(early))
            link.write(early)
        link.pipe(self)
        self.set_reading(True)

    # --- lookup connections --------------------------------------------------------------

    def _on_lookup_bytes(self, data: bytes) -> None:
        assert self._decoder is not None
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.info("closing %s: %s", self._address(), exc)
            self.close()
            return
        for frame in frames:
            self._proxy.stats.count("pulsar_proxy_binary_ops")
            self._on_command(frame.command)

    def _on_command(self, cmd: Command) -> None:
        if isinstance(cmd, Ping):
            self._write(Pong())
        elif isinstance(cmd, Pong):
            pass
        elif isinstance(cmd, LookupTopic):
            self._proxy.stats.count("pulsar_proxy_lookup_requests")
            self._answer(cmd, self._lookup(cmd))
        elif type(cmd) in _FORWARDED_COUNTERS:
            self._proxy.stats.count(_FORWARDED_COUNTERS[type(cmd)])
            self._answer(cmd, self._forward(cmd))
        else:
            request_id = getattr(cmd, "request_id", None)
            if not isinstance(request_id, int):
                log.info("closing %s: %s on a lookup connection", self._address(), cmd.TYPE.name)
                self.close()
                return
            self._write(
                Error(
                    request_id=request_id,
                    error=ServerError.NotAllowedError,
                    message=f"{cmd.TYPE.name} is not served on a proxy's lookup connection: "
                    "connect with the pulsar:// service URL of the proxy",
                )
            )

    def _answer(self, cmd: Command, work: Coroutine[Any, Any, Command]) -> None:
        """Run ``work`` and answer request ``cmd`` with its result under the client's
        request id, or with the failure as that request's response type
        (:func:`~magnetar.broker.error_reply.failure_reply`: the C++ client ignores an
        ERROR answering LOOKUP or PARTITIONED_METADATA)."""
        request_id: int = getattr(cmd, "request_id")  # noqa: B009 - every request has one

        async def run() -> None:
            reply: Any
            try:
                reply = await work
            except Exception as exc:  # every request is answered (DESIGN.md §6)
                if isinstance(exc, BrokerRefused):  # the broker's words, e.g. "Invalid roles"
                    exc = error_for_code(exc.error.error, exc.error.message)
                reply = failure_reply(cmd, exc)
            self._write(dataclasses.replace(reply, request_id=request_id))

        self._spawn(run())

    async def _lookup_link(self, service_url: str) -> BrokerLink:
        """This connection's connection to the broker at ``service_url`` (opened once)."""
        link = self._lookup_links.get(service_url)
        if link is not None and not link.closed:
            return link
        proxy = self._proxy
        host, port = target_address(service_url)
        connect = broker_connect(
            client_version=PROXY_VERSION,
            credentials=proxy.credentials,
            original_principal=self._principal,
            original_auth=self._auth,
        )
        link, _ = await BrokerLink.open(
            host, port, connect, proxy.credentials, timeout_s=proxy.config.connect_timeout_s
        )
        if self.closed:
            link.close()
            raise ServiceNotReady("the client connection closed")
        if len(self._lookup_links) >= LOOKUP_LINKS_MAX:
            _, oldest = self._lookup_links.popitem()
            oldest.close()
        self._lookup_links[service_url] = link
        return link

    async def _any_broker(self, cmd: Any) -> Command:
        """``cmd`` asked of the first broker that answers."""
        timeout_s = self._proxy.config.request_timeout_s
        causes: list[str] = []
        for endpoint in self._proxy.directory.rotation()[:BROKERS_TRIED_MAX]:
            try:
                link = await self._lookup_link(endpoint.service_url)
                return await link.request(cmd, timeout_s)
            except ServiceNotReady as exc:
                causes.append(str(exc))
        if not causes:
            await self._proxy.directory.refresh()
            raise ServiceNotReady("the proxy knows no broker")
        raise ServiceNotReady("no broker answered: " + "; ".join(causes))

    async def _forward(self, cmd: Any) -> Command:
        if hasattr(cmd, "original_principal"):  # only the proxy names who it acts for
            cmd = dataclasses.replace(
                cmd, original_principal=None, original_auth_data=None, original_auth_method=None
            )
        return await self._any_broker(cmd)

    async def _lookup(self, cmd: LookupTopic) -> Command:
        # The proxy reaches brokers by their internal addresses: no listener name.
        cmd = dataclasses.replace(
            cmd,
            advertised_listener_name=None,
            original_principal=None,
            original_auth_data=None,
            original_auth_method=None,
        )
        answer = await self._any_broker(cmd)
        for _ in range(REDIRECTS_MAX):
            if not (
                isinstance(answer, LookupTopicResponse)
                and answer.response == LookupResult.Redirect
                and answer.broker_service_url
            ):
                break
            link = await self._lookup_link(answer.broker_service_url)
            answer = await link.request(
                dataclasses.replace(cmd, authoritative=answer.authoritative),
                self._proxy.config.request_timeout_s,
            )
        if not (
            isinstance(answer, LookupTopicResponse)
            and answer.response == LookupResult.Connect
            and answer.broker_service_url
        ):
            self._proxy.stats.count("pulsar_proxy_rejected_lookup_requests")
            if isinstance(answer, LookupTopicResponse) and answer.response == LookupResult.Redirect:
                raise ServiceNotReady(f"lookup of {cmd.topic} redirected too many times")
            return answer
        owner = answer.broker_service_url
        self._proxy.directory.remember_owner(owner)
        # Pulsar's proxy: the owner's URL for both, and the client goes through the proxy.
        return LookupTopicResponse(
            request_id=cmd.request_id,
            broker_service_url=owner,
            broker_service_url_tls=owner,
            response=LookupResult.Connect,
            authoritative=True,
            proxy_through_service_url=True,
        )

    # --- helpers -------------------------------------------------------------------------

    def _address(self) -> str:
        return self._stats.remote_address if self._stats is not None else "a client"

    def _write(self, cmd: Command) -> None:
        if self._transport is not None and not self.closed:
            self._transport.write(encode(cmd))

    def _refuse(self, code: ServerError, message: str) -> None:
        self._write(Error(request_id=REFUSED_REQUEST_ID, error=code, message=message))
        self.close()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Close both sides (idempotent)."""
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()
        self._teardown()

    def _teardown(self) -> None:
        if self.closed:
            return
        self.closed = True
        for timer in (self._handshake_timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        self._proxy.open.discard(self)
        if self._stats is not None:
            self._proxy.stats.closed(self._stats)
        link, self._link = self._link, None
        if link is not None:
            link.close()
        links, self._lookup_links = self._lookup_links, {}
        for lookup_link in links.values():
            lookup_link.close()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        self._early = []
        if self._decoder is not None:
            self._decoder.release("connection closed")
            self._decoder = None
