"""The thin asyncio shell around a bookie: one :class:`BookieConnection` per TCP connection.

It feeds bytes to the sans-IO :class:`~magnetar.bookie_protocol.codec.RequestDecoder`, hands
every request of a read to the :class:`RequestHandler` (the bookie's
:class:`~magnetar.bookie.request_processor.RequestProcessor`), and writes responses with one
``writelines`` per batch. Add responses are released only once the journal has synced them
(the handler appends them to ``durable``); everything else goes out as soon as it is ready.
A malformed or oversized frame closes this connection only.

The handler answers through the :class:`~magnetar.bookie_protocol.responder.Responder` seam,
which this connection implements by encoding; an in-process caller
(``magnetar.ledger.local_transport``) implements it by handing the typed responses over
directly.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol, cast

from magnetar.bookie_protocol.codec import FRAME_SIZE_MAX_BYTES, RequestDecoder, encode_response
from magnetar.bookie_protocol.responder import Reply, Responder
from magnetar.common.errors import ProtocolError

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Request, Response

log = logging.getLogger(__name__)


class RequestHandler(Protocol):
    def handle(
        self, request: Request, payload: bytes, conn: Responder, durable: list[Reply]
    ) -> None:
        """Handle one request. Append answers that must wait for the journal to
        ``durable``; give others to ``conn.reply`` (now or later)."""
        ...

    def after_batch(self, conn: Responder, durable: list[Reply]) -> None:
        """Called once per read from the socket, after every request in it was handled."""
        ...

    def connection_closed(self, conn: Responder) -> None: ...


class BookieConnection(asyncio.Protocol):
    def __init__(
        self, handler: RequestHandler, frame_size_max_bytes: int = FRAME_SIZE_MAX_BYTES
    ) -> None:
        self._handler = handler
        self._decoder = RequestDecoder(frame_size_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self._handler.connection_closed(self)

    def data_received(self, data: bytes) -> None:
        try:
            requests = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        durable: list[Reply] = []
        handle = self._handler.handle
        for request, payload in requests:
            handle(request, payload, self, durable)
        self._handler.after_batch(self, durable)

    def reply(self, response: Response, payload: bytes = b"") -> None:
        if self.transport is not None and not self.closed:
            self.transport.writelines(encode_response(response, payload))

    def reply_all(self, replies: list[Reply]) -> None:
        if self.transport is not None and not self.closed:
            out: list[bytes] = []
            for response, payload in replies:
                out.extend(encode_response(response, payload))
            self.transport.writelines(out)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closed = True
