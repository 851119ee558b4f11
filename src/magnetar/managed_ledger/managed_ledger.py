"""The managed ledger: a topic's log as an ordered list of ledgers, with cursors.

Ownership and fencing: one process owns a managed ledger at a time. Opening it fences the
previous owner: the last ledger is opened for recovery (its writer can add no more; its
entries are read back to count their messages, see :meth:`ManagedLedger.open`) and a new
ledger is registered with a compare-and-set of the metadata. A managed ledger that has no
node yet gets it with its first ledger, in one write that fails if another process created
the node meanwhile (that opener then takes the other's over, as if it had been there). The old owner's next add
fails with the ledger client's fenced error, its metadata writes fail with ``BadVersion``,
and both surface as :class:`ManagedLedgerFenced`; it never appends behind the new owner.

The parts, each in its own module:

* appends — :mod:`~magnetar.managed_ledger.add_pipeline`: ``add_entry`` and ``add_run``
  pipeline entries to the current ledger, outcomes in append order; failed writes roll
  over and re-send (bounded by ``add_attempts_max``); an entry larger than the storage
  takes fails alone with :class:`EntryTooLargeForStorage`; when storage keeps failing,
  appends fail at once during a backoff instead of rolling over in a loop;
* the roll step — :mod:`~magnetar.managed_ledger.rollover`: the current ledger rolls over
  by entry count, size or age, after inactivity, and on a write failure;
* reads — :mod:`~magnetar.managed_ledger.log_reader`: entries just appended come from the
  :class:`EntryCache`; catch-up reads go to bookies in batches with read-ahead. A read at
  the end of the log parks on a future until an entry arrives
  (``ManagedCursor.read_entries_or_wait``);
* background work — :meth:`ManagedLedger.maintain`, one task of period
  ``min(maintenance_interval_ms, cursor_persist_interval_ms)``, waiting without a timer
  while the ledger is quiet (see :mod:`~magnetar.managed_ledger.maintainer`): persist dirty durable
  cursors, then what the pure planner :mod:`~magnetar.managed_ledger.maintenance` decides
  (roll over by age or inactivity, message TTL, backlog quotas, trimming, offload), then
  evict the cache;
* tiered storage — :mod:`~magnetar.managed_ledger.offload_manager`: closed ledgers copied
  to an object store through the :class:`~magnetar.managed_ledger.offload.Offloader`
  port, recorded in each ledger's offload context; reads of an offloaded ledger go to it;
* the lifecycle — :class:`~magnetar.managed_ledger.state.State`.

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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MagnetarError
from magnetar.common.lazy_lock import lazy_lock
from magnetar.managed_ledger.add_pipeline import AddCallback, AddPipeline, RunCallback
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.entry_cache import EntryCache, EntryCacheBudget
from magnetar.managed_ledger.entry_run import Entry, EntryRun
from magnetar.managed_ledger.errors import (
    CursorNotFound,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
)
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.log_reader import LogReader
from magnetar.managed_ledger.maintainer import Maintainer
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.metadata_layout import (
    CursorInfo,
    LedgerInfoNode,
    ManagedLedgerInfo,
    cursor_name,
    cursor_path,
)
from magnetar.managed_ledger.offload import Offloader, OffloaderSource
from magnetar.managed_ledger.offload_manager import OffloadManager
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.recovery import recover_ledger
from magnetar.managed_ledger.rollover import Rollover
from magnetar.managed_ledger.state import State
from magnetar.managed_ledger.storage import LedgerStorage, LedgerWriter
from magnetar.metadata.store import BadVersion, MetadataStore, NodeExists, NotFound

__all__ = [
    "AddCallback",
    "Entry",
    "ExpiryListener",
    "ManagedLedger",
    "MessagesOf",
    "PublishTimeOf",
    "RunCallback",
    "State",
]

log = logging.getLogger(__name__)


PublishTimeOf = Callable[[bytes], int]
"""An entry's publish time in ms from its bytes (the broker reads the message metadata).
May raise :class:`MagnetarError` for an entry it cannot parse."""

ExpiryListener = Callable[[str, int], None]
"""Told ``(cursor name, messages)`` each time message TTL moves a cursor past messages."""

MessagesOf = Callable[[bytes], int]
"""The number of messages in an entry from its bytes (the broker reads the batch size in
the message metadata). May raise :class:`MagnetarError` for an entry it cannot parse."""


_NO_PROPERTIES: dict[str, str] = {}
"""The properties of every managed ledger that has none (never changed)."""


class ManagedLedger:
    """A topic's log. Create with :meth:`open`; one instance per name per process.

    Errors: appends raise :class:`ManagedLedgerFenced` (another owner), :class:`ManagedLedgerClosed`,
    :class:`ManagedLedgerTerminated`, :class:`BacklogQuotaExceeded`, :class:`ManagedLedgerError`.
    """

    # Slots: one per topic on a broker holding thousands of idle topics.
    __slots__ = (
        "_append_callbacks",
        "_clock",
        "_messages_of",
        "_meta_lock",
        "_node",
        "_offloads",
        "_properties",
        "_storage",
        "_store",
        "_waiters",
        "add_latency",
        "adds",
        "cache",
        "config",
        "created",
        "cursors",
        "expiry_listener",
        "fence_cause",
        "last_added_data",
        "ledgers",
        "maintainer",
        "name",
        "offloader",
        "offloader_source",
        "reads",
        "rollover",
        "state",
        "stats_added",
        "writer",
    )

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
        self.offloader = offloader
        """Where closed ledgers are offloaded to and read back from (None: not configured);
        the owner may replace it (a changed offload policy)."""
        self.offloader_source: OffloaderSource | None = None
        """Opens the driver an offloaded ledger's context records when it is not
        :attr:`offloader`'s (set by the owner; None: every ledger is read with
        :attr:`offloader`)."""
        self._messages_of = messages_of
        self.expiry_listener: ExpiryListener | None = None
        """Set by the owner (the broker's topic) to count what TTL expired per cursor."""
        self._node = LedgerInfoNode(store, name)
        self.created = False
        """Whether this open created the managed ledger (it had no node: no cursors, and no
        state its owner stored beside it)."""
        self.ledgers = LedgerList()
        self.state = State.OPEN
        self.fence_cause: BaseException | None = None
        """What fenced this managed ledger (kept once it is closed)."""
        self._properties: dict[str, str] = _NO_PROPERTIES
        """Stored with the ledger list and never changed here (kept as loaded)."""
        self.writer: LedgerWriter | None = None
        """The current ledger (None while rolling over or while storage fails)."""
        self._waiters: list[asyncio.Future[None]] | None = None
        """Futures of :meth:`register_waiter` (None: none)."""
        self._append_callbacks: list[Callable[[bool], None]] | None = None
        """Callbacks of :meth:`call_on_append` (None: none)."""
        self.cursors: dict[str, ManagedCursor] = {}
        self.cache = EntryCache(config.cache_size_max_bytes, cache_budget)
        self._meta_lock: asyncio.Lock | None = None
        """Made at first use (:func:`lazy_lock`): a new managed ledger's first write needs
        none."""
        self.stats_added = 0
        self.last_added_data: bytes | None = None
        """The data of the last entry this object appended (None: none yet)."""
        self.adds = AddPipeline(self)
        self.rollover = Rollover(self)
        self.reads = LogReader(self)
        self.maintainer = Maintainer(self, publish_time_of)
        self._offloads: OffloadManager | None = None
        self.add_latency = self.adds.add_latency
        """From an add call to the entry being stored (Pulsar's
        ``pulsar_storage_write_latency``)."""

    # --- opening ---------------------------------------------------------------------------

    @property
    def offloads(self) -> OffloadManager:
        """This managed ledger's offloads to tiered storage (made at first use: the
        managed ledgers of idle topics never need one)."""
        offloads = self._offloads
        if offloads is None:
            offloads = self._offloads = OffloadManager(self)
        return offloads

    @property
    def offloads_if_made(self) -> OffloadManager | None:
        """:attr:`offloads` if it has been used (None: nothing offloaded or read from
        tiered storage through this object yet)."""
        return self._offloads

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
        offloader_source: OffloaderSource | None = None,
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
        without it such a ledger counts one message per entry. ``offloader_source`` opens the
        driver recorded for an offloaded ledger when it is not ``offloader``'s.
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
        ml.offloader_source = offloader_source
        await ml._initialize()
        if background:
            ml.maintainer.start_or_park()
        return ml

    async def _initialize(self) -> None:
        attempts = max(1, self.config.metadata_retries_max)
        for _ in range(attempts):
            info = await self._node.load()
            if info is not None:
                await self._take_over(info)
                break
            if await self._create():
                break
        else:
            raise ManagedLedgerError(
                f"{self.name}: created and deleted again by others {attempts} times while opening"
            )
        if self.fence_cause is not None:
            raise ManagedLedgerFenced(f"{self.name}: taken over while opening")

    async def _create(self) -> bool:
        """Create the managed ledger's node with its first ledger (one write). False when
        another process created the node meanwhile (the ledger made for it is deleted): the
        caller opens that one instead, as if it had been there."""
        writer = await self.rollover.new_ledger()
        self.ledgers.add_ledger(LedgerSegment(writer.ledger_id, created_ms=self._clock.now_ms()))
        try:
            await self._node.write(ManagedLedgerInfo(list(self.ledgers), False, {}))
        except Exception as exc:
            self.ledgers = LedgerList()
            await self.rollover.delete_unused(writer)
            if isinstance(exc, NodeExists):
                return False
            raise
        self.writer = writer
        self.created = True
        return True

    async def _take_over(self, info: ManagedLedgerInfo) -> None:
        """Open the stored managed ledger ``info``: recover its last ledger if a previous
        owner left it open, restore its cursors, start a new ledger."""
        if info.terminated:
            self.state = State.TERMINATED
        self._properties = info.properties
        self.ledgers = LedgerList(info.ledgers)
        last = self.ledgers.last_segment
        if last is not None and last.closed_ms is None:
            reader = await recover_ledger(
                self._storage, last, self._messages_of, self.config, self._clock.now_ms()
            )
            self.reads.adopt(reader)
        await self._load_cursors()
        if self.state is State.TERMINATED:
            await self.write_info()
        else:
            await self.rollover.roll()

    async def _load_cursors(self) -> None:
        try:
            names = await self._store.children(self._node.path)
        except NotFound:
            names = []
        for segment in names:
            name = cursor_name(segment)
            cursor = await self._restore_cursor(name)
            if cursor is not None:
                self.cursors[name] = cursor

    async def _restore_cursor(self, name: str) -> ManagedCursor | None:
        """The durable cursor ``name`` taken over (None if it was deleted). Its metadata is
        read again while the previous owner changes it; past ``metadata_retries_max`` tries
        that ``BadVersion`` propagates."""
        path = cursor_path(self.name, name)
        attempts = max(1, self.config.metadata_retries_max)
        for attempt in range(1, attempts + 1):
            try:
                got = await self._store.get(path)
            except NotFound:
                return None
            try:
                return await ManagedCursor.restore(
                    self, name, CursorInfo.decode(got.value), got.stat.version
                )
            except (BadVersion, NotFound):
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    # --- properties ------------------------------------------------------------------------

    @property
    def storage(self) -> LedgerStorage:
        return self._storage

    @storage.setter
    def storage(self, storage: LedgerStorage) -> None:
        """Ledgers are created on ``storage`` from now on (e.g. with other quorums); those
        already in the log are read and deleted through it too."""
        self._storage = storage

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
        return self.fence_cause is not None

    @property
    def is_terminated(self) -> bool:
        return self.state is State.TERMINATED

    @property
    def current_ledger_id(self) -> int | None:
        return None if self.writer is None else self.writer.ledger_id

    def ledger_ids(self) -> list[int]:
        return [s.ledger_id for s in self.ledgers]

    def slowest_cursor(self) -> ManagedCursor | None:
        """The durable cursor with the smallest mark-delete position."""
        durable = [c for c in self.cursors.values() if c.durable]
        return min(durable, key=lambda c: c.state.mark_delete, default=None)

    def check_usable(self) -> None:
        """Raise :class:`ManagedLedgerFenced` or :class:`ManagedLedgerClosed` if so."""
        if self.fence_cause is not None:
            raise ManagedLedgerFenced(f"{self.name}: fenced by another owner ({self.fence_cause})")
        if self.state is State.CLOSED:
            raise ManagedLedgerClosed(f"{self.name} is closed")

    # --- appends (the add pipeline) --------------------------------------------------------

    def wait_writable(self) -> Coroutine[Any, Any, None]:
        """Return once appends can be taken; raise the storage error while storage fails
        (:meth:`AddPipeline.wait_writable`: the broker admits no producer meanwhile)."""
        return self.adds.wait_writable()

    def add_entry(self, data: bytes, messages: int = 1) -> Coroutine[Any, Any, Position]:
        """Append one entry holding ``messages`` messages; the coroutine returns its position
        once stored (fsynced by an ack quorum). Concurrent calls are stored in call order.
        (The pipeline's coroutine itself: no extra await per append.)"""
        return self.adds.add_entry(data, messages)

    def add_entry_nowait(self, data: bytes, messages: int = 1) -> asyncio.Future[Position]:
        """:meth:`add_entry` without a task per entry (the broker's hot path): same checks
        (failures come back in the future), same order across both methods. When
        ``pending_adds_max`` adds are queued or in flight, or earlier calls are still waiting
        for room, it falls back to a task that waits (so order is kept)."""
        return self.adds.add_entry_nowait(data, messages)

    def add_entry_callback(self, data: bytes, messages: int, callback: AddCallback) -> None:
        """:meth:`add_run` of one entry with an :data:`AddCallback`:
        ``callback(position, None)`` once stored, ``callback(None, error)`` on failure."""
        self.adds.add_entry_callback(data, messages, callback)

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
        self.adds.add_run(datas, messages, callback)

    def fence(self, error: BaseException) -> None:
        """Another owner took over (``error`` says how): every pending and later operation
        fails with :class:`ManagedLedgerFenced`."""
        if self.fence_cause is not None:
            return
        self.fence_cause = error
        if self.state not in (State.CLOSED, State.TERMINATED):
            self.state = State.FENCED
        log.warning("%s: fenced (%s)", self.name, error)
        exc = ManagedLedgerFenced(f"{self.name}: fenced by another owner ({error})")
        self.adds.fail_all(exc)
        self._fail_waiters(exc)

    def on_cursor_fenced(self, error: BaseException) -> None:
        self.fence(error)

    async def write_info(self) -> None:
        """CAS the ledger list; ``BadVersion`` means another owner: fence."""
        async with lazy_lock(self, "_meta_lock"):
            if self.fence_cause is not None:
                raise ManagedLedgerFenced(f"{self.name}: fenced")
            info = ManagedLedgerInfo(list(self.ledgers), self.is_terminated, self._properties)
            try:
                await self._node.write(info)
            except (BadVersion, NotFound) as exc:
                self.fence(exc)
                raise ManagedLedgerFenced(
                    f"{self.name}: metadata changed by another owner"
                ) from exc

    async def terminate(self) -> Position:
        """No more appends, ever; returns the last entry."""
        self.check_usable()
        self.state = State.TERMINATED
        await self.adds.drain()
        await self.write_info()
        return self.last_confirmed

    # --- reads -----------------------------------------------------------------------------

    def notify_waiters(self) -> None:
        """Wake the readers parked at the end of the log (an entry was appended)."""
        waiters, self._waiters = self._waiters, None
        if waiters is not None:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        if self._append_callbacks is not None:
            callbacks, self._append_callbacks = self._append_callbacks, None
            asyncio.get_running_loop().call_soon(_call_each, callbacks, True)

    def _fail_waiters(self, exc: BaseException) -> None:
        waiters, self._waiters = self._waiters, None
        if waiters is not None:
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(exc)
                    fut.exception()
        if self._append_callbacks is not None:
            callbacks, self._append_callbacks = self._append_callbacks, None
            asyncio.get_running_loop().call_soon(_call_each, callbacks, False)

    def register_waiter(self) -> asyncio.Future[None]:
        """A future resolved at the next append (used by cursors parking at the end)."""
        self.check_usable()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = [fut]
        else:
            self._waiters.append(fut)
        return fut

    def call_on_append(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(True)`` on a loop turn after the next append, or
        ``callback(False)`` once the log is fenced or closed first: :meth:`register_waiter`
        without a future (for the dispatchers parked at the end: one loop callback per
        append calls them all). Once per registration. Raises as :meth:`check_usable`."""
        self.check_usable()
        if self._append_callbacks is None:
            self._append_callbacks = [callback]
        else:
            self._append_callbacks.append(callback)

    def cancel_on_append(self, callback: Callable[[bool], None]) -> None:
        """Take back a :meth:`call_on_append` not yet called (nothing otherwise): a reader
        closed while parked leaves nothing behind on an idle log."""
        callbacks = self._append_callbacks
        if callbacks is not None:
            with contextlib.suppress(ValueError):
                callbacks.remove(callback)

    async def wait_for_entry_after(self, position: Position) -> None:
        """Return once an entry after ``position`` exists (no polling: parks on a future).
        Raises :class:`ManagedLedgerClosed`/:class:`ManagedLedgerFenced` if that happens
        first. Cancel the caller to stop waiting."""
        while self.ledgers.last_confirmed <= position or not self.ledgers.exists(
            self.ledgers.normalize(self.ledgers.next_position(position))
        ):
            await self.register_waiter()

    async def read_range(
        self, ledger_id: int, first: int, last: int, *, read_ahead: bool = True
    ) -> list[bytes]:
        """Entries ``first..last`` of one ledger (clipped to what exists), from the cache
        or from storage, in order."""
        return await self.reads.read_range(ledger_id, first, last, read_ahead=read_ahead)

    async def read_run(self, ledger_id: int, first: int, last: int) -> EntryRun:
        """Entries ``first..last`` of one ledger (clipped to what exists) as one
        :class:`EntryRun`: the cached prefix in one lookup, the rest as :meth:`read_range`
        reads it (message counts unknown for entries read from storage)."""
        return await self.reads.read_run(ledger_id, first, last)

    async def find_position_by_publish_time(
        self, publish_time_ms: int, publish_time_of: Callable[[bytes], int]
    ) -> Position:
        """The first entry whose publish time is ``>= publish_time_ms`` (the end position
        if none), by binary search over the log. ``publish_time_of`` extracts the publish
        time from an entry's bytes (the managed ledger treats entries as opaque). Assumes
        publish times are non-decreasing in log order, as they are for one producer."""
        found = await self.reads.first_entry_where(
            lambda data: publish_time_of(data) >= publish_time_ms, after=None
        )
        return self.ledgers.end_position if found is None else found

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
        self.check_usable()
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
        self.maintainer.wake_unless_quiet()
        return cursor

    async def delete_cursor(self, name: str) -> None:
        """Remove a cursor and its stored state. Raises :class:`CursorNotFound`."""
        cursor = self.cursors.pop(name, None)
        if cursor is None:
            raise CursorNotFound(f"{self.name}: no cursor {name!r}")
        self.maintainer.wake()
        await cursor.delete_storage()

    def slowest_read_position(self) -> Position:
        """The read position of the cursor furthest behind (there is at least one)."""
        return min(c.state.read_position for c in self.cursors.values())

    # --- background work (the maintainer) --------------------------------------------------

    async def maintain(self, *, force: bool = False) -> None:
        """One round of background work (the maintenance task calls it periodically)."""
        await self.maintainer.maintain(force=force)

    async def persist_cursors(self) -> None:
        await self.maintainer.persist_cursors()

    async def apply_ttl(self) -> None:
        """Move every cursor's mark-delete past the entries published more than
        ``message_ttl_ms`` ago (no-op when the TTL is off). Whole ledgers whose last append
        is older than that go without reads; then, with ``publish_time_of``, a binary search
        between the slowest cursor and the last entry finds the last expired entry inside a
        ledger (one read when nothing there expired). Assumes publish times non-decreasing
        in log order, as Pulsar's expiry monitor does; an entry whose publish time cannot be
        read counts as not expired where the search probes it (it stops nothing)."""
        await self.maintainer.apply_ttl()

    @property
    def backlog_quota_exceeded(self) -> bool:
        """Whether a durable cursor's backlog was over the quota at the last check
        (:meth:`apply_backlog_quota`, run by maintenance; call it for a fresh answer)."""
        return self.maintainer.quota_exceeded

    def backlog_size_bytes(self, cursor: ManagedCursor) -> int:
        return self.ledgers.size_between(cursor.state.mark_delete, self.ledgers.last_confirmed)

    def apply_backlog_quota(self) -> None:
        """Check every durable cursor against the backlog quota: with
        ``PRODUCER_EXCEPTION`` appends are refused while one is over; with
        ``CONSUMER_BACKLOG_EVICTION`` an over-quota cursor skips whole oldest ledgers of
        its backlog until it is within the quota (never the current ledger)."""
        self.maintainer.apply_backlog_quota()

    async def trim(self) -> list[int]:
        """Delete the ledgers no durable cursor and no retention policy needs; returns
        their ids. The metadata is updated first, so a crash leaks at most ledgers."""
        return await self.maintainer.trim()

    def evict_cache(self) -> None:
        """Drop cached entries every cursor has already read (a bounded number now, the
        rest as new entries arrive: see :mod:`~magnetar.managed_ledger.entry_cache`), and
        those cached longer than ``cache_eviction_age_ms`` (read or not: an idle topic's
        cache empties instead of holding its last burst until the shared budget wants room)."""
        self.maintainer.evict_cache()

    # --- tiered storage (the offload manager) -------------------------------------------

    async def offload_prefix(self, up_to: Position) -> Position:
        """Offload every closed ledger before ``up_to``'s ledger to tiered storage (Pulsar's
        ``offloadPrefix``) and wait for it; returns the first position not offloaded.
        Raises :class:`OffloadNotConfigured` without an offloader, and
        :class:`~magnetar.managed_ledger.offload_manager.OffloadFailed` with the reason
        when the object store fails (retried with backoff by the maintenance rounds)."""
        return await self.offloads.offload_prefix(up_to)

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Persist cursors, finish in-flight appends, close ledgers. Idempotent."""
        if self.state is State.CLOSED:
            return
        await self.maintainer.stop()
        if self.fence_cause is None:
            await self.adds.drain()
            with contextlib.suppress(MagnetarError):
                await self.persist_cursors()
        self.state = State.CLOSED
        closed = ManagedLedgerClosed(f"{self.name} is closed")
        # no ledger to take them (storage failing): never left hanging
        self.adds.fail_all(closed)
        self._fail_waiters(closed)
        for cursor in self.cursors.values():
            await cursor.close_storage()
        for writer in (self.writer, self.rollover.unclosed):
            if writer is not None:
                with contextlib.suppress(Exception):
                    await writer.close()
        self.writer = self.rollover.unclosed = None
        if self._offloads is not None:
            await self._offloads.close()
        await self.reads.close()
        self.cache.clear()


def _call_each(callbacks: list[Callable[[bool], None]], appended: bool) -> None:
    for callback in callbacks:
        callback(appended)
