"""Connections from a ledger client to simulated bookies over the simulated network: a
:class:`~magnetar.ledger.transport.BookieTransport` (the client's end) and the bookie's end,
a :class:`~magnetar.bookie_protocol.responder.Responder`.

Every request and every answer crosses a :class:`~magnetar.testing.simulation.network.Link`
(in order per direction, delayed, held by partitions). A crashed bookie's ends answer
nothing more; the client's end learns of it from a reset sent back on the link (so a
partition delays that too), and every later request on it draws another reset. Requests not
answered within the request timeout fail with
:class:`~magnetar.bookie_protocol.errors.BookieUnavailable`, as over TCP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from magnetar.bookie_protocol.codec import Request, Response
from magnetar.bookie_protocol.errors import BookieUnavailable, StatusError
from magnetar.bookie_protocol.responder import Reply
from magnetar.ledger.bookie_client import CONNECT_TIMEOUT_S
from magnetar.ledger.transport import AddCallback, AddRun, BookieTransport, Callback, answer, fail
from magnetar.testing.simulation import SimulatedNetwork
from magnetar.testing.simulation.network import Link

from .bookie import SimulatedBookie


class BookieEnd:
    """The bookie's end of one connection."""

    def __init__(self, bookie: SimulatedBookie, client: ClientEnd, to_client: Link) -> None:
        self._bookie = bookie
        self._client = client
        self._to_client = to_client
        self.durable = self._durable  # one object: the bookie groups runs by it

    # Responder
    def reply(self, response: Response, payload: bytes = b"") -> None:
        if self._bookie.serves(self):
            self._to_client.send(lambda: self._client.answered(response, payload))

    def reply_all(self, replies: list[Reply]) -> None:
        for response, payload in replies:
            self.reply(response, payload)

    def pause_reading(self) -> None:
        """Journal backpressure: the simulated journal never holds enough to pause."""

    def resume_reading(self) -> None:
        """See :meth:`pause_reading`."""

    def close(self) -> None:
        """The bookie closed the connection."""
        self._bookie.detach(self)
        self._to_client.send(self._client.reset)

    def bookie_died(self) -> None:
        self._to_client.send(self._client.reset)

    def _durable(self, run_ids: list[int], error: StatusError | None) -> None:
        if self._bookie.serves(self):
            self._to_client.send(lambda: self._client.durable(run_ids, error))

    # requests arriving from the client
    def add(self, run: AddRun) -> None:
        if not self._bookie.serves(self):
            self._to_client.send(self._client.reset)
            return
        processor = self._bookie.processor
        assert processor is not None
        refusal = processor.add_entries(
            run.ledger_id,
            run.first_entry_id,
            run.last_add_confirmed,
            run.checksums,
            run.payloads,
            run.recovery or self._bookie.ignores_fences,
            self.durable,
            run.first_request_id,
        )
        if refusal is not None:
            self._to_client.send(lambda: self._client.refused(run.first_request_id, refusal))

    def request(self, request: Request, payload: bytes) -> None:
        if not self._bookie.serves(self):
            self._to_client.send(self._client.reset)
            return
        self._bookie.request(request, payload, self)


class ClientEnd:
    """The ledger client's end of one connection (see the module docstring)."""

    def __init__(
        self,
        client_name: str,
        bookie: SimulatedBookie,
        network: SimulatedNetwork,
        request_timeout_ms: int,
    ) -> None:
        self.bookie_id = bookie.bookie_id
        self._loop = network.loop
        self._to_bookie = network.link(client_name, bookie.bookie_id)
        self._bookie_end = BookieEnd(bookie, self, network.link(bookie.bookie_id, client_name))
        bookie.attach(self._bookie_end)
        self._timeout_s = request_timeout_ms / 1000
        # Deadlines in insertion order (one timeout for all): a sweep a quarter of the
        # timeout apart fails the expired ones, instead of one timer per request.
        self._pending: dict[int, tuple[Callable[..., None], float, bool]] = {}
        self._sweeping = False
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _register(self, request_id: int, callback: Callable[..., None], is_add: bool) -> None:
        self._pending[request_id] = (callback, self._loop.time() + self._timeout_s, is_add)
        if not self._sweeping:
            self._sweeping = True
            self._loop.call_later(self._timeout_s / 4, self._sweep)

    def _take(self, request_id: int) -> tuple[Callable[..., None], float, bool] | None:
        return self._pending.pop(request_id, None)

    def _sweep(self) -> None:
        now = self._loop.time()
        expired = []
        for rid, (_, deadline, _) in self._pending.items():
            if deadline > now:
                break
            expired.append(rid)
        for rid in expired:
            entry = self._pending.pop(rid)
            fail(entry, BookieUnavailable(f"request to {self.bookie_id} timed out"))
        if self._pending and not self.closed:
            self._loop.call_later(self._timeout_s / 4, self._sweep)
        else:
            self._sweeping = False

    def _refuse(self, callback: Callable[..., None], is_add: bool) -> None:
        exc = BookieUnavailable(f"connection to {self.bookie_id} closed")
        self._loop.call_soon(fail, (callback, 0.0, is_add), exc)

    # BookieTransport
    def add(self, run: AddRun, callback: AddCallback) -> None:
        if self.closed:
            self._refuse(callback, True)
            return
        self._register(run.first_request_id, callback, True)
        end = self._bookie_end
        self._to_bookie.send(lambda: end.add(run))

    def request(self, request: Request, payload: bytes, callback: Callback) -> None:
        if self.closed:
            self._refuse(callback, False)
            return
        self._register(request.request_id, callback, False)
        end = self._bookie_end
        self._to_bookie.send(lambda: end.request(request, payload))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._to_bookie.cut()
        pending, self._pending = self._pending, {}
        exc = BookieUnavailable(f"connection to {self.bookie_id} closed")
        for entry in pending.values():
            fail(entry, exc)

    # answers arriving from the bookie
    def answered(self, response: Response, payload: bytes) -> None:
        entry = self._take(response.request_id)
        if entry is not None:
            answer(entry, response, payload)

    def refused(self, request_id: int, refusal: StatusError) -> None:
        entry = self._take(request_id)
        if entry is not None:
            entry[0](refusal)

    def durable(self, run_ids: list[int], error: StatusError | None) -> None:
        for rid in run_ids:
            entry = self._take(rid)
            if entry is not None:
                entry[0](error)

    def reset(self) -> None:
        """The connection was reset (the bookie crashed or closed it)."""
        self.close()


def connector(
    client_name: str,
    bookies: dict[str, SimulatedBookie],
    network: SimulatedNetwork,
    request_timeout_ms: int,
) -> Callable[[str], Awaitable[BookieTransport]]:
    """The ledger client's ``connect``: a handshake's round trip, refused at once by a
    crashed bookie, timing out across a partition."""

    async def connect(bookie_id: str) -> BookieTransport:
        bookie = bookies[bookie_id]
        if not network.connected(client_name, bookie_id):
            await asyncio.sleep(CONNECT_TIMEOUT_S)
            raise BookieUnavailable(f"cannot connect to bookie {bookie_id}: timed out")
        await asyncio.sleep(2 * network.delay_s())
        if not bookie.up or not network.connected(client_name, bookie_id):
            raise BookieUnavailable(f"cannot connect to bookie {bookie_id}: refused")
        return ClientEnd(client_name, bookie, network, request_timeout_ms)

    return connect


__all__ = ["BookieEnd", "ClientEnd", "connector"]
