"""Client side of the bookie protocol: one pipelined connection per bookie.

:class:`BookieClient` sends requests without waiting (any number in flight, any ledgers) and
matches responses by request id. Request ids come from one counter per
:class:`BookiePool`, so a caller can encode a request header once and send the same bytes to
several bookies (what a striped add does). Requests written during one event-loop turn go
out in one ``writelines``.

Completion is by callback (the :class:`~magnetar.ledger.transport.BookieTransport`
contract), called exactly once: with ``error`` set (:class:`BookieUnavailable`) if the
connection fails or the request outlives ``request_timeout_ms``. Callbacks run on the event
loop and must not raise.

A pool may also hold in-process transports (:meth:`BookiePool.add_local`): requests to
those bookies then skip the network (see :mod:`magnetar.ledger.local_transport`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, cast

from magnetar.bookie_protocol.codec import FRAME_SIZE_MAX_BYTES, ResponseDecoder, encode_frame
from magnetar.bookie_protocol.errors import BadRequest, BookieUnavailable
from magnetar.common.clock import Clock
from magnetar.common.errors import PersistenceError, ProtocolError
from magnetar.ledger.transport import (
    AddCallback,
    AddRun,
    BookieTransport,
    Callback,
    Pending,
    answer,
    fail,
)

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Request, Response

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 5.0


def _unknown_operation(error: PersistenceError | None) -> bool:
    """The answer a bookie that does not know ADD_ENTRIES (an older version) gives it."""
    return isinstance(error, BadRequest) and str(error).startswith("unknown operation")


class _RunAnswers:
    """Folds the answers to the ADD_ENTRY requests of one run into the run's single
    answer."""

    __slots__ = ("_callback", "_remaining")

    def __init__(self, count: int, callback: AddCallback) -> None:
        self._remaining = count
        self._callback: AddCallback | None = callback

    def on_answer(self, error: PersistenceError | None) -> None:
        callback = self._callback
        if callback is None:
            return  # answered already (a refusal came first)
        if error is None:
            self._remaining -= 1
            if self._remaining:
                return
        self._callback = None
        callback(error)


class _RunRequest:
    """The answer to one ADD_ENTRIES request: passed on, unless the bookie does not know
    the operation; then the run goes again as ADD_ENTRY requests."""

    __slots__ = ("callback", "client", "run")

    def __init__(self, client: BookieClient, run: AddRun, callback: AddCallback) -> None:
        self.client = client
        self.run = run
        self.callback = callback

    def __call__(self, error: PersistenceError | None) -> None:
        if error is not None and _unknown_operation(error):
            self.client.add_entry_by_entry(self.run, self.callback)
        else:
            self.callback(error)


class BookieClient(asyncio.Protocol):
    """A :class:`~magnetar.ledger.transport.BookieTransport` over one TCP connection."""

    def __init__(self, bookie_id: str, clock: Clock, request_timeout_ms: int) -> None:
        self.bookie_id = bookie_id
        self._clock = clock
        self._timeout_s = request_timeout_ms / 1000
        self._decoder = ResponseDecoder(FRAME_SIZE_MAX_BYTES)
        self._pending: dict[int, Pending] = {}
        self._outbox: list[bytes] = []
        self._flush_scheduled = False
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self.closed = False
        self._sweeper: asyncio.Task[None] | None = None
        self._entry_by_entry = False
        """The bookie does not know ADD_ENTRIES: runs go as ADD_ENTRY requests."""

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self._sweeper = self._loop.create_task(self._sweep())

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(BookieUnavailable(f"connection to {self.bookie_id} lost: {exc or 'closed'}"))

    def data_received(self, data: bytes) -> None:
        try:
            responses = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("bad data from bookie %s: %s", self.bookie_id, exc)
            self.close()
            return
        pending = self._pending
        for response, payload in responses:
            entry = pending.pop(response.request_id, None)
            if entry is not None:
                answer(entry, response, payload)

    # -- requests --------------------------------------------------------------------------

    def add(self, run: AddRun, callback: AddCallback) -> None:
        """One request for the whole run (:meth:`AddRun.frames`); ``callback`` once, with
        its answer. A bookie that answers ADD_ENTRIES as an unknown operation (an older
        version, during a rolling upgrade) gets that run and every later one on this
        connection entry by entry (:meth:`add_entry_by_entry`)."""
        if run.count == 1:
            self._send(run.first_request_id, run.frames(), callback, True)
        elif self._entry_by_entry:
            self.add_entry_by_entry(run, callback)
        else:
            self._send(run.first_request_id, run.frames(), _RunRequest(self, run, callback), True)

    def add_entry_by_entry(self, run: AddRun, callback: AddCallback) -> None:
        """One ADD_ENTRY request per entry of ``run`` (request ids ``first_request_id``
        on); ``callback`` once, when the last is answered OK or the first is not."""
        if not self._entry_by_entry:
            log.warning(
                "bookie %s does not know ADD_ENTRIES (an older version?): adding entry by"
                " entry on this connection",
                self.bookie_id,
            )
            self._entry_by_entry = True
        if self.closed:
            exc = BookieUnavailable(f"connection to {self.bookie_id} is closed")
            self._loop.call_soon(fail, (callback, 0.0, True), exc)
            return
        answers = _RunAnswers(run.count, callback)
        deadline = self._clock.monotonic_s() + self._timeout_s
        pending = self._pending
        for rid in range(run.first_request_id, run.first_request_id + run.count):
            pending[rid] = (answers.on_answer, deadline, True)
        self._outbox.extend(run.entry_frames())
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def request(self, request: Request, payload: bytes, callback: Callback) -> None:
        self._send(
            request.request_id, encode_frame(request.SerializeToString(), payload), callback, False
        )

    def _send(
        self, request_id: int, frame: list[bytes], callback: Callable[..., None], is_add: bool
    ) -> None:
        """Send an encoded request frame whose header carries ``request_id``."""
        if self.closed:
            exc = BookieUnavailable(f"connection to {self.bookie_id} is closed")
            self._loop.call_soon(fail, (callback, 0.0, is_add), exc)
            return
        self._pending[request_id] = (
            callback,
            self._clock.monotonic_s() + self._timeout_s,
            is_add,
        )
        self._outbox.extend(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._outbox = self._outbox, []
        if self._transport is not None and not self.closed:
            self._transport.writelines(out)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def _sweep(self) -> None:
        """Fail requests that outlived the timeout (the bookie is slow or gone)."""
        while not self.closed:
            await self._clock.sleep(max(self._timeout_s / 4, 0.05))
            now = self._clock.monotonic_s()
            expired = [rid for rid, (_, deadline, _) in self._pending.items() if deadline <= now]
            for rid in expired:
                entry = self._pending.pop(rid, None)
                if entry is not None:
                    fail(entry, BookieUnavailable(f"request to {self.bookie_id} timed out"))

    def _fail_all(self, exc: BookieUnavailable) -> None:
        self.closed = True
        self._transport = None
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            fail(entry, exc)
        if self._sweeper is not None:
            self._sweeper.cancel()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail_all(BookieUnavailable(f"connection to {self.bookie_id} closed"))


Connect = Callable[[str], Awaitable[BookieTransport]]
"""``connect(bookie_id)``: a new transport to that bookie, or :class:`BookieUnavailable`."""


class BookiePool:
    """Connections to bookies by id (``host:port``), opened on first use and reopened after
    a failure. Owns request ids.

    ``connect`` replaces the TCP connection with another transport (a simulated network);
    it raises :class:`BookieUnavailable` when the bookie cannot be reached."""

    def __init__(
        self, clock: Clock, *, request_timeout_ms: int = 10_000, connect: Connect | None = None
    ) -> None:
        self._clock = clock
        self._request_timeout_ms = request_timeout_ms
        self._connect = connect
        self._clients: dict[str, BookieTransport] = {}
        self._connecting: dict[str, asyncio.Future[BookieTransport]] = {}
        self._next_id = 1

    def next_request_id(self) -> int:
        return self.next_request_ids(1)

    def next_request_ids(self, count: int) -> int:
        """Reserve ``count`` consecutive request ids; returns the first."""
        first = self._next_id
        self._next_id = first + count
        return first

    def add_local(self, transport: BookieTransport) -> None:
        """Serve ``transport.bookie_id`` with ``transport`` (an in-process bookie) instead
        of a TCP connection. Once it is closed (the bookie stopped), the pool falls back to
        connecting over TCP like for any other bookie."""
        self._clients[transport.bookie_id] = transport

    def cached(self, bookie_id: str) -> BookieTransport | None:
        client = self._clients.get(bookie_id)
        if client is None or client.closed:
            return None
        return client

    async def get(self, bookie_id: str) -> BookieTransport:
        """A connected client. Raises :class:`BookieUnavailable` if the bookie cannot be
        reached."""
        client = self.cached(bookie_id)
        if client is not None:
            return client
        fut = self._connecting.get(bookie_id)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._connecting[bookie_id] = fut
            try:
                connected = await (self._connect or self._connect_tcp)(bookie_id)
                self._clients[bookie_id] = connected
                fut.set_result(connected)
            except BookieUnavailable as exc:
                fut.set_exception(exc)
                fut.exception()  # mark retrieved
                raise
            except (OSError, TimeoutError, ValueError) as exc:
                err = BookieUnavailable(f"cannot connect to bookie {bookie_id}: {exc}")
                fut.set_exception(err)
                fut.exception()  # mark retrieved
                raise err from exc
            finally:
                self._connecting.pop(bookie_id, None)
            return connected
        return await asyncio.shield(fut)

    async def _connect_tcp(self, bookie_id: str) -> BookieTransport:
        host, port = bookie_id.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        _, tcp = await asyncio.wait_for(
            loop.create_connection(
                lambda: BookieClient(bookie_id, self._clock, self._request_timeout_ms),
                host,
                int(port),
            ),
            CONNECT_TIMEOUT_S,
        )
        return tcp

    async def call(
        self, bookie_id: str, request: Request, payload: bytes = b""
    ) -> tuple[Response, bytes]:
        """One request, awaited. Raises :class:`BookieUnavailable`; the caller interprets
        the response status."""
        client = await self.get(bookie_id)
        fut: asyncio.Future[tuple[Response, bytes]] = asyncio.get_running_loop().create_future()
        request.request_id = self.next_request_id()

        def done(resp: Response | None, body: bytes, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                assert resp is not None
                fut.set_result((resp, body))

        client.request(request, payload, done)
        return await fut

    async def close(self) -> None:
        for client in list(self._clients.values()):
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
