"""One connection from the proxy to a broker: the handshake, then one of two modes.

* **Requests** (a client's lookup connection): commands go out with this link's own request
  ids (:meth:`BrokerLink.request`), each answer comes back as the broker sent it, errors
  included, for the proxy to relay. The broker's PINGs are answered.
* **Pipe** (a client connection forwarded to its owner broker): after :meth:`BrokerLink.pipe`
  every byte from the broker goes to the client unparsed, and the reverse through
  :meth:`BrokerLink.write`. Backpressure both ways: a side whose write buffer is full
  stops the other side's reading until it drains. Either side closing closes both.

The handshake (:meth:`BrokerLink.open`): CONNECT out; CONNECTED in (its frame kept verbatim,
for the client of a pipe), an Error in (the broker refused the proxy's credentials or its
``original_principal``: :class:`BrokerRefused`), or an AUTH_CHALLENGE answered with the
proxy's credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import socket
import ssl
from typing import Any, Protocol, cast

from magnetar.common.errors import MagnetarError, ProtocolError, ServiceNotReady
from magnetar.protocol import (
    PROTOCOL_VERSION,
    AuthChallenge,
    AuthResponse,
    Command,
    Connect,
    Connected,
    Error,
    FrameDecoder,
    Ping,
    Pong,
    encode,
)
from magnetar.protocol.frame import DEFAULT_MAX_FRAME_SIZE_BYTES
from magnetar.proxy.handshake import FirstFrame, Handshake, ProxyCredentials, auth_response_data

log = logging.getLogger(__name__)

AUTH_CHALLENGES_MAX = 4
"""Rounds of AUTH_CHALLENGE in one handshake before the broker is given up on."""


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Frames go out at once (no Nagle delay): a piped SEND's receipt is latency."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class BrokerRefused(MagnetarError):
    """The broker answered CONNECT with an Error (relayed to the client as it is)."""

    def __init__(self, error: Error) -> None:
        super().__init__(f"{error.error.name}: {error.message}")
        self.error = error


class PipeEnd(Protocol):
    """The client side of a pipe, as the broker side sees it."""

    def from_broker(self, data: bytes) -> None:
        """Bytes from the broker, to write to the client."""

    def broker_closed(self) -> None:
        """The broker side ended: close the client side."""

    def set_reading(self, reading: bool) -> None:
        """Stop (False) or resume (True) reading from the client: the broker's write buffer
        is full, or drained again."""


class BrokerLink(asyncio.Protocol):
    """Use :meth:`open`. ``address`` is ``host:port``, for messages."""

    def __init__(self, connect: Connect, credentials: ProxyCredentials, address: str) -> None:
        self.address = address
        self._connect = connect
        self._credentials = credentials
        self._transport: asyncio.Transport | None = None
        self._first = FirstFrame()
        self._challenges = 0
        loop = asyncio.get_running_loop()
        self._handshake: asyncio.Future[Handshake] = loop.create_future()
        self._early = b""
        """Bytes after CONNECTED that arrived before a mode was chosen."""
        self._decoder: FrameDecoder | None = None
        self._pipe: PipeEnd | None = None
        self._requests: dict[int, asyncio.Future[Command]] = {}
        self._ids = itertools.count(1)
        self.closed = False

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        connect: Connect,
        credentials: ProxyCredentials,
        *,
        timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> tuple[BrokerLink, Handshake]:
        """Connect and hand-shake within ``timeout_s``. Raises :class:`BrokerRefused`, or
        :class:`~magnetar.common.errors.ServiceNotReady` naming the broker when it cannot be
        reached or does not answer as a Pulsar broker."""
        address = f"{host}:{port}"
        link = cls(connect, credentials, address)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                await loop.create_connection(lambda: link, host, port, ssl=ssl_context)
                handshake = await link._handshake
        except BrokerRefused:
            link.close()
            raise
        except TimeoutError:
            link.close()
            raise ServiceNotReady(
                f"broker {address} did not answer within {timeout_s:g} s"
            ) from None
        except (OSError, ProtocolError) as exc:
            link.close()
            raise ServiceNotReady(f"cannot connect to broker {address}: {exc}") from None
        return link, handshake

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass but has its methods.
        self._transport = cast(asyncio.Transport, transport)
        no_delay(transport)
        self._transport.write(encode(self._connect))

    def data_received(self, data: bytes) -> None:
        if self._pipe is not None:
            self._pipe.from_broker(data)
        elif not self._handshake.done():
            self._on_handshake_bytes(data)
        elif self._decoder is not None:
            self._on_request_bytes(data)
        else:
            self._early += data

    def _on_handshake_bytes(self, data: bytes) -> None:
        try:
            handshake = self._first.feed(data)
        except ProtocolError as exc:
            self._fail_handshake(exc)
            return
        if handshake is None:
            return
        cmd = handshake.command
        if isinstance(cmd, Connected):
            self._early = handshake.rest
            self._handshake.set_result(handshake)
        elif isinstance(cmd, Error):
            self._fail_handshake(BrokerRefused(cmd))
        elif isinstance(cmd, AuthChallenge) and self._challenges < AUTH_CHALLENGES_MAX:
            self._challenges += 1
            self.write(
                encode(
                    AuthResponse(
                        client_version=self._connect.client_version,
                        response=auth_response_data(self._credentials),
                        protocol_version=PROTOCOL_VERSION,
                    )
                )
            )
            if handshake.rest:
                self._on_handshake_bytes(handshake.rest)
        else:
            self._fail_handshake(ProtocolError(f"{cmd.TYPE.name} in answer to CONNECT"))

    def _fail_handshake(self, exc: Exception) -> None:
        if not self._handshake.done():
            self._handshake.set_exception(exc)
            self._handshake.exception()  # retrieved: open() re-raises it
        self.close()

    def _on_request_bytes(self, data: bytes) -> None:
        assert self._decoder is not None
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing the connection to broker %s: %s", self.address, exc)
            self.close()
            return
        for frame in frames:
            cmd = frame.command
            if isinstance(cmd, Ping):
                self.write(encode(Pong()))
                continue
            request_id = getattr(cmd, "request_id", None)
            fut = self._requests.pop(request_id, None) if isinstance(request_id, int) else None
            if fut is not None and not fut.done():
                fut.set_result(cmd)

    def pause_writing(self) -> None:
        if self._pipe is not None:
            self._pipe.set_reading(False)

    def resume_writing(self) -> None:
        if self._pipe is not None:
            self._pipe.set_reading(True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._handshake.done():
            self._fail_handshake(ConnectionError(f"broker {self.address} closed the connection"))
        if self._decoder is not None:
            self._decoder.release("connection closed")
        requests, self._requests = self._requests, {}
        for fut in requests.values():
            if not fut.done():
                fut.set_exception(ServiceNotReady(f"connection to broker {self.address} lost"))
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.broker_closed()

    # --- modes ---------------------------------------------------------------------------

    def pipe(self, end: PipeEnd) -> None:
        """From now on the broker's bytes go to ``end`` (those already read first)."""
        self._pipe = end
        early, self._early = self._early, b""
        if early:
            end.from_broker(early)
        if self.closed:
            self._pipe = None
            end.broker_closed()

    def write(self, data: bytes) -> None:
        if self._transport is not None and not self.closed:
            self._transport.write(data)

    def set_reading(self, reading: bool) -> None:
        """Stop or resume reading from the broker (the client's write buffer is full)."""
        transport = self._transport
        if transport is None or self.closed or transport.is_closing():
            return
        with contextlib.suppress(RuntimeError):  # already paused or resumed
            if reading:
                transport.resume_reading()
            else:
                transport.pause_reading()

    async def request(self, command: Any, timeout_s: float) -> Command:
        """Send ``command`` (a dataclass with ``request_id``) under a request id of this
        link and return the broker's answer as sent (its ``request_id`` is this link's).
        Raises :class:`~magnetar.common.errors.ServiceNotReady` when the connection is lost
        or no answer comes within ``timeout_s``."""
        if self._decoder is None:
            self._decoder = FrameDecoder(max_frame_size_bytes=DEFAULT_MAX_FRAME_SIZE_BYTES)
            early, self._early = self._early, b""
            if early:
                self._on_request_bytes(early)
        if self.closed:
            raise ServiceNotReady(f"connection to broker {self.address} lost")
        request_id = next(self._ids)
        fut: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = fut
        try:
            self.write(encode(dataclasses.replace(command, request_id=request_id)))
            async with asyncio.timeout(timeout_s):
                return await fut
        except TimeoutError:
            raise ServiceNotReady(
                f"broker {self.address} did not answer {command.TYPE.name} within {timeout_s:g} s"
            ) from None
        finally:
            self._requests.pop(request_id, None)

    def close(self) -> None:
        """Idempotent; a pipe's client side is told through :meth:`PipeEnd.broker_closed`."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
