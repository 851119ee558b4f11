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

from collections.abc import Callable, Sequence
from typing import Protocol

from magnetar.bookie.codec import OpType, Request, Response, encode_frame

Callback = Callable[[Response | None, bytes, BaseException | None], None]
"""``callback(response, payload, error)`` for requests other than adds."""

AddCallback = Callable[[int | None, str, BaseException | None], None]
"""``callback(status, message, error)`` for adds (``status`` a ``Status`` value)."""


class AddRun:
    """Consecutive entries of one ledger to store, ``first_entry_id`` … ``last_entry_id``,
    shared by every bookie of their write set (a run of one for a single add).

    ``payloads`` and ``checksums`` must not change after construction (``checksums[i]`` is
    the CRC32C of ``payloads[i]``). Over TCP each entry is one ADD_ENTRY request, request
    id ``first_request_id + i``; the encoding is made once, on first use, and reused for
    every replica."""

    __slots__ = (
        "_frames",
        "checksums",
        "first_entry_id",
        "first_request_id",
        "last_add_confirmed",
        "ledger_id",
        "payloads",
        "recovery",
    )

    def __init__(
        self,
        first_request_id: int,
        ledger_id: int,
        first_entry_id: int,
        last_add_confirmed: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        recovery: bool = False,
    ) -> None:
        assert len(checksums) == len(payloads) > 0
        self.first_request_id = first_request_id
        self.ledger_id = ledger_id
        self.first_entry_id = first_entry_id
        self.last_add_confirmed = last_add_confirmed
        self.checksums = checksums
        self.payloads = payloads
        self.recovery = recovery
        self._frames: list[bytes] | None = None

    @property
    def count(self) -> int:
        return len(self.payloads)

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + len(self.payloads) - 1

    def frames(self) -> list[bytes]:
        """The bookie-protocol frames, one per entry in order (buffers for ``writelines``;
        the payloads are not copied)."""
        frames = self._frames
        if frames is None:
            frames = []
            for i, (checksum, payload) in enumerate(
                zip(self.checksums, self.payloads, strict=True)
            ):
                header = Request(
                    request_id=self.first_request_id + i,
                    op=OpType.ADD_ENTRY,
                    ledger_id=self.ledger_id,
                    entry_id=self.first_entry_id + i,
                    last_add_confirmed=self.last_add_confirmed,
                    checksum=checksum,
                    recovery=self.recovery,
                ).SerializeToString()
                frames.extend(encode_frame(header, payload))
            self._frames = frames
        return frames


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

    def add(self, run: AddRun, callback: AddCallback) -> None:
        """Store a run of entries on this bookie: ``callback`` once, OK when every entry
        of the run is durable, else the first refusal (or the error) of any of them."""
        ...

    def request(self, request: Request, payload: bytes, callback: Callback) -> None:
        """Any other request; ``request.request_id`` must be set (unique per pool)."""
        ...

    def close(self) -> None:
        """Fail everything pending with ``BookieUnavailable`` and release the transport."""
        ...


__all__ = [
    "AddCallback",
    "AddRun",
    "BookieTransport",
    "Callback",
    "Pending",
    "answer",
    "fail",
]
