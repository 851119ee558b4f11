"""One TCP (or TLS) connection to a broker, multiplexing producers, consumers and requests.

The connection is a thin asyncio ``Protocol`` around the sans-IO
:class:`~magnetar.protocol.FrameDecoder`: bytes in, typed commands dispatched to

* the future of the pending request with that ``request_id`` (responses), or
* the registered producer (receipts, send errors, broker-initiated close) or consumer
  (messages, active-consumer changes, broker-initiated close) by id.

Keep-alive: a PING is sent every ``keep_alive_interval_s``; if nothing at all arrived since
the previous PING the connection is closed (as the C++ client does). Incoming PINGs are
answered with PONG. When the connection is lost, every pending request fails with
:class:`~magnetar.client.errors.ConnectError` and every registered handler is told, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any, Protocol, cast

from magnetar.client.auth import Authentication
from magnetar.client.errors import ConnectError, Timeout, TlsHandshakeError
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError, ProtocolError, error_for_code
from magnetar.protocol import (
    PROTOCOL_VERSION,
    AckResponse,
    ActiveConsumerChange,
    AuthChallenge,
    AuthData,
    AuthResponse,
    CloseConsumer,
    CloseProducer,
    Command,
    Connect,
    Connected,
    ConsumerStatsResponse,
    Entry,
    Error,
    FeatureFlags,
    FrameDecoder,
    GetLastMessageIdResponse,
    GetOrCreateSchemaResponse,
    GetSchemaResponse,
    GetTopicsOfNamespaceResponse,
    LookupTopicResponse,
    Message,
    PartitionedTopicMetadataResponse,
    Ping,
    Pong,
    ProducerSuccess,
    ReachedEndOfTopic,
    SendError,
    SendReceipt,
    Success,
    TopicMigrated,
    encode,
)

log = logging.getLogger(__name__)

CLIENT_VERSION = "magnetar-python-0.1"
MAX_FRAME_SIZE_BYTES = 64 * 1024 * 1024
"""Frames larger than this close the connection (the broker's limit is ~5 MiB)."""


class ProducerHandler(Protocol):
    def on_send_receipt(self, receipt: SendReceipt) -> None: ...
    def on_send_error(self, error: SendError) -> None: ...
    def on_disconnect(self, connection: Connection, closed_by_broker: bool) -> None: ...


class ConsumerHandler(Protocol):
    def on_message(self, command: Message, entry: Entry) -> None: ...
    def on_active_consumer_change(self, is_active: bool) -> None: ...
    def on_reached_end_of_topic(self) -> None: ...
    def on_disconnect(self, connection: Connection, closed_by_broker: bool) -> None: ...


_RESPONSES = (
    Success,
    Error,
    ProducerSuccess,
    LookupTopicResponse,
    PartitionedTopicMetadataResponse,
    GetLastMessageIdResponse,
    GetTopicsOfNamespaceResponse,
    GetSchemaResponse,
    GetOrCreateSchemaResponse,
    ConsumerStatsResponse,
)


class Connection(asyncio.Protocol):
    """Use :meth:`open` to create one; :attr:`closed` tells whether it is still usable."""

    def __init__(
        self,
        *,
        logical_url: str,
        authentication: Authentication | None,
        clock: Clock,
        keep_alive_interval_s: float = 30.0,
        proxy_to_broker_url: str | None = None,
    ) -> None:
        self.logical_url = logical_url
        self._auth = authentication
        self._clock = clock
        self._keep_alive_interval_s = keep_alive_interval_s
        self._proxy_to_broker_url = proxy_to_broker_url
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(max_frame_size_bytes=MAX_FRAME_SIZE_BYTES)
        self._requests: dict[int, asyncio.Future[Any]] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        loop = asyncio.get_running_loop()
        self._connected: asyncio.Future[Connected] = loop.create_future()
        self._closed_future: asyncio.Future[None] = loop.create_future()
        self._received_since_ping = True
        self._keep_alive_task: asyncio.Task[None] | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.closed = False
        self.max_message_size: int | None = None
        self.server_protocol_version = 0
        self.on_close: list[Callable[[Connection], None]] = []

    # ------------------------------------------------------------ opening

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        logical_url: str,
        authentication: Authentication | None,
        clock: Clock,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout_s: float = 10.0,
        keep_alive_interval_s: float = 30.0,
        proxy_to_broker_url: str | None = None,
    ) -> Connection:
        """Connect, send CONNECT and wait for CONNECTED. Raises ConnectError (network,
        timeout), TlsHandshakeError (the broker's certificate is not trusted or does not
        name ``server_hostname``) or the broker's error (e.g. AuthenticationError)."""
        loop = asyncio.get_running_loop()
        conn = cls(
            logical_url=logical_url,
            authentication=authentication,
            clock=clock,
            keep_alive_interval_s=keep_alive_interval_s,
            proxy_to_broker_url=proxy_to_broker_url,
        )
        try:
            async with asyncio.timeout(connect_timeout_s):
                await loop.create_connection(
                    lambda: conn,
                    host,
                    port,
                    ssl=ssl_context,
                    server_hostname=server_hostname if ssl_context is not None else None,
                )
                await conn._connected
        except TimeoutError as exc:
            conn.close()
            raise ConnectError(
                f"connecting to {logical_url} timed out after {connect_timeout_s:g} s"
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            conn.close()
            raise TlsHandshakeError(
                f"TLS connection to {logical_url} refused the broker's certificate: "
                f"{exc.verify_message or exc}"
            ) from exc
        except OSError as exc:
            conn.close()
            raise ConnectError(f"cannot connect to {logical_url}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        conn._keep_alive_task = loop.create_task(conn._keep_alive())
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass but has its methods.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        auth = self._auth
        transport.write(
            encode(
                Connect(
                    client_version=CLIENT_VERSION,
                    auth_method_name=auth.auth_method_name() if auth else None,
                    auth_data=auth.auth_data() if auth else None,
                    protocol_version=PROTOCOL_VERSION,
                    proxy_to_broker_url=self._proxy_to_broker_url,
                    feature_flags=FeatureFlags(supports_auth_refresh=True),
                )
            )
        )

    # ------------------------------------------------------------ registration

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        self._producers[producer_id] = handler

    def unregister_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        self._consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    @property
    def handler_count(self) -> int:
        return len(self._producers) + len(self._consumers)

    # ------------------------------------------------------------ writing

    def send(self, command: Command) -> None:
        """Write a command without payload. Raises ConnectError if the connection is closed."""
        if self.closed or self._transport is None:
            raise ConnectError(f"connection to {self.logical_url} is closed")
        self._transport.write(encode(command))

    def write_buffers(self, buffers: list[bytes | memoryview]) -> None:
        if self.closed or self._transport is None:
            raise ConnectError(f"connection to {self.logical_url} is closed")
        self._transport.writelines(buffers)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._write_paused and not self.closed:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def request(self, command: Command, request_id: int, timeout_s: float | None) -> Any:
        """Send ``command`` and wait for the response with ``request_id``.

        Returns the response command. Raises the mapped broker error for ERROR (and for
        responses carrying an error code), Timeout, or ConnectError if the connection drops.
        """
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = fut
        try:
            self.send(command)
            if timeout_s is None:
                return await fut
            try:
                async with asyncio.timeout(timeout_s):
                    return await fut
            except TimeoutError as exc:
                raise Timeout(f"{command.TYPE.name} timed out after {timeout_s:.1f}s") from exc
        finally:
            if self._requests.get(request_id) is fut:
                del self._requests[request_id]

    def expect(self, request_id: int) -> asyncio.Future[Any]:
        """A future for a further response with ``request_id`` (WaitForExclusive producers get
        a second PRODUCER_SUCCESS)."""
        fut = self._requests.get(request_id)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._requests[request_id] = fut
        return fut

    def forget(self, request_id: int) -> None:
        self._requests.pop(request_id, None)

    # ------------------------------------------------------------ reading

    def data_received(self, data: bytes) -> None:
        self._received_since_ping = True
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection to %s: %s", self.logical_url, exc)
            self.close()
            return
        for frame in frames:
            try:
                self._dispatch(frame.command, frame.entry)
            except MagnetarError as exc:
                log.warning("closing connection to %s: %s", self.logical_url, exc)
                self.close()
                return

    def _dispatch(self, cmd: Command, entry: Entry | None) -> None:
        if isinstance(cmd, Message):
            consumer = self._consumers.get(cmd.consumer_id)
            if consumer is not None and entry is not None:
                consumer.on_message(cmd, entry)
            return
        if isinstance(cmd, SendReceipt):
            producer = self._producers.get(cmd.producer_id)
            if producer is not None:
                producer.on_send_receipt(cmd)
            return
        if isinstance(cmd, Error) and not self._connected.done():
            # The broker refused CONNECT (AuthenticationError, with Pulsar's request id -1)
            # and closes: open() raises that error, which is not retriable.
            self._connected.set_exception(error_for_code(cmd.error, cmd.message))
            self._connected.exception()  # retrieved: open() re-raises it
            return
        if isinstance(cmd, _RESPONSES):
            fut = self._requests.get(cmd.request_id)
            if isinstance(cmd, ProducerSuccess) and not cmd.producer_ready:
                # WaitForExclusive: tell the waiter; a fresh future waits for the ready one.
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                    self._requests[cmd.request_id] = asyncio.get_running_loop().create_future()
                return
            self._requests.pop(cmd.request_id, None)
            if fut is None or fut.done():
                return
            if isinstance(cmd, Error):
                fut.set_exception(error_for_code(cmd.error, cmd.message))
            elif (
                isinstance(cmd, GetSchemaResponse | GetOrCreateSchemaResponse)
                and cmd.error_code is not None
            ):
                fut.set_exception(error_for_code(cmd.error_code, cmd.error_message or ""))
            else:
                fut.set_result(cmd)
            return
        if isinstance(cmd, Connected):
            self.max_message_size = cmd.max_message_size
            self.server_protocol_version = cmd.protocol_version
            if not self._connected.done():
                self._connected.set_result(cmd)
        elif isinstance(cmd, Ping):
            self.send(Pong())
        elif isinstance(cmd, Pong):
            pass
        elif isinstance(cmd, SendError):
            producer = self._producers.get(cmd.producer_id)
            if producer is not None:
                producer.on_send_error(cmd)
        elif isinstance(cmd, AckResponse):
            if cmd.request_id is not None:
                fut = self._requests.pop(cmd.request_id, None)
                if fut is not None and not fut.done():
                    if cmd.error is not None:
                        fut.set_exception(error_for_code(cmd.error, cmd.message or ""))
                    else:
                        fut.set_result(cmd)
        elif isinstance(cmd, ActiveConsumerChange):
            consumer = self._consumers.get(cmd.consumer_id)
            if consumer is not None:
                consumer.on_active_consumer_change(cmd.is_active)
        elif isinstance(cmd, CloseProducer):
            producer = self._producers.pop(cmd.producer_id, None)
            if producer is not None:
                producer.on_disconnect(self, True)
        elif isinstance(cmd, CloseConsumer):
            consumer = self._consumers.pop(cmd.consumer_id, None)
            if consumer is not None:
                consumer.on_disconnect(self, True)
        elif isinstance(cmd, ReachedEndOfTopic):
            consumer = self._consumers.get(cmd.consumer_id)
            if consumer is not None:
                consumer.on_reached_end_of_topic()
        elif isinstance(cmd, AuthChallenge):
            auth = self._auth
            self.send(
                AuthResponse(
                    client_version=CLIENT_VERSION,
                    protocol_version=PROTOCOL_VERSION,
                    response=AuthData(
                        auth_method_name=auth.auth_method_name() if auth else "none",
                        auth_data=auth.auth_data() if auth else b"",
                    ),
                )
            )
        elif isinstance(cmd, TopicMigrated):
            self.close()
        elif not self._connected.done():
            raise ProtocolError(f"{cmd.TYPE.name} before CONNECTED")
        else:
            log.debug("ignoring %s from %s", cmd.TYPE.name, self.logical_url)

    # ------------------------------------------------------------ liveness and closing

    async def _keep_alive(self) -> None:
        while not self.closed:
            await self._clock.sleep(self._keep_alive_interval_s)
            if self.closed:
                return
            if not self._received_since_ping:
                log.warning(
                    "no traffic from %s for a keep-alive interval; closing", self.logical_url
                )
                self.close()
                return
            self._received_since_ping = False
            with contextlib.suppress(ConnectError):
                self.send(Ping())

    def close(self) -> None:
        """Close the connection; pending requests fail and handlers are told (idempotent)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self._fail_all(ConnectError(f"connection to {self.logical_url} closed"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._decoder.release("connection closed")  # a partial frame is freed at once
        self._fail_all(ConnectError(f"connection to {self.logical_url} lost: {exc or 'closed'}"))

    def _fail_all(self, error: ConnectError) -> None:
        if self.closed:
            return
        self.closed = True
        if not self._connected.done():
            self._connected.set_exception(error)
            self._connected.exception()  # retrieved: open() re-raises it
        if not self._closed_future.done():
            self._closed_future.set_result(None)
        if (
            self._keep_alive_task is not None
            and self._keep_alive_task is not asyncio.current_task()
        ):
            self._keep_alive_task.cancel()
        requests, self._requests = self._requests, {}
        for fut in requests.values():
            if not fut.done():
                fut.set_exception(error)
        self.resume_writing()
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for p in producers.values():
            p.on_disconnect(self, False)
        for c in consumers.values():
            c.on_disconnect(self, False)
        for cb in self.on_close:
            cb(self)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)
