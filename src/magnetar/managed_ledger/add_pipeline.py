"""The add pipeline: appends queued, sent to the current ledger in runs, and accounted in
order.

Ordering: adds are queued in call order (:meth:`AddPipeline.add_entry`,
:meth:`~AddPipeline.add_entry_nowait` and :meth:`~AddPipeline.add_run` share one queue)
and sent to the current ledger as one run per pump (one request per bookie); completions
are accounted strictly in entry order, consecutive entries of one caller's run as one
piece (:data:`RunCallback`). At most ``pending_adds_max`` adds are queued or in flight;
past that, adds wait in tasks for room, still in order.

Failures (the managed ledger's docstring tells the whole story):

* an entry larger than the storage takes (:func:`~magnetar.managed_ledger.storage.never_fits`)
  fails alone with :class:`EntryTooLargeForStorage`; the ledger goes on;
* any other failed write rolls over and re-sends the failed and later adds, in order, to
  the new ledger; an add tried on ``add_attempts_max`` ledgers fails instead;
* when the ledger started after a failure fails too, storage is not writable: every
  queued add fails with a :class:`ManagedLedgerError`, the state becomes ``WRITE_FAILED``,
  and appends fail at once until a backoff (``write_retry_backoff_min_ms`` doubling up to
  ``write_retry_backoff_max_ms``, on the injected clock) ends; the first append after it
  starts a new ledger;
* a fenced write fences the managed ledger (:meth:`ManagedLedger._fence`).

The pump and the completions run on the event loop with no await and no copy of entry
data (the broker's publish path).
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from itertools import accumulate, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from magnetar.common.errors import MagnetarError
from magnetar.common.latency import LatencyHistogram
from magnetar.managed_ledger.config import BacklogQuotaPolicy
from magnetar.managed_ledger.errors import (
    BacklogQuotaExceeded,
    EntryTooLargeForStorage,
    ManagedLedgerError,
    ManagedLedgerTerminated,
)
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.state import TAKES_ADDS, State
from magnetar.managed_ledger.storage import LedgerWriter, is_fenced, never_fits

if TYPE_CHECKING:
    from magnetar.managed_ledger.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

AddCallback = Callable[[Position | None, BaseException | None], None]
"""An append's outcome: ``(position, None)`` once stored, or ``(None, error)``."""

RunCallback = Callable[[int, int, Position | None, BaseException | None], None]
"""A run of appends' outcome, in pieces: ``(offset, count, first_position, None)`` once the
entries ``offset`` … ``offset + count - 1`` of the run are stored at ``first_position`` and
the positions after it in the same ledger, or ``(offset, count, None, error)`` when they
failed. Each entry is in exactly one piece; stored pieces come in append order (across
runs too), a failed piece may come before earlier pieces are reported."""


def _single(
    callback: AddCallback,
    _offset: int,
    _count: int,
    position: Position | None,
    error: BaseException | None,
) -> None:
    callback(position, error)


_data_of: Final = attrgetter("data")
_messages_of: Final = attrgetter("messages")
_started_s_of: Final = attrgetter("started_s")
_attempt_of: Final = attrgetter("attempt")


class AddOp:
    """One queued or in-flight append."""

    __slots__ = (
        "attempt",
        "callback",
        "data",
        "done",
        "entry_id",
        "error",
        "finished",
        "messages",
        "offset",
        "started_s",
    )

    def __init__(
        self, data: bytes, messages: int, callback: RunCallback, offset: int, started_s: float
    ) -> None:
        self.data = data
        self.messages = messages
        self.callback = callback
        self.offset = offset
        """This entry's place in its caller's run."""
        self.started_s = started_s
        self.finished = False
        self.attempt = 0
        self.done = False
        """The current attempt's add came back (stored or failed)."""
        self.entry_id = -1
        self.error: BaseException | None = None

    def finish(self, position: Position | None, error: BaseException | None) -> None:
        """Report the outcome to the caller once (later calls are ignored)."""
        if not self.finished:
            self.finished = True
            self.callback(self.offset, 1, position, error)


def _resolve(future: asyncio.Future[Position]) -> RunCallback:
    """A :data:`RunCallback` of a run of one that completes ``future``."""

    def done(
        _offset: int, _count: int, position: Position | None, error: BaseException | None
    ) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
            future.exception()  # a caller that went away must not log "never retrieved"
        else:
            assert position is not None
            future.set_result(position)

    return done


def _task_outcome(callback: RunCallback, offset: int, task: asyncio.Task[Position]) -> None:
    if task.cancelled():
        callback(offset, 1, None, ManagedLedgerError("add cancelled"))
    elif (exc := task.exception()) is not None:
        callback(offset, 1, None, exc)
    else:
        callback(offset, 1, task.result(), None)


_NO_ADDS: deque[AddOp] = deque()
"""The queue and in-flight list of a pipeline that never had an add, shared and never
appended to: an empty deque holds a 64-slot block (760 B), twice per managed ledger, which
was 8 % of an idle topic's memory. :meth:`AddPipeline._own` swaps in a deque of its own
before the first append."""


class AddPipeline:
    """The appends of one managed ledger (its ``adds``). Not thread-safe: event loop only."""

    __slots__ = (
        "_add_progress",
        "_add_room_made",
        "_inflight_bytes",
        "_ml",
        "_slow_adds",
        "_write_failures",
        "_write_retry_at_s",
        "add_latency",
        "inflight",
        "queue",
        "write_error",
    )

    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self.queue: deque[AddOp] = _NO_ADDS
        """Adds not yet sent to a ledger, in order (append only after :meth:`_own`)."""
        self.inflight: deque[AddOp] = _NO_ADDS
        """Adds sent to the current ledger, in entry order, until accounted (likewise)."""
        self._inflight_bytes = 0
        self._add_room_made: asyncio.Semaphore | None = None
        """See :attr:`_add_room`."""
        self._add_progress: asyncio.Future[None] | None = None
        """Resolved when an in-flight add comes back (for rollover and drain waits)."""
        self._slow_adds = 0  # add_entry_nowait calls waiting for room (not yet queued)
        self.write_error: ManagedLedgerError | None = None
        """Set while storage fails: appends fail with it until ``_write_retry_at_s``."""
        self._write_retry_at_s = 0.0
        self._write_failures = 0
        """Consecutive failed writes or ledger creations since an entry was last stored."""
        self.add_latency = LatencyHistogram()
        """From an add call to the entry being stored (Pulsar's
        ``pulsar_storage_write_latency``)."""

    @property
    def _add_room(self) -> asyncio.Semaphore:
        """Room for ``pending_adds_max`` awaited adds, made at first use: the broker's
        appends (:meth:`add_run`) never wait on it, so most managed ledgers never do."""
        room = self._add_room_made
        if room is None:
            room = self._add_room_made = asyncio.Semaphore(self._ml.config.pending_adds_max)
        return room

    # --- the callers' side -----------------------------------------------------------------

    async def add_entry(self, data: bytes, messages: int = 1) -> Position:
        """See :meth:`ManagedLedger.add_entry`."""
        self.check_add()
        await self._add_room.acquire()
        try:
            self._ml.check_usable()
            future = self._enqueue(data, messages)
            self.pump()
            return await future
        finally:
            self._add_room.release()

    def add_entry_nowait(self, data: bytes, messages: int = 1) -> asyncio.Future[Position]:
        """See :meth:`ManagedLedger.add_entry_nowait`."""
        loop = asyncio.get_running_loop()
        if self._slow_adds or (
            len(self.queue) + len(self.inflight) >= self._ml.config.pending_adds_max
        ):
            self._slow_adds += 1
            return loop.create_task(self._add_entry_waiting(data, messages))
        try:
            self.check_add()
        except MagnetarError as exc:
            failed: asyncio.Future[Position] = loop.create_future()
            failed.set_exception(exc)
            return failed
        future = self._enqueue(data, messages)
        self.pump()
        return future

    def add_entry_callback(self, data: bytes, messages: int, callback: AddCallback) -> None:
        """See :meth:`ManagedLedger.add_entry_callback`."""
        self.add_run((data,), (messages,), partial(_single, callback))

    def add_run(
        self, datas: Sequence[bytes], messages: Sequence[int], callback: RunCallback
    ) -> None:
        """See :meth:`ManagedLedger.add_run`."""
        n = len(datas)
        if not n:
            return
        ml = self._ml
        room = ml.config.pending_adds_max - len(self.queue) - len(self.inflight)
        fast = 0 if self._slow_adds else max(0, min(n, room))
        if fast and (ml.state not in TAKES_ADDS or ml.backlog_quota_exceeded):
            # only then can check_add refuse (four calls fewer per run otherwise)
            try:
                self.check_add()
            except MagnetarError as exc:
                asyncio.get_running_loop().call_soon(callback, 0, n, None, exc)
                return
        if fast:
            started_s = ml.clock.monotonic_s()
            self._own().extend(
                map(AddOp, datas, messages, repeat(callback), range(fast), repeat(started_s))
            )
            self.pump()
        if fast < n:
            loop = asyncio.get_running_loop()
            for i in range(fast, n):
                self._slow_adds += 1
                task = loop.create_task(self._add_entry_waiting(datas[i], messages[i]))
                task.add_done_callback(partial(_task_outcome, callback, i))

    def _enqueue(self, data: bytes, messages: int) -> asyncio.Future[Position]:
        """Queue one add (after the caller's checks) whose position or error comes back in
        the returned future; the caller pumps the queue."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._own().append(AddOp(data, messages, _resolve(future), 0, self._ml.clock.monotonic_s()))
        return future

    def _own(self) -> deque[AddOp]:
        """The queue, made this pipeline's own (with its in-flight list) if still shared."""
        if self.queue is _NO_ADDS:
            self.queue = deque()
            self.inflight = deque()
        return self.queue

    async def _add_entry_waiting(self, data: bytes, messages: int) -> Position:
        queued = False
        try:
            self.check_add()
            await self._add_room.acquire()
            try:
                self._ml.check_usable()
                future = self._enqueue(data, messages)
                self._slow_adds -= 1
                queued = True
                self.pump()
                return await future
            finally:
                self._add_room.release()
        finally:
            if not queued:
                self._slow_adds -= 1

    def check_add(self) -> None:
        """Raise what an append gets now: fenced, closed, terminated, over the backlog
        quota (``PRODUCER_EXCEPTION``), or storage failing (until its backoff ends)."""
        ml = self._ml
        ml.check_usable()
        if ml.state is State.TERMINATED:
            raise ManagedLedgerTerminated(f"{ml.name} is terminated")
        if ml.backlog_quota_exceeded and (
            ml.config.backlog_quota_policy is BacklogQuotaPolicy.PRODUCER_EXCEPTION
        ):
            raise BacklogQuotaExceeded(f"{ml.name}: backlog quota exceeded")
        self._check_writable()

    def _check_writable(self) -> None:
        """While storage fails: raise its error until the backoff ends, then start a new
        ledger (the append waits in the queue for it)."""
        ml = self._ml
        if ml.state is not State.WRITE_FAILED:
            return
        error = self.write_error
        assert error is not None
        if ml.clock.monotonic_s() < self._write_retry_at_s:
            raise error
        ml.rollover.request()

    async def wait_writable(self) -> None:
        """Return once appends can be taken; while storage fails, raise its error (during
        the backoff at once, after it once the new ledger it starts has failed too).

        For admitting producers: a client whose send got a storage error drops its
        connection, comes back and re-sends; admitted straight away, it would meet the
        failure again in a loop, and the official clients restart their send-timeout timer
        each time a producer is (re)created, so ``send()`` blocked far beyond its timeout
        while the disk was full. Refused here, the client retries the producer with its own
        backoff and its sends time out as configured."""
        ml = self._ml
        if ml.state is not State.WRITE_FAILED:
            return
        self._check_writable()  # raises during the backoff, else starts a new ledger
        task = ml.rollover.task
        if task is not None:
            await asyncio.shield(task)  # its failures are handled in it, not raised
        if ml.state is State.WRITE_FAILED and self.write_error is not None:
            raise self.write_error

    # --- the ledger's side -----------------------------------------------------------------

    def pump(self) -> None:
        """Issue queued adds to the current ledger, in order (no task per entry)."""
        ml = self._ml
        writer = ml.writer
        if ml.rollover.task is not None or ml.fence_cause is not None:
            return
        if writer is None:
            # No ledger after a storage failure: appends queued while its ledger was being
            # closed get the failure during the backoff, or start the next ledger after it.
            if self.queue and ml.state is not State.CLOSED:
                self._fail_or_retry_queued()
            return
        seg = ml.ledgers.last_segment
        assert seg is not None
        queue = self.queue
        if not queue:
            return
        cfg = ml.config
        inflight = self.inflight
        datas = list(map(_data_of, queue))
        sizes = list(map(len, datas))
        # A ledger takes no more than its limits, counting adds still in flight: a run that
        # would cross them is split, its rest waits for the next ledger. The add at index i
        # fits while seg.entries + in flight + i < the entries limit and seg.size_bytes +
        # in flight bytes + the sizes before it < the size limit.
        take = len(queue)
        fits = min(take, max(0, cfg.ledger_entries_max - seg.entries - len(inflight)))
        room_bytes = cfg.ledger_size_max_bytes - seg.size_bytes - self._inflight_bytes
        if fits < take or sum(sizes) - sizes[-1] >= room_bytes:
            fits = bisect_left(list(accumulate(sizes, initial=0)), room_bytes, 0, fits)
        roll = fits < take and ml.clock.now_ms() - seg.created_ms >= cfg.ledger_age_min_ms
        if roll:  # a ledger younger than ledger_age_min_ms takes the adds past its limits
            take = fits
            del datas[take:]
            run = [queue.popleft() for _ in range(take)]
        else:
            run = list(queue)
            queue.clear()
        inflight.extend(run)
        self._inflight_bytes += sum(sizes[:take])
        if run:
            # all queued adds go to the ledger as one run (one request per bookie)
            writer.add_run(datas, partial(self._on_added, writer, run, list(map(_attempt_of, run))))
        if roll:
            ml.rollover.request()

    def _fail_or_retry_queued(self) -> None:
        try:
            self._check_writable()
        except ManagedLedgerError as err:
            self.fail_queued(err)

    def fail_queued(self, error: BaseException) -> None:
        """Fail every add not yet sent to a ledger."""
        failed = list(self.queue)
        self.queue.clear()
        for op in failed:
            op.finish(None, error)

    def fail_all(self, error: BaseException) -> None:
        """Fail every add in flight or queued (fenced, or closed with no ledger to take
        them: never left hanging)."""
        ops = [*self.inflight, *self.queue]
        self.inflight.clear()
        self._inflight_bytes = 0
        self.queue.clear()
        for op in ops:
            op.finish(None, error)

    def storage_failed(self, error: BaseException) -> ManagedLedgerError:
        """Record a failed write or ledger creation: the error appends get, and when a new
        ledger may be tried (exponential backoff on the injected clock)."""
        ml = self._ml
        self._write_failures += 1
        cfg = ml.config
        backoff_ms = min(
            cfg.write_retry_backoff_min_ms * 2 ** min(self._write_failures - 1, 30),
            cfg.write_retry_backoff_max_ms,
        )
        self._write_retry_at_s = ml.clock.monotonic_s() + backoff_ms / 1000
        err = ManagedLedgerError(f"{ml.name}: storage write failed: {error}")
        self.write_error = err
        log.warning(
            "%s: storage write failed (%s); appends fail for %d ms, then a new ledger is tried",
            ml.name,
            error,
            backoff_ms,
        )
        return err

    def _on_added(
        self,
        writer: LedgerWriter,
        run: list[AddOp],
        attempts: list[int],
        offset: int,
        count: int,
        first_entry_id: int,
        error: BaseException | None,
    ) -> None:
        """Entries ``offset`` … ``offset + count - 1`` of ``run`` came back (stored as
        ``first_entry_id`` …, or failed with ``error``)."""
        entry_id = first_entry_id
        for i in range(offset, offset + count):
            op = run[i]
            if op.attempt == attempts[i]:  # else re-sent to a newer ledger meanwhile
                if error is not None:
                    op.error = error
                else:
                    op.entry_id = entry_id
                op.done = True
            entry_id += 1
        self._complete(writer)
        progress = self._add_progress
        if progress is not None:
            self._add_progress = None
            if not progress.done():
                progress.set_result(None)

    async def wait_add_progress(self) -> None:
        """Until the next in-flight add comes back (stored or failed)."""
        progress = self._add_progress
        if progress is None:
            progress = self._add_progress = asyncio.get_running_loop().create_future()
        await progress

    async def drain(self) -> None:
        """Until the rollover under way (if any) is done and every in-flight add came back
        (queued adds are sent meanwhile); at once when fenced."""
        ml = self._ml
        while ml.rollover.task is not None or self.inflight or self.queue:
            if ml.fence_cause is not None:
                return
            roll = ml.rollover.task
            if roll is not None:
                await asyncio.gather(roll, return_exceptions=True)
                continue
            if not self.inflight or self.inflight_done():
                break
            await self.wait_add_progress()

    def inflight_done(self) -> bool:
        """Whether every in-flight add came back (stored or failed)."""
        return all(op.done for op in self.inflight)

    def _complete(self, writer: LedgerWriter) -> None:
        """Account finished adds strictly in order; stop at the first unfinished one.
        Consecutive entries of one caller's run are accounted and reported as one piece."""
        ml = self._ml
        ledger_id = writer.ledger_id
        inflight = self.inflight
        appended = False
        now_ms = 0
        now_s = 0.0
        # the piece being gathered: its callback, offset, first entry id, ops
        piece: list[AddOp] = []
        piece_cb: RunCallback | None = None
        piece_offset = 0
        while inflight and inflight[0].done:
            op = inflight[0]
            if op.error is not None:
                if piece:
                    self._stored(ledger_id, piece, piece_cb, piece_offset, now_ms, now_s)
                    piece = []
                if never_fits(op.error):
                    # refused before it took an entry id: the ledger is fine, go on
                    inflight.popleft()
                    self._inflight_bytes -= len(op.data)
                    op.finish(None, EntryTooLargeForStorage(f"{ml.name}: {op.error}"))
                    continue
                self._on_add_failure(op.error)
                break
            if not appended:  # the clocks, once per run of completed adds
                now_ms = ml.clock.now_ms()
                now_s = ml.clock.monotonic_s()
                appended = True
            inflight.popleft()
            if piece and (
                op.callback is not piece_cb
                or op.offset != piece_offset + len(piece)
                or op.entry_id != piece[0].entry_id + len(piece)
            ):
                self._stored(ledger_id, piece, piece_cb, piece_offset, now_ms, now_s)
                piece = []
            if not piece:
                piece_cb = op.callback
                piece_offset = op.offset
            piece.append(op)
        if piece:
            self._stored(ledger_id, piece, piece_cb, piece_offset, now_ms, now_s)
        if appended:
            self._write_failures = 0
            ml.notify_waiters()
            # No clock read per entry: only the size limits are checked here; the age limit
            # is checked by maintenance (every maintenance_interval_ms) and by rollover_due.
            seg = ml.ledgers.last_segment
            cfg = ml.config
            if (
                seg is not None
                and (
                    seg.entries >= cfg.ledger_entries_max
                    or seg.size_bytes >= cfg.ledger_size_max_bytes
                )
                and ml.rollover.due()
            ):
                ml.rollover.request()

    def _stored(
        self,
        ledger_id: int,
        ops: list[AddOp],
        callback: RunCallback | None,
        offset: int,
        now_ms: int,
        now_s: float,
    ) -> None:
        """Account ``ops`` (consecutive entries of ``ledger_id`` and of one caller's run,
        taken off the in-flight queue) as stored, and report them as one piece."""
        ml = self._ml
        first_entry_id = ops[0].entry_id
        latency = self.add_latency
        started_s = ops[0].started_s
        datas = list(map(_data_of, ops))
        counts = list(map(_messages_of, ops))
        starts = list(map(_started_s_of, ops))
        if starts.count(started_s) == len(starts):  # one caller's run: one start
            latency.observe((now_s - started_s) * 1000, len(starts))
        else:
            same_start = 0
            for op_started_s in starts:
                if op_started_s != started_s:
                    latency.observe((now_s - started_s) * 1000, same_start)
                    started_s = op_started_s
                    same_start = 0
                same_start += 1
            latency.observe((now_s - started_s) * 1000, same_start)
        size = sum(map(len, datas))
        self._inflight_bytes -= size
        cache = ml.cache
        if ml.cursors:  # what every reader has read goes as new entries come
            cache.set_floor(ml.slowest_read_position())
        cache.insert_run(ledger_id, first_entry_id, datas, counts)
        ml.ledgers.record_appends(ledger_id, first_entry_id, size, counts, now_ms)
        ml.stats_added += len(ops)
        ml.last_added_data = ops[-1].data
        ml.maintainer.wake()
        # reported once, after the state above (the callback may add or read at once)
        unfinished = [op for op in ops if not op.finished]
        if len(unfinished) == len(ops):
            for op in ops:
                op.finished = True
            assert callback is not None
            callback(offset, len(ops), Position(ledger_id, first_entry_id), None)
            return
        for op in unfinished:  # some were answered already (rare): one by one
            op.finish(Position(ledger_id, op.entry_id), None)

    def _on_add_failure(self, error: BaseException) -> None:
        """The current ledger failed a write (an error other than :func:`never_fits`):
        roll over and re-send the appends in flight to the new ledger, in order, except
        those already tried on ``add_attempts_max`` ledgers, which fail with ``error``."""
        ml = self._ml
        if is_fenced(error):
            ml.fence(error)
            return
        inflight = list(self.inflight)
        self.inflight.clear()
        self._inflight_bytes = 0
        if self._write_failures > 0:
            # The ledger started after the last failure failed too: storage is not
            # writable. Fail everything now instead of rolling over in a loop.
            err = self.storage_failed(error)
            failed = [*inflight, *self.queue]
            self.queue.clear()
            for op in failed:
                op.finish(None, err)
            ml.rollover.request(start_new=False)
            return
        self._write_failures += 1
        log.warning("%s: add failed (%s); rolling over", ml.name, error)
        retry: list[AddOp] = []
        attempts_max = ml.config.add_attempts_max
        for op in inflight:
            op.attempt += 1
            if op.attempt >= attempts_max:
                op.finish(None, error)
                continue
            op.done = False
            op.error = None
            retry.append(op)
        if len(retry) < len(inflight):
            log.warning(
                "%s: %d add(s) failed on %d ledgers; failing them (%s)",
                ml.name,
                len(inflight) - len(retry),
                attempts_max,
                error,
            )
        self._own().extendleft(reversed(retry))
        ml.rollover.request()
