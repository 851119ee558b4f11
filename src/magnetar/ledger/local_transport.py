"""A :class:`~magnetar.ledger.transport.BookieTransport` to a bookie in this process.

The standalone runs its bookie on the broker's event loop; going through a loopback socket
would cost two system calls, a protobuf encoding and a decoding each way per entry. This
transport calls the :class:`~magnetar.bookie.Bookie` directly instead:

* a run of adds goes to :meth:`Bookie.admit_adds <magnetar.bookie.Bookie.admit_adds>` at
  once, in one call (so runs reach the journal in call order) and is acknowledged with one
  callback from a journal ``on_durable`` callback — after the fdatasync that covers it,
  exactly like the ADD_ENTRY responses over TCP. Runs appended while the journal's
  :attr:`~magnetar.bookie.journal.Journal.groups_taken` does not change share one
  ``on_durable`` callback (they are in the same sync);
* other requests are handed to :meth:`Bookie.handle <magnetar.bookie.Bookie.handle>` on the
  next loop turn with this transport as the responder (typed responses, no encoding);
* refusals come back as the same statuses and messages as over TCP, on a later loop turn;
* when the bookie stops it closes this transport like a connection: everything pending
  fails with :class:`~magnetar.bookie.errors.BookieUnavailable`, and the pool stops using it;
* requests not answered within ``request_timeout_ms`` (a journal that failed never syncs
  again) fail with ``BookieUnavailable``, as over TCP.

Journal backpressure (``pause_reading``) does not apply: a caller on the same loop cannot be
paused, so memory is bounded by the callers' own limits (the managed ledger's
``pending_adds_max`` per topic, the broker's pending SENDs per connection).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Final

from magnetar.bookie import Bookie
from magnetar.bookie.codec import Request, Response, Status
from magnetar.bookie.errors import BookieUnavailable
from magnetar.bookie.server import Reply
from magnetar.common.clock import Clock
from magnetar.ledger.transport import (
    AddCallback,
    AddRun,
    Callback,
    Pending,
    answer,
    fail,
)

_SWEEPS_PER_TIMEOUT = 4
_OK: Final = int(Status.OK)  # a plain int: protobuf enum attributes run Python code
_INTERNAL_ERROR: Final = int(Status.INTERNAL_ERROR)


class LocalBookieTransport:
    """See the module docstring. Create after ``await bookie.start()``; owned by a
    :class:`~magnetar.ledger.bookie_client.BookiePool` (``pool.add_local``)."""

    def __init__(self, bookie: Bookie, clock: Clock, request_timeout_ms: int) -> None:
        if not bookie.serving:
            raise BookieUnavailable(f"bookie {bookie.bookie_id or '?'} is not serving")
        self.bookie_id = bookie.bookie_id
        self._bookie = bookie
        self._clock = clock
        self._sweep_s = request_timeout_ms / 1000 / _SWEEPS_PER_TIMEOUT
        self._loop = asyncio.get_running_loop()
        # Entries carry the sweep generation they were registered in, not a deadline: no
        # clock read per request. Insertion order = generation order.
        self._pending: dict[int, Pending] = {}
        self._generation = 0
        self._group: list[int] | None = None
        self._group_taken = -1
        # Set by close(), which the bookie calls when it stops (it tracks this transport).
        self.closed = False
        bookie.attach(self)
        self._sweeper = self._loop.create_task(self._sweep(), name=f"local-bookie-{self.bookie_id}")

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # -- requests -----------------------------------------------------------------------

    def add(self, run: AddRun, callback: AddCallback) -> None:
        if self.closed:
            self._refuse(callback, True)
            return
        bookie = self._bookie
        status, message = bookie.admit_adds(
            run.ledger_id,
            run.first_entry_id,
            run.last_add_confirmed,
            run.checksums,
            run.payloads,
            run.recovery,
        )
        if status != _OK:
            self._loop.call_soon(callback, status, message, None)
            return
        rid = run.first_request_id
        self._pending[rid] = (callback, self._generation, True)
        journal = bookie.journal
        assert journal is not None
        taken = journal.groups_taken
        group = self._group
        if group is None or self._group_taken != taken:
            group = self._group = [rid]
            self._group_taken = taken
            journal.on_durable(partial(self._synced, group), partial(self._sync_failed, group))
            bookie.check_write_cache()  # once per sync group is often enough
        else:
            group.append(rid)

    def _synced(self, group: list[int]) -> None:
        if self._group is group:
            self._group = None
        if self._bookie.write_cache_full:
            # Acknowledged once the checkpoint in flight ends: the callers' windows stop
            # adds meanwhile, so the write buffers stay near twice their bound.
            self._bookie.on_write_cache_room(partial(self._acknowledge, group))
            return
        self._acknowledge(group)

    def _acknowledge(self, group: list[int]) -> None:
        pending = self._pending
        for rid in group:
            entry = pending.pop(rid, None)
            if entry is not None:
                entry[0](_OK, "", None)

    def _sync_failed(self, group: list[int], exc: BaseException) -> None:
        """The journal write covering ``group`` failed: answer each add as the bookie
        answers over TCP (INTERNAL_ERROR)."""
        if self._group is group:
            self._group = None
        pending = self._pending
        message = f"journal write failed: {exc}"
        for rid in group:
            entry = pending.pop(rid, None)
            if entry is not None:
                entry[0](_INTERNAL_ERROR, message, None)

    def request(self, request: Request, payload: bytes, callback: Callback) -> None:
        if self.closed:
            self._refuse(callback, False)
            return
        self._pending[request.request_id] = (callback, self._generation, False)
        self._loop.call_soon(self._handle, request, payload)

    def _handle(self, request: Request, payload: bytes) -> None:
        if self.closed:
            return  # already failed by close()
        durable: list[Reply] = []
        self._bookie.handle(request, payload, self, durable)
        self._bookie.after_batch(self, durable)

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
        self._group = None
        self._sweeper.cancel()
        self._bookie.connection_closed(self)
        pending, self._pending = self._pending, {}
        exc = BookieUnavailable(f"bookie {self.bookie_id} closed")
        for entry in pending.values():
            fail(entry, exc)


__all__ = ["LocalBookieTransport"]
