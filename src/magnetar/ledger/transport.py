"""The seam between the ledger client and one bookie: :class:`BookieTransport`.

Two implementations keep one contract:

* :class:`~magnetar.ledger.bookie_client.BookieClient` — a pipelined TCP connection (the
  bookie protocol of :mod:`magnetar.bookie.codec`), for bookies in other processes;
* :class:`~magnetar.ledger.local_transport.LocalBookieTransport` — direct calls into a
  :class:`~magnetar.bookie.Bookie` running on the same event loop (the standalone), with no
  socket and no encoding.

Contract for both:

* every callback runs exactly once, on the event loop, never inside the call that
  registered it;
* an add is answered ``Status.OK`` only once the bookie's journal has fdatasync'ed it;
  any other status is the bookie's refusal (nothing was stored);
* ``error`` is set (:class:`~magnetar.bookie.errors.BookieUnavailable`) when the bookie
  cannot answer: connection lost or closed, bookie stopped, or no answer within the
  request timeout. Then the status/response is ``None``;
* requests are handed to the bookie in call order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from magnetar.bookie.codec import OpType, Request, Response, encode_frame

Callback = Callable[[Response | None, bytes, BaseException | None], None]
"""``callback(response, payload, error)`` for requests other than adds."""

AddCallback = Callable[[int | None, str, BaseException | None], None]
"""``callback(status, message, error)`` for adds (``status`` a ``Status`` value)."""


class AddRequest:
    """One entry to store, shared by every bookie of its write set.

    ``payload`` must not change after construction. The TCP encoding is made once, on first
    use, and reused for every replica (one request id for all of them)."""

    __slots__ = (
        "_frame",
        "checksum",
        "entry_id",
        "last_add_confirmed",
        "ledger_id",
        "payload",
        "recovery",
        "request_id",
    )

    def __init__(
        self,
        request_id: int,
        ledger_id: int,
        entry_id: int,
        last_add_confirmed: int,
        checksum: int,
        payload: bytes,
        recovery: bool = False,
    ) -> None:
        self.request_id = request_id
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.last_add_confirmed = last_add_confirmed
        self.checksum = checksum
        self.payload = payload
        self.recovery = recovery
        self._frame: list[bytes] | None = None

    def frame(self) -> list[bytes]:
        """The bookie-protocol frame (buffers for ``writelines``; the payload is not copied)."""
        frame = self._frame
        if frame is None:
            header = Request(
                request_id=self.request_id,
                op=OpType.ADD_ENTRY,
                ledger_id=self.ledger_id,
                entry_id=self.entry_id,
                last_add_confirmed=self.last_add_confirmed,
                checksum=self.checksum,
                recovery=self.recovery,
            ).SerializeToString()
            frame = self._frame = encode_frame(header, self.payload)
        return frame


Pending = tuple[Callable[..., None], float, bool]
"""A request waiting for its answer: ``(callback, deadline or generation, is an add)``."""


def answer(entry: Pending, response: Response, payload: bytes) -> None:
    """Complete a pending request with the bookie's response."""
    callback, _, is_add = entry
    if is_add:
        callback(response.status, response.message, None)
    else:
        callback(response, payload, None)


def fail(entry: Pending, exc: BaseException) -> None:
    """Complete a pending request with ``exc`` (the bookie cannot answer)."""
    callback, _, is_add = entry
    callback(None, "" if is_add else b"", exc)


class BookieTransport(Protocol):
    """Requests to one bookie (see the module docstring for the contract)."""

    bookie_id: str

    @property
    def closed(self) -> bool:
        """No more requests can succeed; the pool opens a new transport."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        ...

    def add(self, request: AddRequest, callback: AddCallback) -> None:
        """Store one entry on this bookie."""
        ...

    def request(self, request: Request, payload: bytes, callback: Callback) -> None:
        """Any other request; ``request.request_id`` must be set (unique per pool)."""
        ...

    def close(self) -> None:
        """Fail everything pending with ``BookieUnavailable`` and release the transport."""
        ...


__all__ = [
    "AddCallback",
    "AddRequest",
    "BookieTransport",
    "Callback",
    "Pending",
    "answer",
    "fail",
]
