"""The managed ledger: a topic's log as an ordered list of ledgers, with cursors.

Ownership and fencing: one process owns a managed ledger at a time. Opening it fences the
previous owner: the last ledger is opened for recovery (its writer can add no more) and a
new ledger is registered with a compare-and-set of the metadata. The old owner's next add
fails with the ledger client's fenced error, its metadata writes fail with ``BadVersion``,
and both surface as :class:`ManagedLedgerFenced`; it never appends behind the new owner.

Appends: ``add_entry`` pipelines entries to the current ledger; futures resolve in append
order. The current ledger rolls over by entry count, size or age, and on a write failure
(failed and later adds are re-sent, in order, to the new ledger; an add tried on
``add_attempts_max`` ledgers fails instead, and when the ledger started after a failure fails
too, every queued add fails at once and new ledgers are tried only after a backoff, so
rollovers are bounded). An entry larger than the storage takes fails alone, at once, with
:class:`EntryTooLargeForStorage`: no rollover.

Storage faults (a full disk, read-only bookies): when the adds re-sent to the new ledger fail
too, or no new ledger can be created, the managed ledger stops retrying on its own: pending
and queued adds fail at once with a :class:`ManagedLedgerError` (the producer's
``PersistenceError``), and so does every append during a backoff
(``write_retry_backoff_min_ms``, doubling up to ``write_retry_backoff_max_ms``, on the
injected clock). The first append after the backoff tries a new ledger; once one takes an
entry, the log writes normally again. No restart is needed, and no loop of rollovers runs.

Reads: entries just appended are served from the :class:`EntryCache`; catch-up reads go to
bookies in batches with read-ahead. A read at the end of the log parks on a future until an
entry arrives (``ManagedCursor.read_entries_or_wait``).

Background work (one task, period ``min(maintenance_interval_ms,
cursor_persist_interval_ms)``): persist dirty durable cursors, roll over by age, apply TTL
and backlog quotas, trim consumed ledgers, evict the cache.

Message TTL (Pulsar's expiry monitor, run every ``maintenance_interval_ms``): every cursor's
mark-delete moves past the entries published more than ``message_ttl_ms`` ago. Whole ledgers
last appended to before that expire without reads; inside a ledger the managed ledger reads
entries' publish times through the ``publish_time_of`` its owner gave (entries are opaque
here) and finds the last expired entry by binary search.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from array import array
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MagnetarError
from magnetar.common.latency import LatencyHistogram
from magnetar.managed_ledger.config import BacklogQuotaPolicy, ManagedLedgerConfig
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.entry_cache import EntryCache, EntryCacheBudget
from magnetar.managed_ledger.entry_run import EntryRun, positions_of
from magnetar.managed_ledger.errors import (
    BacklogQuotaExceeded,
    CursorNotFound,
    EntryTooLargeForStorage,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
    OffloadNotConfigured,
)
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.metadata_layout import (
    CursorInfo,
    ManagedLedgerInfo,
    cursor_name,
    cursor_path,
    ledger_path,
)
from magnetar.managed_ledger.offload import Offloader
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.retention import ledgers_expired_by_ttl, ledgers_to_trim
from magnetar.managed_ledger.storage import (
    LedgerReader,
    LedgerStorage,
    LedgerWriter,
    is_fenced,
    never_fits,
)
from magnetar.metadata.store import (
    MUST_NOT_EXIST,
    BadVersion,
    MetadataStore,
    NodeExists,
    NotFound,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry read from the log. ``data`` is shared, never copied; do not mutate.
    ``messages``: the entry's message count as its appender gave it, when the entry came
    from the cache of appended entries (None: not known without parsing ``data``)."""

    position: Position
    data: bytes
    messages: int | None = None


PublishTimeOf = Callable[[bytes], int]
"""An entry's publish time in ms from its bytes (the broker reads the message metadata).
May raise :class:`MagnetarError` for an entry it cannot parse."""

ExpiryListener = Callable[[str, int], None]
"""Told ``(cursor name, messages)`` each time message TTL moves a cursor past messages."""

MessagesOf = Callable[[bytes], int]
"""The number of messages in an entry from its bytes (the broker reads the batch size in
the message metadata). May raise :class:`MagnetarError` for an entry it cannot parse."""

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


class _AddOp:
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


class ManagedLedger:
    """A topic's log. Create with :meth:`open`; one instance per name per process.

    Errors: appends raise :class:`ManagedLedgerFenced` (another owner), :class:`ManagedLedgerClosed`,
    :class:`ManagedLedgerTerminated`, :class:`BacklogQuotaExceeded`, :class:`ManagedLedgerError`.
    """

    def __init__(
        self,
        name: str,
        storage: LedgerStorage,
        store: MetadataStore,
        config: ManagedLedgerConfig,
        clock: Clock,
        offloader: Offloader | None,
        publish_time_of: PublishTimeOf | None = None,
        cache_budget: EntryCacheBudget | None = None,
        messages_of: MessagesOf | None = None,
    ) -> None:
        self.name = name
        self._storage = storage
        self._store = store
        self.config = config
        self._clock = clock
        self._offloader = offloader
        self._publish_time_of = publish_time_of
        self._messages_of = messages_of
        self.expiry_listener: ExpiryListener | None = None
        """Set by the owner (the broker's topic) to count what TTL expired per cursor."""
        self._path = ledger_path(name)
        self.ledgers = LedgerList()
        self._info_version = MUST_NOT_EXIST
        self._terminated = False
        self._properties: dict[str, str] = {}
        self._writer: LedgerWriter | None = None
        self._fenced: BaseException | None = None
        self._closed = False
        self._queue: deque[_AddOp] = deque()
        self._inflight: deque[_AddOp] = deque()
        self._inflight_bytes = 0
        self._rolling: asyncio.Task[None] | None = None
        self._unclosed: LedgerWriter | None = None
        """The previous ledger when closing it failed: closed before any new one starts."""
        self._write_error: ManagedLedgerError | None = None
        """Set while storage fails (see the module docstring): appends fail with it until
        ``_write_retry_at_s``."""
        self._write_retry_at_s = 0.0
        self._write_failures = 0
        """Consecutive failed writes or ledger creations since an entry was last stored."""
        self._add_room = asyncio.Semaphore(config.pending_adds_max)
        self._add_progress: asyncio.Future[None] | None = None
        """Resolved when an in-flight add comes back (for rollover and drain waits)."""
        self._slow_adds = 0  # add_entry_nowait calls waiting for room (not yet queued)
        self._waiters: list[asyncio.Future[None]] = []
        self.cursors: dict[str, ManagedCursor] = {}
        self.cache = EntryCache(config.cache_size_max_bytes, cache_budget)
        self._readers: OrderedDict[int, asyncio.Task[LedgerReader]] = OrderedDict()
        self._meta_lock = asyncio.Lock()
        self._maintenance: asyncio.Task[None] | None = None
        self._quota_exceeded = False
        self._last_persist_s = 0.0
        self._last_maintenance_s = 0.0
        self.stats_added = 0
        self.add_latency = LatencyHistogram()
        """From :meth:`add_entry_callback` to the entry being stored (Pulsar's
        ``pulsar_storage_write_latency``)."""
        self.last_added_data: bytes | None = None
        """The data of the last entry this object appended (None: none yet)."""
        self._background: set[asyncio.Future[None]] = set()

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        name: str,
        *,
        storage: LedgerStorage,
        store: MetadataStore,
        config: ManagedLedgerConfig | None = None,
        clock: Clock | None = None,
        offloader: Offloader | None = None,
        background: bool = True,
        publish_time_of: PublishTimeOf | None = None,
        cache_budget: EntryCacheBudget | None = None,
        messages_of: MessagesOf | None = None,
    ) -> ManagedLedger:
        """Open (creating if needed) and take ownership, fencing any previous owner.

        ``background=False`` skips the maintenance task (tests drive :meth:`maintain`).
        ``publish_time_of`` lets message TTL expire entries inside a ledger by their publish
        time (without it, TTL expires whole ledgers only). ``cache_budget`` is shared by the
        process's managed ledgers (without one, this ledger's cache is bounded only by
        ``config.cache_size_max_bytes``). ``messages_of`` counts the messages of the entries
        of a ledger recovered from a previous owner (its count in the metadata is stale);
        without it such a ledger counts one message per entry.
        Raises :class:`ManagedLedgerFenced` if another process takes it over meanwhile.
        """
        ml = cls(
            name,
            storage,
            store,
            config or ManagedLedgerConfig(),
            clock or SystemClock(),
            offloader,
            publish_time_of,
            cache_budget,
            messages_of,
        )
        await ml._initialize()
        if background:
            ml._maintenance = asyncio.create_task(ml._maintenance_loop(), name=f"ml-{name}")
        return ml

    async def _initialize(self) -> None:
        try:
            got = await self._store.get(self._path)
            info = ManagedLedgerInfo.decode(got.value)
            self._info_version = got.stat.version
        except NotFound:
            info = ManagedLedgerInfo()
            try:
                stat = await self._store.put(self._path, info.encode(), MUST_NOT_EXIST)
                self._info_version = stat.version
            except NodeExists:
                got = await self._store.get(self._path)
                info = ManagedLedgerInfo.decode(got.value)
                self._info_version = got.stat.version
        self._terminated = info.terminated
        self._properties = info.properties
        self.ledgers = LedgerList(info.ledgers)
        last = self.ledgers.last_segment
        if last is not None and last.closed_ms is None:
            await self._recover_last_ledger(last)
        await self._load_cursors()
        if not self._terminated:
            await self._roll()
        else:
            await self._write_info()
        if self._fenced is not None:
            raise ManagedLedgerFenced(f"{self.name}: taken over while opening")

    async def _recover_last_ledger(self, segment: LedgerSegment) -> None:
        """Fence the previous owner's ledger and learn where it ends."""
        reader = await self._storage.open_ledger(segment.ledger_id, recovery=True)
        segment.entries = reader.last_add_confirmed + 1
        segment.size_bytes = reader.length
        # The list in the metadata was last written when this ledger started (or at a
        # trim), so its message count is stale: count the entries' messages again.
        prefix = await self._count_messages(reader, segment)
        segment.messages = prefix[-1] if prefix is not None else segment.entries
        segment.message_prefix = prefix if segment.messages != segment.entries else None
        segment.closed_ms = self._clock.now_ms()
        segment.last_add_ms = max(segment.last_add_ms, segment.closed_ms)
        task: asyncio.Task[LedgerReader] = asyncio.get_running_loop().create_task(_ready(reader))
        self._readers[segment.ledger_id] = task

    async def _count_messages(
        self, reader: LedgerReader, segment: LedgerSegment
    ) -> array[int] | None:
        """The message-count prefix sum of a recovered ledger's entries, read back through
        ``messages_of`` (None without it: one message an entry is all that is known); sets
        ``segment.size_bytes`` from the entries read (a recovered ledger's length is not
        known to the storage). Reads in batches of ``read_ahead_entries`` first, then as
        many as ``read_ahead_bytes_max`` holds at the average entry size so far (at most
        ``read_batch_max_entries``)."""
        messages_of = self._messages_of
        if messages_of is None:
            return None
        cfg = self.config
        prefix = array("q", [0])
        total = 0
        size_bytes = 0
        first = 0
        step = max(min(cfg.read_ahead_entries, cfg.read_batch_max_entries), 1)
        while first < segment.entries:
            last = min(first + step, segment.entries) - 1
            for entry in await reader.read(first, last):
                size_bytes += len(entry.data)
                try:
                    total += max(messages_of(entry.data), 1)
                except MagnetarError:  # unparseable: it is still one entry to deliver
                    total += 1
                prefix.append(total)
            first = last + 1
            average = max(size_bytes // first, 1)
            step = max(min(cfg.read_ahead_bytes_max // average, cfg.read_batch_max_entries), 1)
        segment.size_bytes = size_bytes
        return prefix

    async def _load_cursors(self) -> None:
        try:
            names = await self._store.children(self._path)
        except NotFound:
            names = []
        for segment in names:
            name = cursor_name(segment)
            path = cursor_path(self.name, name)
            try:
                got = await self._store.get(path)
            except NotFound:
                continue
            cursor = await ManagedCursor.restore(
                self, name, CursorInfo.decode(got.value), got.stat.version
            )
            self.cursors[name] = cursor

    # --- properties ------------------------------------------------------------------------

    @property
    def storage(self) -> LedgerStorage:
        return self._storage

    @property
    def store(self) -> MetadataStore:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def last_confirmed(self) -> Position:
        """The last appended entry (a boundary ``(L, -1)`` when the log is empty)."""
        return self.ledgers.last_confirmed

    @property
    def is_fenced(self) -> bool:
        return self._fenced is not None

    @property
    def is_terminated(self) -> bool:
        return self._terminated

    @property
    def current_ledger_id(self) -> int | None:
        return None if self._writer is None else self._writer.ledger_id

    def ledger_ids(self) -> list[int]:
        return [s.ledger_id for s in self.ledgers]

    def slowest_cursor(self) -> ManagedCursor | None:
        """The durable cursor with the smallest mark-delete position."""
        durable = [c for c in self.cursors.values() if c.durable]
        return min(durable, key=lambda c: c.state.mark_delete, default=None)

    # --- appends ---------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._fenced is not None:
            raise ManagedLedgerFenced(f"{self.name}: fenced by another owner ({self._fenced})")
        if self._closed:
            raise ManagedLedgerClosed(f"{self.name} is closed")

    async def add_entry(self, data: bytes, messages: int = 1) -> Position:
        """Append one entry holding ``messages`` messages; returns its position once stored
        (fsynced by an ack quorum). Concurrent calls are stored in call order."""
        self._check_usable()
        if self._terminated:
            raise ManagedLedgerTerminated(f"{self.name} is terminated")
        if self._quota_exceeded and (
            self.config.backlog_quota_policy is BacklogQuotaPolicy.PRODUCER_EXCEPTION
        ):
            raise BacklogQuotaExceeded(f"{self.name}: backlog quota exceeded")
        self._check_writable()
        await self._add_room.acquire()
        try:
            self._check_usable()
            future = self._enqueue(data, messages)
            self._pump()
            return await future
        finally:
            self._add_room.release()

    def add_entry_nowait(self, data: bytes, messages: int = 1) -> asyncio.Future[Position]:
        """:meth:`add_entry` without a task per entry (the broker's hot path): same checks
        (failures come back in the future), same order across both methods. When
        ``pending_adds_max`` adds are queued or in flight, or earlier calls are still waiting
        for room, it falls back to a task that waits (so order is kept)."""
        loop = asyncio.get_running_loop()
        if self._slow_adds or (
            len(self._queue) + len(self._inflight) >= self.config.pending_adds_max
        ):
            self._slow_adds += 1
            return loop.create_task(self._add_entry_waiting(data, messages))
        try:
            self._check_add()
        except MagnetarError as exc:
            failed: asyncio.Future[Position] = loop.create_future()
            failed.set_exception(exc)
            return failed
        future = self._enqueue(data, messages)
        self._pump()
        return future

    def _enqueue(self, data: bytes, messages: int) -> asyncio.Future[Position]:
        """Queue one add (after the caller's checks) whose position or error comes back in
        the returned future; the caller pumps the queue."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._queue.append(_AddOp(data, messages, _resolve(future), 0, self._clock.monotonic_s()))
        return future

    def add_entry_callback(self, data: bytes, messages: int, callback: AddCallback) -> None:
        """:meth:`add_run` of one entry with an :data:`AddCallback`:
        ``callback(position, None)`` once stored, ``callback(None, error)`` on failure."""
        self.add_run((data,), (messages,), partial(_single, callback))

    def add_run(
        self, datas: Sequence[bytes], messages: Sequence[int], callback: RunCallback
    ) -> None:
        """Append ``datas`` (``messages[i]`` messages in ``datas[i]``), in order, after
        every earlier append (the broker's publish path): the outcome goes to ``callback``
        in pieces (:data:`RunCallback`), directly from the storage's completion, and never
        before this method returns (immediate refusals go through
        ``call_soon``). A run that would pass ``pending_adds_max`` adds queued or in flight
        goes on entry by entry through tasks that wait for room (order is kept); one that
        would pass a ledger's limits is split at the rollover."""
        n = len(datas)
        if not n:
            return
        room = self.config.pending_adds_max - len(self._queue) - len(self._inflight)
        fast = 0 if self._slow_adds else max(0, min(n, room))
        if fast and (
            self._fenced is not None
            or self._closed
            or self._terminated
            or self._quota_exceeded
            or self._write_error is not None
        ):  # only then can _check_add refuse (four calls fewer per run otherwise)
            try:
                self._check_add()
            except MagnetarError as exc:
                asyncio.get_running_loop().call_soon(callback, 0, n, None, exc)
                return
        if fast:
            started_s = self._clock.monotonic_s()
            queue = self._queue
            for i in range(fast):
                queue.append(_AddOp(datas[i], messages[i], callback, i, started_s))
            self._pump()
        if fast < n:
            loop = asyncio.get_running_loop()
            for i in range(fast, n):
                self._slow_adds += 1
                task = loop.create_task(self._add_entry_waiting(datas[i], messages[i]))
                task.add_done_callback(partial(_task_outcome, callback, i))

    def _check_add(self) -> None:
        self._check_usable()
        if self._terminated:
            raise ManagedLedgerTerminated(f"{self.name} is terminated")
        if self._quota_exceeded and (
            self.config.backlog_quota_policy is BacklogQuotaPolicy.PRODUCER_EXCEPTION
        ):
            raise BacklogQuotaExceeded(f"{self.name}: backlog quota exceeded")
        self._check_writable()

    def _check_writable(self) -> None:
        """While storage fails: raise its error until the backoff ends, then start a new
        ledger (the append waits in the queue for it)."""
        error = self._write_error
        if error is None or self._writer is not None or self._rolling is not None:
            return
        if self._clock.monotonic_s() < self._write_retry_at_s:
            raise error
        self._request_roll()

    def _fail_or_retry_queued(self) -> None:
        try:
            self._check_writable()
        except ManagedLedgerError as err:
            failed = list(self._queue)
            self._queue.clear()
            for op in failed:
                op.finish(None, err)

    def _storage_failed(self, error: BaseException) -> ManagedLedgerError:
        """Record a failed write or ledger creation: the error appends get, and when a new
        ledger may be tried (exponential backoff on the injected clock)."""
        self._write_failures += 1
        cfg = self.config
        backoff_ms = min(
            cfg.write_retry_backoff_min_ms * 2 ** min(self._write_failures - 1, 30),
            cfg.write_retry_backoff_max_ms,
        )
        self._write_retry_at_s = self._clock.monotonic_s() + backoff_ms / 1000
        err = ManagedLedgerError(f"{self.name}: storage write failed: {error}")
        self._write_error = err
        log.warning(
            "%s: storage write failed (%s); appends fail for %d ms, then a new ledger is tried",
            self.name,
            error,
            backoff_ms,
        )
        return err

    async def _add_entry_waiting(self, data: bytes, messages: int) -> Position:
        queued = False
        try:
            self._check_add()
            await self._add_room.acquire()
            try:
                self._check_usable()
                future = self._enqueue(data, messages)
                self._slow_adds -= 1
                queued = True
                self._pump()
                return await future
            finally:
                self._add_room.release()
        finally:
            if not queued:
                self._slow_adds -= 1

    def _pump(self) -> None:
        """Issue queued adds to the current ledger, in order (no task per entry)."""
        writer = self._writer
        if self._rolling is not None or self._fenced is not None:
            return
        if writer is None:
            # No ledger after a storage failure: appends queued while its ledger was being
            # closed get the failure during the backoff, or start the next ledger after it.
            if self._queue and not self._closed:
                self._fail_or_retry_queued()
            return
        seg = self.ledgers.last_segment
        assert seg is not None
        cfg = self.config
        queue = self._queue
        inflight = self._inflight
        run: list[_AddOp] = []
        roll = False
        while queue:
            # a ledger takes no more than its limits, counting adds still in flight: a
            # run that would cross them is split, its rest waits for the next ledger
            full = seg.entries + len(inflight) >= cfg.ledger_entries_max or (
                seg.size_bytes + self._inflight_bytes >= cfg.ledger_size_max_bytes
            )
            if full and self._clock.now_ms() - seg.created_ms >= cfg.ledger_age_min_ms:
                roll = True
                break
            op = queue.popleft()
            inflight.append(op)
            self._inflight_bytes += len(op.data)
            run.append(op)
        if run:
            # all queued adds go to the ledger as one run (one request per bookie)
            writer.add_run(
                [op.data for op in run],
                partial(self._on_added, writer, run, [op.attempt for op in run]),
            )
        if roll:
            self._request_roll()

    def _on_added(
        self,
        writer: LedgerWriter,
        run: list[_AddOp],
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

    async def _wait_add_progress(self) -> None:
        """Until the next in-flight add comes back (stored or failed)."""
        progress = self._add_progress
        if progress is None:
            progress = self._add_progress = asyncio.get_running_loop().create_future()
        await progress

    def _complete(self, writer: LedgerWriter) -> None:
        """Account finished adds strictly in order; stop at the first unfinished one.
        Consecutive entries of one caller's run are accounted and reported as one piece."""
        ledger_id = writer.ledger_id
        inflight = self._inflight
        appended = False
        now_ms = 0
        now_s = 0.0
        # the piece being gathered: its callback, offset, first entry id, ops
        piece: list[_AddOp] = []
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
                    op.finish(None, EntryTooLargeForStorage(f"{self.name}: {op.error}"))
                    continue
                self._on_add_failure(op.error)
                break
            if not appended:  # the clocks, once per run of completed adds
                now_ms = self._clock.now_ms()
                now_s = self._clock.monotonic_s()
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
            self._notify_waiters()
            # No clock read per entry: only the size limits are checked here; the age limit
            # is checked by maintenance (every maintenance_interval_ms) and by _should_roll.
            seg = self.ledgers.last_segment
            cfg = self.config
            if (
                seg is not None
                and (
                    seg.entries >= cfg.ledger_entries_max
                    or seg.size_bytes >= cfg.ledger_size_max_bytes
                )
                and self._should_roll()
            ):
                self._request_roll()

    def _stored(
        self,
        ledger_id: int,
        ops: list[_AddOp],
        callback: RunCallback | None,
        offset: int,
        now_ms: int,
        now_s: float,
    ) -> None:
        """Account ``ops`` (consecutive entries of ``ledger_id`` and of one caller's run,
        taken off the in-flight queue) as stored, and report them as one piece."""
        first_entry_id = ops[0].entry_id
        latency = self.add_latency
        started_s = ops[0].started_s
        same_start = 0
        datas = []
        counts = []
        for op in ops:
            datas.append(op.data)
            counts.append(op.messages)
            if op.started_s != started_s:
                latency.observe((now_s - started_s) * 1000, same_start)
                started_s = op.started_s
                same_start = 0
            same_start += 1
        latency.observe((now_s - started_s) * 1000, same_start)
        size = sum(map(len, datas))
        self._inflight_bytes -= size
        cache = self.cache
        if self.cursors:  # what every reader has read goes as new entries come
            cache.set_floor(self._slowest_read_position())
        cache.insert_run(ledger_id, first_entry_id, datas, counts)
        self.ledgers.record_appends(ledger_id, first_entry_id, size, counts, now_ms)
        self.stats_added += len(ops)
        self.last_added_data = ops[-1].data
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
        if is_fenced(error):
            self._fence(error)
            return
        inflight = list(self._inflight)
        self._inflight.clear()
        self._inflight_bytes = 0
        if self._write_failures > 0:
            # The ledger started after the last failure failed too: storage is not
            # writable. Fail everything now instead of rolling over in a loop.
            err = self._storage_failed(error)
            failed = [*inflight, *self._queue]
            self._queue.clear()
            for op in failed:
                op.finish(None, err)
            self._request_roll(start_new=False)
            return
        self._write_failures += 1
        log.warning("%s: add failed (%s); rolling over", self.name, error)
        retry: list[_AddOp] = []
        for op in inflight:
            op.attempt += 1
            if op.attempt >= self.config.add_attempts_max:
                op.finish(None, error)
                continue
            op.done = False
            op.error = None
            retry.append(op)
        if len(retry) < len(inflight):
            log.warning(
                "%s: %d add(s) failed on %d ledgers; failing them (%s)",
                self.name,
                len(inflight) - len(retry),
                self.config.add_attempts_max,
                error,
            )
        self._queue.extendleft(reversed(retry))
        self._request_roll()

    def _fence(self, error: BaseException) -> None:
        if self._fenced is not None:
            return
        self._fenced = error
        log.warning("%s: fenced (%s)", self.name, error)
        exc = ManagedLedgerFenced(f"{self.name}: fenced by another owner ({error})")
        ops = [*self._inflight, *self._queue]
        self._inflight.clear()
        self._inflight_bytes = 0
        self._queue.clear()
        for op in ops:
            op.finish(None, exc)
        self._fail_waiters(exc)

    def _should_roll(self) -> bool:
        seg = self.ledgers.last_segment
        if seg is None or self._writer is None:
            return False
        cfg = self.config
        age_ms = self._clock.now_ms() - seg.created_ms
        if age_ms >= cfg.ledger_age_max_ms > 0 and seg.entries > 0:
            return True
        if age_ms < cfg.ledger_age_min_ms:
            return False
        return seg.entries >= cfg.ledger_entries_max or seg.size_bytes >= cfg.ledger_size_max_bytes

    def _inactive_too_long(self) -> bool:
        """Whether the current ledger holds entries and took none for
        ``ledger_inactive_rollover_ms`` (checked by maintenance only, not per append)."""
        seg = self.ledgers.last_segment
        inactive_ms = self.config.ledger_inactive_rollover_ms
        if seg is None or self._writer is None or inactive_ms <= 0 or seg.entries <= 0:
            return False
        return self._clock.now_ms() - seg.last_add_ms >= inactive_ms

    def _request_roll(self, *, start_new: bool = True) -> None:
        if self._rolling is None and self._fenced is None and not self._closed:
            self._rolling = asyncio.create_task(self._roll_task(start_new))

    async def _roll_task(self, start_new: bool = True) -> None:
        try:
            await self._roll(start_new=start_new)
            if start_new:
                self._write_error = None
        except Exception as exc:  # whatever failed, queued appends must not hang
            if isinstance(exc, MagnetarError):
                log.warning("%s: rollover failed: %s", self.name, exc)
            else:
                log.exception("%s: rollover failed", self.name)
            if isinstance(exc, ManagedLedgerFenced):
                err: ManagedLedgerError = exc
            else:
                err = self._storage_failed(exc)
            failed = list(self._queue)
            self._queue.clear()
            for op in failed:
                op.finish(None, err)
        finally:
            self._rolling = None
            self._pump()

    async def _roll(self, *, start_new: bool = True) -> None:
        """Close the current ledger (after its in-flight adds finish) and start a new one
        (``start_new=False``: only close it).

        The new ledger is created while the current one drains and closes: its metadata
        writes were the longest step of a rollover (2-13 ms of the 3-30 measured at 40 000
        appends a second, a rollover every 1.25 s), and appends wait for the whole of it.
        Its id is still above the current one's (ids only grow). If the current ledger
        cannot be closed, the new one is deleted once it exists."""
        created: asyncio.Future[LedgerWriter] | None = None
        if start_new:
            props = dict(self.config.ledger_properties)
            props.setdefault("managed-ledger", self.name)
            created = asyncio.ensure_future(self._storage.create_ledger(props))
        try:
            await self._close_current()
            if created is None:
                return
            writer = await created
        except BaseException:
            if created is not None:  # (the callback runs at once if it is done)
                created.add_done_callback(self._discard_created)
            raise
        self.ledgers.add_ledger(LedgerSegment(writer.ledger_id, created_ms=self._clock.now_ms()))
        try:
            await self._write_info()
        except ManagedLedgerFenced:
            await self._delete_unused(writer)
            raise
        self._writer = writer

    def _discard_created(self, created: asyncio.Future[LedgerWriter]) -> None:
        """Done-callback of a ledger created for a rollover that did not happen."""
        if created.cancelled() or created.exception() is not None:
            return
        task = asyncio.ensure_future(self._delete_unused(created.result()))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _delete_unused(self, writer: LedgerWriter) -> None:
        """Close and delete a ledger that never made it into the ledger list."""
        with contextlib.suppress(Exception):
            await writer.close()
            await self._storage.delete_ledger(writer.ledger_id)

    async def _close_current(self) -> None:
        """Close the current ledger once its in-flight adds are done (they finish or fail
        first); the log must not move past a ledger whose metadata still says OPEN."""
        while self._inflight and not all(op.done for op in self._inflight):
            await self._wait_add_progress()
        old = self._writer or self._unclosed
        self._writer = None
        if old is not None:
            try:
                await old.close()
            except Exception as exc:
                if is_fenced(exc):
                    self._fence(exc)
                    raise ManagedLedgerFenced(f"{self.name}: fenced on close") from exc
                # Its metadata still says OPEN: readers would see none of its entries
                # (acknowledged ones included), so the log must not move past it. The next
                # rollover tries again.
                self._unclosed = old
                raise ManagedLedgerError(
                    f"{self.name}: closing ledger {old.ledger_id} failed: {exc}"
                ) from exc
            self._unclosed = None
        last = self.ledgers.last_segment
        if last is not None and last.closed_ms is None:
            last.closed_ms = self._clock.now_ms()

    async def _write_info(self) -> None:
        """CAS the ledger list; ``BadVersion`` means another owner: fence."""
        async with self._meta_lock:
            if self._fenced is not None:
                raise ManagedLedgerFenced(f"{self.name}: fenced")
            info = ManagedLedgerInfo(list(self.ledgers), self._terminated, self._properties)
            try:
                stat = await self._store.put(self._path, info.encode(), self._info_version)
            except (BadVersion, NotFound) as exc:
                self._fence(exc)
                raise ManagedLedgerFenced(
                    f"{self.name}: metadata changed by another owner"
                ) from exc
            self._info_version = stat.version

    async def terminate(self) -> Position:
        """No more appends, ever; returns the last entry."""
        self._check_usable()
        self._terminated = True
        await self._drain_adds()
        await self._write_info()
        return self.last_confirmed

    async def _drain_adds(self) -> None:
        while self._rolling is not None or self._inflight or self._queue:
            if self._fenced is not None:
                return
            if self._rolling is not None:
                await asyncio.gather(self._rolling, return_exceptions=True)
                continue
            if not self._inflight or all(op.done for op in self._inflight):
                break
            await self._wait_add_progress()

    # --- reads -----------------------------------------------------------------------------

    def _notify_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, exc: BaseException) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()

    async def wait_for_entry_after(self, position: Position) -> None:
        """Return once an entry after ``position`` exists (no polling: parks on a future).
        Raises :class:`ManagedLedgerClosed`/:class:`ManagedLedgerFenced` if that happens
        first. Cancel the caller to stop waiting."""
        while self.ledgers.last_confirmed <= position or not self.ledgers.exists(
            self.ledgers.normalize(self.ledgers.next_position(position))
        ):
            self._check_usable()
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut

    async def read_range(
        self, ledger_id: int, first: int, last: int, *, read_ahead: bool = True
    ) -> list[bytes]:
        """Entries ``first..last`` of one ledger (clipped to what exists), from the cache
        or from storage, in order."""
        seg = self.ledgers.get(ledger_id)
        if seg is None:
            raise ManagedLedgerError(f"{self.name}: ledger {ledger_id} is not in the log")
        last = min(last, seg.entries - 1)
        if last < first:
            return []
        out = self.cache.get_run(ledger_id, first, last)
        start = first + len(out)
        while start <= last:
            upto = min(last, start + self.config.read_batch_max_entries - 1)
            fetch_last = upto
            if read_ahead and upto == last:
                ahead = self.config.read_ahead_entries
                if seg.size_bytes:  # by bytes too, from the ledger's average entry size
                    ahead = min(
                        ahead, self.config.read_ahead_bytes_max * seg.entries // seg.size_bytes
                    )
                fetch_last = min(
                    seg.entries - 1,
                    max(upto, start + ahead - 1),
                    start + self.config.read_batch_max_entries - 1,
                )
            data = await self._read_storage(seg, start, fetch_last)
            wanted = upto - start + 1
            out.extend(data[:wanted])
            for i in range(wanted, len(data)):
                self.cache.insert(Position(ledger_id, start + i), data[i])
            start = upto + 1
        return out

    async def read_run(self, ledger_id: int, first: int, last: int) -> EntryRun:
        """Entries ``first..last`` of one ledger (clipped to what exists) as one
        :class:`EntryRun`: the cached prefix in one lookup, the rest as :meth:`read_range`
        reads it (message counts unknown for entries read from storage)."""
        seg = self.ledgers.get(ledger_id)
        if seg is None:
            raise ManagedLedgerError(f"{self.name}: ledger {ledger_id} is not in the log")
        last = min(last, seg.entries - 1)
        positions, data, messages = self.cache.run(ledger_id, first, last)
        start = first + len(data)
        if start <= last:
            rest = await self.read_range(ledger_id, start, last)
            positions += positions_of(ledger_id, start, len(rest))
            data += rest
            messages += [None] * len(rest)
        return EntryRun(positions, data, messages)

    async def _read_storage(self, seg: LedgerSegment, first: int, last: int) -> Sequence[bytes]:
        writer = self._writer
        if writer is not None and writer.ledger_id == seg.ledger_id:
            return [e.data for e in await writer.read(first, last)]
        if seg.offloaded and self._offloader is not None:
            try:
                reader = await self._reader(seg.ledger_id)
            except MagnetarError:
                return await self._offloader.read(self.name, seg.ledger_id, first, last)
            return [e.data for e in await reader.read(first, last)]
        reader = await self._reader(seg.ledger_id)
        return [e.data for e in await reader.read(first, last)]

    async def _reader(self, ledger_id: int) -> LedgerReader:
        task = self._readers.get(ledger_id)
        if task is None:
            task = asyncio.ensure_future(self._storage.open_ledger(ledger_id, recovery=False))
            self._readers[ledger_id] = task
            while len(self._readers) > self.config.open_readers_max:
                _, old = self._readers.popitem(last=False)
                closing = asyncio.ensure_future(_close_reader(old))
                self._background.add(closing)
                closing.add_done_callback(self._background.discard)
        else:
            self._readers.move_to_end(ledger_id)
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._readers.get(ledger_id) is task:
                del self._readers[ledger_id]
            raise

    async def find_position_by_publish_time(
        self, publish_time_ms: int, publish_time_of: Callable[[bytes], int]
    ) -> Position:
        """The first entry whose publish time is ``>= publish_time_ms`` (the end position
        if none), by binary search over the log. ``publish_time_of`` extracts the publish
        time from an entry's bytes (the managed ledger treats entries as opaque). Assumes
        publish times are non-decreasing in log order, as they are for one producer."""
        found = await self._first_entry_where(
            lambda data: publish_time_of(data) >= publish_time_ms, after=None
        )
        return self.ledgers.end_position if found is None else found

    async def _first_entry_where(
        self, predicate: Callable[[bytes], bool], after: Position | None
    ) -> Position | None:
        """The first entry after ``after`` (``None``: from the oldest entry) for which
        ``predicate`` holds, by binary search; ``None`` if it holds for none. ``predicate``
        must be monotonic in log order (false, then true). Reads one entry per probe."""
        spans: list[tuple[int, int, int]] = []  # (ledger id, first entry, entries)
        for s in self.ledgers:
            first = 0
            if after is not None:
                if s.ledger_id < after[0]:
                    continue
                if s.ledger_id == after[0]:
                    first = after[1] + 1
            if s.entries > first:
                spans.append((s.ledger_id, first, s.entries - first))
        total = sum(n for _, _, n in spans)
        lo, hi = 0, total  # answer index in [lo, hi]

        def at(index: int) -> Position:
            for ledger_id, first, n in spans:
                if index < n:
                    return Position(ledger_id, first + index)
                index -= n
            raise IndexError(index)

        while lo < hi:
            mid = (lo + hi) // 2
            pos = at(mid)
            data = await self.read_range(pos[0], pos[1], pos[1], read_ahead=False)
            if predicate(data[0]):
                hi = mid
            else:
                lo = mid + 1
        return at(lo) if lo < total else None

    # --- cursors ---------------------------------------------------------------------------

    async def open_cursor(
        self,
        name: str,
        *,
        start: Position | None = None,
        durable: bool = True,
        earliest: bool = False,
    ) -> ManagedCursor:
        """The cursor ``name``, created if missing at ``start`` (the next entry to read), or
        at the oldest entry (``earliest``), else after the last entry. A non-durable cursor
        is never persisted and does not hold back trimming."""
        self._check_usable()
        existing = self.cursors.get(name)
        if existing is not None:
            return existing
        if start is not None:
            mark_delete = self.ledgers.previous_position(self.ledgers.normalize(start))
        elif earliest:
            mark_delete = self.ledgers.previous_position(self.ledgers.first_position)
        else:
            mark_delete = self.ledgers.last_confirmed
        state = CursorState(name, self.ledgers, mark_delete)
        cursor = ManagedCursor(self, state, durable=durable)
        if durable:
            await cursor.create_metadata()
        self.cursors[name] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        """Remove a cursor and its stored state. Raises :class:`CursorNotFound`."""
        cursor = self.cursors.pop(name, None)
        if cursor is None:
            raise CursorNotFound(f"{self.name}: no cursor {name!r}")
        await cursor.delete_storage()

    # --- maintenance -----------------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        cfg = self.config
        tick_s = max(min(cfg.maintenance_interval_ms, cfg.cursor_persist_interval_ms), 1) / 1000
        while not self._closed and self._fenced is None:
            await self._clock.sleep(tick_s)
            try:
                await self.maintain()
            except ManagedLedgerFenced:
                return
            except MagnetarError as exc:
                log.warning("%s: maintenance failed: %s", self.name, exc)

    async def maintain(self, *, force: bool = False) -> None:
        """One round of background work (the maintenance task calls it periodically)."""
        if self._closed or self._fenced is not None:
            return
        now_s = self._clock.monotonic_s()
        cfg = self.config
        if force or now_s - self._last_persist_s >= cfg.cursor_persist_interval_ms / 1000:
            self._last_persist_s = now_s
            await self.persist_cursors()
        if not force and now_s - self._last_maintenance_s < cfg.maintenance_interval_ms / 1000:
            return
        self._last_maintenance_s = now_s
        if self._should_roll() or self._inactive_too_long():
            self._request_roll()
        await self.apply_ttl()
        self.apply_backlog_quota()
        await self.trim()
        self.evict_cache()

    async def persist_cursors(self) -> None:
        for cursor in list(self.cursors.values()):
            if cursor.durable:
                await cursor.persist()

    async def apply_ttl(self) -> None:
        """Move every cursor's mark-delete past the entries published more than
        ``message_ttl_ms`` ago (no-op when the TTL is off). Whole ledgers whose last append
        is older than that go without reads; then, with ``publish_time_of``, a binary search
        between the slowest cursor and the last entry finds the last expired entry inside a
        ledger (one read when nothing there expired). Assumes publish times non-decreasing
        in log order, as Pulsar's expiry monitor does; an entry whose publish time cannot be
        read counts as not expired where the search probes it (it stops nothing)."""
        ttl_ms = self.config.message_ttl_ms
        if ttl_ms < 0 or not self.cursors:
            return
        now_ms = self._clock.now_ms()
        target = ledgers_expired_by_ttl(self.ledgers, now_ms, ttl_ms)
        publish_time_of = self._publish_time_of
        if publish_time_of is not None:
            cutoff_ms = now_ms - ttl_ms
            after = min(c.state.mark_delete for c in self.cursors.values())
            if target is not None and target > after:
                after = target

            def kept(data: bytes) -> bool:
                try:
                    return publish_time_of(data) >= cutoff_ms
                except MagnetarError:
                    return True

            first_kept = await self._first_entry_where(kept, after)
            newest = (
                self.ledgers.last_confirmed
                if first_kept is None
                else (self.ledgers.previous_position(first_kept))
            )
            if newest > after and (target is None or newest > target):
                target = newest
        if target is None:
            return
        listener = self.expiry_listener
        for name, cursor in self.cursors.items():
            if cursor.state.mark_delete < target:
                before = cursor.backlog_messages
                cursor.state.ack_cumulative(target)
                expired = before - cursor.backlog_messages
                if listener is not None and expired > 0:
                    listener(name, expired)

    @property
    def backlog_quota_exceeded(self) -> bool:
        """Whether a durable cursor's backlog was over the quota at the last check
        (:meth:`apply_backlog_quota`, run by maintenance; call it for a fresh answer)."""
        return self._quota_exceeded

    def backlog_size_bytes(self, cursor: ManagedCursor) -> int:
        return self.ledgers.size_between(cursor.state.mark_delete, self.ledgers.last_confirmed)

    def apply_backlog_quota(self) -> None:
        cfg = self.config
        limit = cfg.backlog_quota_size_bytes
        time_limit = cfg.backlog_quota_time_ms
        if limit < 0 and time_limit < 0:
            self._quota_exceeded = False
            return
        now = self._clock.now_ms()
        evict = cfg.backlog_quota_policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION

        def over(cursor: ManagedCursor) -> bool:
            if limit >= 0 and self.backlog_size_bytes(cursor) > limit:
                return True
            if time_limit >= 0:
                first = self.ledgers.get(cursor.state.first_unacked()[0])
                # every entry of a ledger last appended to at T is at least now - T old
                if first is not None and first.entries > 0:
                    return now - first.last_add_ms > time_limit
            return False

        exceeded = False
        for cursor in self.cursors.values():
            if not cursor.durable or not over(cursor):
                continue
            if not evict:
                exceeded = True
                continue
            # evict whole oldest ledgers of this cursor's backlog until within quota
            while over(cursor):
                first = cursor.state.first_unacked()
                seg = self.ledgers.get(first[0])
                if seg is None or seg is self.ledgers.last_segment:
                    break
                cursor.state.ack_cumulative(Position(seg.ledger_id, seg.entries - 1))
        self._quota_exceeded = exceeded

    async def trim(self) -> list[int]:
        """Delete the ledgers no durable cursor and no retention policy needs; returns
        their ids. The metadata is updated first, so a crash leaks at most ledgers."""
        slowest = self.slowest_cursor()
        doomed = ledgers_to_trim(
            self.ledgers,
            None if slowest is None else slowest.state.mark_delete,
            self._clock.now_ms(),
            self.config.retention_time_ms,
            self.config.retention_size_bytes,
        )
        if not doomed:
            return []
        removed = self.ledgers.remove_ledgers(set(doomed))
        try:
            await self._write_info()
        except ManagedLedgerFenced:
            raise
        except MagnetarError:
            self.ledgers.restore_front(removed)  # the next round tries again
            raise
        for cursor in self.cursors.values():
            cursor.state.on_ledgers_trimmed()
        for seg in removed:
            # no cache eviction here: every entry of a trimmed ledger is behind every
            # durable cursor, so the gradual eviction below the readers drops them
            task = self._readers.pop(seg.ledger_id, None)
            if task is not None:
                await _close_reader(task)
            await self._storage.delete_ledger(seg.ledger_id)
            if seg.offloaded and self._offloader is not None:
                await self._offloader.delete(self.name, seg.ledger_id)
        return doomed

    def evict_cache(self) -> None:
        """Drop cached entries every cursor has already read (a bounded number now, the
        rest as new entries arrive: see :mod:`~magnetar.managed_ledger.entry_cache`), and
        those cached longer than ``cache_eviction_age_ms`` (read or not: an idle topic's
        cache empties instead of holding its last burst until the shared budget wants room)."""
        self.cache.evict_older_than(
            int(self._clock.monotonic_s() * 1000), self.config.cache_eviction_age_ms
        )
        if not self.cursors:
            self.cache.evict_before_gradually(self.ledgers.end_position)
            return
        self.cache.evict_before_gradually(self._slowest_read_position())

    def _slowest_read_position(self) -> Position:
        """The read position of the cursor furthest behind (there is at least one)."""
        return min(c.state.read_position for c in self.cursors.values())

    # --- offload hook ----------------------------------------------------------------------

    async def offload_ledger(self, ledger_id: int) -> None:
        """Copy a closed ledger to tiered storage and record it in the metadata."""
        if self._offloader is None:
            raise OffloadNotConfigured(f"{self.name}: no offloader configured")
        seg = self.ledgers.get(ledger_id)
        if seg is None or seg.closed_ms is None:
            raise ManagedLedgerError(f"{self.name}: ledger {ledger_id} is not a closed ledger")

        async def read(first: int, last: int) -> Sequence[bytes]:
            return await self.read_range(ledger_id, first, last, read_ahead=False)

        await self._offloader.offload(self.name, ledger_id, seg.entries, read)
        seg.offloaded = True
        await self._write_info()

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Persist cursors, finish in-flight appends, close ledgers. Idempotent."""
        if self._closed:
            return
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        if self._fenced is None:
            await self._drain_adds()
            with contextlib.suppress(MagnetarError):
                await self.persist_cursors()
        self._closed = True
        closed = ManagedLedgerClosed(f"{self.name} is closed")
        left = [*self._inflight, *self._queue]
        self._inflight.clear()
        self._queue.clear()
        for op in left:  # no ledger to take them (storage failing): never left hanging
            op.finish(None, closed)
        self._fail_waiters(closed)
        for cursor in self.cursors.values():
            await cursor.close_storage()
        for writer in (self._writer, self._unclosed):
            if writer is not None:
                with contextlib.suppress(Exception):
                    await writer.close()
        self._writer = self._unclosed = None
        for task in self._readers.values():
            await _close_reader(task)
        self._readers.clear()
        self.cache.clear()

    def register_waiter(self) -> asyncio.Future[None]:
        """A future resolved at the next append (used by cursors parking at the end)."""
        self._check_usable()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def on_cursor_fenced(self, error: BaseException) -> None:
        self._fence(error)


async def _ready(reader: LedgerReader) -> LedgerReader:
    return reader


async def _close_reader(task: Awaitable[LedgerReader]) -> None:
    with contextlib.suppress(Exception):
        reader = await task
        await reader.close()
