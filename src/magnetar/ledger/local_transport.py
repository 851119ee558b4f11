"""A :class:`~magnetar.ledger.transport.BookieTransport` to a bookie in this process.

The standalone runs its bookie on the broker's event loop; going through a loopback socket
would cost two system calls, a protobuf encoding and a decoding each way per entry. This
transport calls the bookie through the :class:`~magnetar.ledger.transport.LocalBookie` seam
instead:

* the runs of adds of one loop turn (of many ledgers: a connection's read carries SENDs for
  many topics) go to :meth:`LocalBookie.add_runs` together, in one call at the end of the
  turn (``call_soon``; runs reach the journal in call order, before any other request made
  after them), and are acknowledged from the bookie's ``done`` callback — after the
  fdatasync that covers them, exactly like the ADD_ENTRY responses over TCP; one call
  answers every run of this transport that one sync covered;
* other requests are handed to :meth:`LocalBookie.request` on the next loop turn with this
  transport as the responder (typed responses, no encoding);
* refusals come back as the same errors, with the same messages, as over TCP, on a later
  loop turn;
* when the bookie stops it closes this transport like a connection: everything pending
  fails with :class:`~magnetar.bookie_protocol.errors.BookieUnavailable`, and the pool stops
  using it;
* requests not answered within ``request_timeout_ms`` (a journal that failed never syncs
  again) fail with ``BookieUnavailable``, as over TCP.

Journal backpressure (``pause_reading``) does not apply: a caller on the same loop cannot be
paused, so memory is bounded by the callers' own limits (the managed ledger's
``pending_adds_max`` per topic, the broker's pending SENDs per connection).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from magnetar.bookie_protocol.errors import BookieUnavailable, StatusError
from magnetar.bookie_protocol.responder import Reply
from magnetar.common.clock import Clock
from magnetar.ledger.transport import (
    AddCallback,
    AddRun,
    Callback,
    LocalBookie,
    Pending,
    answer,
    fail,
)

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Request, Response

_SWEEPS_PER_TIMEOUT = 4


class LocalBookieTransport:
    """See the module docstring. Create after ``await bookie.start()``; owned by a
    :class:`~magnetar.ledger.bookie_client.BookiePool` (``pool.add_local``)."""

    def __init__(self, bookie: LocalBookie, clock: Clock, request_timeout_ms: int) -> None:
        if not bookie.serving:
            raise BookieUnavailable(f"bookie {bookie.bookie_id or '?'} is not serving")
        self.bookie_id = bookie.bookie_id
        self._bookie = bookie
        self._add_runs = bookie.add_runs  # bound once
        self._queued: list[tuple[AddRun, AddCallback]] = []
        """Runs of adds of this loop turn, handed to the bookie by :meth:`_flush_adds`."""
        self._durable_callback = self._durable  # one object: the bookie groups runs by it
        self._clock = clock
        self._sweep_s = request_timeout_ms / 1000 / _SWEEPS_PER_TIMEOUT
        self._loop = asyncio.get_running_loop()
        # Entries carry the sweep generation they were registered in, not a deadline: no
        # clock read per request. Insertion order = generation order.
        self._pending: dict[int, Pending] = {}
        self._generation = 0
        # Set by close(), which the bookie calls when it stops (it tracks this transport).
        self.closed = False
        bookie.attach(self)
        self._sweeper = self._loop.create_task(self._sweep(), name=f"local-bookie-{self.bookie_id}")

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._queued)

    # -- requests -----------------------------------------------------------------------

    def add(self, run: AddRun, callback: AddCallback) -> None:
        if self.closed:
            self._refuse(callback, True)
            return
        queued = self._queued
        if not queued:
            self._loop.call_soon(self._flush_adds)
        queued.append((run, callback))

    def _flush_adds(self) -> None:
        """Hand the runs queued this loop turn to the bookie in one call."""
        queued, self._queued = self._queued, []
        if self.closed or not queued:
            return  # failed by close()
        refusals = self._add_runs(
            [
                (
                    run.ledger_id,
                    run.first_entry_id,
                    run.last_add_confirmed,
                    run.checksums,
                    run.payloads,
                    run.recovery,
                    run.first_request_id,
                    run.checksums_computed,
                )
                for run, _ in queued
            ],
            self._durable_callback,
        )
        pending = self._pending
        generation = self._generation
        for (run, callback), refusal in zip(queued, refusals, strict=True):
            if refusal is None:
                pending[run.first_request_id] = (callback, generation, True)
            else:
                callback(refusal)

    def _durable(self, run_ids: list[int], error: StatusError | None) -> None:
        """The bookie's answer to the runs ``run_ids`` (one journal sync): durable
        (``None``), or their journal write failed (INTERNAL_ERROR, as over TCP)."""
        pending = self._pending
        for rid in run_ids:
            entry = pending.pop(rid, None)
            if entry is not None:
                entry[0](error)

    def request(self, request: Request, payload: bytes, callback: Callback) -> None:
        if self.closed:
            self._refuse(callback, False)
            return
        if self._queued:  # adds made before this request reach the bookie before it
            self._flush_adds()
        self._pending[request.request_id] = (callback, self._generation, False)
        self._loop.call_soon(self._handle, request, payload)

    def _handle(self, request: Request, payload: bytes) -> None:
        if self.closed:
            return  # already failed by close()
        self._bookie.request(request, payload, self)

    def _refuse(self, callback: AddCallback | Callback, is_add: bool) -> None:
        exc = BookieUnavailable(f"bookie {self.bookie_id} is not serving")
        self._loop.call_soon(fail, (callback, 0, is_add), exc)

    # -- Responder (the bookie answers here) -----------------------------------------------

    def reply(self, response: Response, payload: bytes = b"") -> None:
        entry = self._pending.pop(response.request_id, None)
        if entry is not None:
            answer(entry, response, payload)

    def reply_all(self, replies: list[Reply]) -> None:
        for response, payload in replies:
            self.reply(response, payload)

    def pause_reading(self) -> None:
        """Nothing to pause (see the module docstring)."""

    def resume_reading(self) -> None:
        """Nothing to resume."""

    # -- life cycle -----------------------------------------------------------------------

    async def _sweep(self) -> None:
        while not self.closed:
            await self._clock.sleep(self._sweep_s)
            self._generation += 1
            oldest = self._generation - _SWEEPS_PER_TIMEOUT
            expired = []
            for rid, (_, generation, _) in self._pending.items():
                if generation > oldest:
                    break
                expired.append(rid)
            for rid in expired:
                entry = self._pending.pop(rid, None)
                if entry is not None:
                    fail(entry, BookieUnavailable(f"request to {self.bookie_id} timed out"))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._sweeper.cancel()
        self._bookie.detach(self)
        pending, self._pending = self._pending, {}
        queued, self._queued = self._queued, []
        exc = BookieUnavailable(f"bookie {self.bookie_id} closed")
        for entry in pending.values():
            fail(entry, exc)
        for _, callback in queued:
            fail((callback, 0, True), exc)


__all__ = ["LocalBookieTransport"]
