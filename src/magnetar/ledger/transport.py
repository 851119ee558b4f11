"""The seams between the ledger client and bookies: :class:`BookieTransport` (requests to
one bookie) and :class:`LocalBookie` (what a bookie on this event loop offers).

Two transports keep one contract:

* :class:`~magnetar.ledger.bookie_client.BookieClient` — a pipelined TCP connection (the
  bookie protocol of :mod:`magnetar.bookie_protocol.codec`), for bookies in other processes;
* :class:`~magnetar.ledger.local_transport.LocalBookieTransport` — direct calls into a
  :class:`LocalBookie` running on the same event loop (the standalone's bookie), with no
  socket and no encoding.

Contract for both:

* every callback runs exactly once, on the event loop, never inside the call that
  registered it;
* an add is answered ``None`` only once the bookie's journal has fdatasync'ed it; else
  with the bookie's refusal (one class per status,
  :mod:`magnetar.bookie_protocol.errors`; nothing was stored) or
  :class:`~magnetar.bookie_protocol.errors.BookieUnavailable` when the bookie cannot answer:
  connection lost or closed, bookie stopped, or no answer within the request timeout;
* other requests are answered with the bookie's response, or with ``BookieUnavailable``
  (then the response is ``None``);
* requests are handed to the bookie in call order.

The ledger client imports nothing of the bookie server: whoever composes a process with a
bookie in it (the standalone) passes that bookie in as a :class:`LocalBookie`. A simulated,
fault-injecting bookie can take the same seat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from magnetar.bookie_protocol import codec
from magnetar.bookie_protocol.codec import OpType, Status, encode_frame, encode_frame_parts
from magnetar.bookie_protocol.errors import StatusError, error_for_status
from magnetar.bookie_protocol.responder import Responder
from magnetar.common.errors import PersistenceError

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Request, Response

Callback = Callable[["Response | None", bytes, BaseException | None], None]
"""``callback(response, payload, error)`` for requests other than adds."""

AddCallback = Callable[[PersistenceError | None], None]
"""``callback(error)`` for adds: ``None`` once stored durably, else why not."""


class AddRun:
    """Consecutive entries of one ledger to store, ``first_entry_id`` … ``last_entry_id``,
    shared by every bookie of their write set (a run of one for a single add).

    ``payloads`` and ``checksums`` must not change after construction (``checksums[i]`` is
    the CRC32C of ``payloads[i]``). ``checksums_computed``: the caller computed
    ``checksums`` from these very ``payloads`` in this process (a ledger handle's adds, a
    recovery's writes), so a bookie in this process takes them as they are; a run whose
    checksums came from elsewhere (entries read from another bookie) is checked there, and
    over TCP every run is checked (the bytes crossed a network).

    Over TCP the run is one request, id ``first_request_id``: ADD_ENTRY for a single entry,
    else ADD_ENTRIES, which a bookie stores whole or not at all; the encoding is made once,
    on first use, and reused for every replica."""

    __slots__ = (
        "_frames",
        "checksums",
        "checksums_computed",
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
        *,
        checksums_computed: bool = False,
    ) -> None:
        assert len(checksums) == len(payloads) > 0
        self.first_request_id = first_request_id
        self.ledger_id = ledger_id
        self.first_entry_id = first_entry_id
        self.last_add_confirmed = last_add_confirmed
        self.checksums = checksums
        self.payloads = payloads
        self.recovery = recovery
        self.checksums_computed = checksums_computed
        self._frames: list[bytes] | None = None

    @property
    def count(self) -> int:
        return len(self.payloads)

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + len(self.payloads) - 1

    def entry_frames(self) -> list[bytes]:
        """One ADD_ENTRY request per entry, request id ``first_request_id + i``, as buffers
        for ``writelines``: the run for a bookie that does not know ADD_ENTRIES (one of an
        older version)."""
        frames: list[bytes] = []
        for i, (checksum, payload) in enumerate(zip(self.checksums, self.payloads, strict=True)):
            header = codec.Request(
                request_id=self.first_request_id + i,
                op=OpType.ADD_ENTRY,
                ledger_id=self.ledger_id,
                entry_id=self.first_entry_id + i,
                last_add_confirmed=self.last_add_confirmed,
                checksum=checksum,
                recovery=self.recovery,
            ).SerializeToString()
            frames.extend(encode_frame(header, payload))
        return frames

    def frames(self) -> list[bytes]:
        """The run's bookie-protocol request as buffers for ``writelines`` (the payloads
        are not copied)."""
        frames = self._frames
        if frames is None:
            payloads = self.payloads
            if len(payloads) == 1:
                frames = self.entry_frames()
            else:
                header = codec.Request(
                    request_id=self.first_request_id,
                    op=OpType.ADD_ENTRIES,
                    ledger_id=self.ledger_id,
                    entry_id=self.first_entry_id,
                    last_add_confirmed=self.last_add_confirmed,
                    recovery=self.recovery,
                    entry_sizes=map(len, payloads),
                    checksums=self.checksums,
                ).SerializeToString()
                frames = encode_frame_parts(header, payloads)
            self._frames = frames
        return frames


Pending = tuple[Callable[..., None], float, bool]
"""A request waiting for its answer: ``(callback, deadline or generation, is an add)``."""


def answer(entry: Pending, response: Response, payload: bytes) -> None:
    """Complete a pending request with the bookie's response."""
    callback, _, is_add = entry
    if not is_add:
        callback(response, payload, None)
    elif response.status == Status.OK:
        callback(None)
    else:
        callback(error_for_status(response.status, response.message))


def fail(entry: Pending, exc: PersistenceError) -> None:
    """Complete a pending request with ``exc`` (the bookie cannot answer)."""
    callback, _, is_add = entry
    if is_add:
        callback(exc)
    else:
        callback(None, b"", exc)


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


DurableCallback = Callable[[list[int], StatusError | None], None]
"""``done(run_ids, error)``: the runs ``run_ids`` (in the order they were added) are durable
(``error`` None), or the journal write that carried them failed."""


class LocalBookie(Protocol):
    """What a bookie running on this event loop offers the ledger client.

    The bookie answers as over TCP (same statuses, same messages, acknowledgements only after
    the journal's fdatasync), without encoding. It tracks attached responders like
    connections: when it stops it calls their ``close``.
    """

    @property
    def bookie_id(self) -> str: ...

    @property
    def serving(self) -> bool:
        """Started and not stopped: requests may be handed over."""
        ...

    def add_entries(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_add_confirmed: int,
        checksums: Sequence[int],
        payloads: Sequence[bytes],
        recovery: bool,
        done: DurableCallback,
        run_id: int,
    ) -> StatusError | None:
        """Store entries ``first_entry_id``, ``+1``, ... of ``ledger_id`` (``checksums[i]``
        belongs to ``payloads[i]``) as the run ``run_id`` of the caller ``done``. Returns
        the refusal of the first entry refused (then nothing of the run is stored and
        ``done`` never hears of it), else ``None``. Later, never inside this call, once per
        journal sync for all of one caller's runs it covers (a group commit: one call, not
        one per run): ``done(run_ids, None)`` after the fdatasync (held back while the
        bookie's write cache is full), ``done(run_ids, error)`` if the journal write
        failed. Runs reach the journal in call order. ``done`` must be the same object for
        every run of a caller (a bound method kept once). Raises nothing."""
        ...

    def add_runs(
        self,
        runs: Sequence[tuple[int, int, int, Sequence[int], Sequence[bytes], bool, int, bool]],
        done: DurableCallback,
    ) -> list[StatusError | None]:
        """:meth:`add_entries` for each of ``runs`` — ``(ledger_id, first_entry_id,
        last_add_confirmed, checksums, payloads, recovery, run_id, checksums_computed)`` —
        in order, with one pass through the bookie's storage and journal for all the runs
        taken: the refusal of each run at its index (``None``: taken, answered through
        ``done``). A run whose ``checksums_computed`` (:attr:`AddRun.checksums_computed`)
        is true has its checksums taken as they are. Raises nothing."""
        ...

    def request(self, request: Request, payload: bytes, responder: Responder) -> None:
        """Handle any other request; the answer goes to ``responder`` (``reply`` now or
        later, ``reply_all`` after the journal sync for a fence or a recovery read that
        fenced)."""
        ...

    def attach(self, responder: Responder) -> None:
        """Track ``responder`` like a connection: the bookie closes it when it stops."""
        ...

    def detach(self, responder: Responder) -> None:
        """Stop tracking ``responder`` (it closed)."""
        ...


__all__ = [
    "AddCallback",
    "AddRun",
    "BookieTransport",
    "Callback",
    "DurableCallback",
    "LocalBookie",
    "Pending",
    "answer",
    "fail",
]
