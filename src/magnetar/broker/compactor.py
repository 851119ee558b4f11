"""Topic compaction (Pulsar's ``TwoPhaseCompactor``): the key -> latest view of a topic.

Compaction of a topic reads, in log order, the previous compacted view (if any) and then
the log from the previous horizon up to the last entry at the start (the new horizon):

1. phase one (:meth:`CompactionPlan.observe`) records, per message key, the id of its latest
   message; a message with an empty payload (or ``null_value``) is a tombstone and removes
   its key. Batches are opened (decompressed, split) and each message counts by its own key.
2. phase two (:meth:`CompactionPlan.retain`) reads the same entries again and writes the
   survivors to a new ledger (:mod:`magnetar.managed_ledger.compaction`): an unbatched
   message survives if it is its key's latest; a batch survives if any message of it does,
   rebuilt from its surviving messages only (same metadata and compression, new
   ``num_messages_in_batch`` and checksum). Pulsar instead keeps every slot and marks the
   dropped ones ``compacted_out``, which keeps batch indexes; the official C++ client
   (pulsar-client 3.13) does not skip such slots and would deliver them as empty messages,
   so here a surviving message's batch index is its index among the survivors.

Messages without a key are dropped (Pulsar's ``topicCompactionRetainNullKey=false``, the
default since 3.2) unless ``retain_null_key``. Entries that cannot be parsed are kept whole.

The compacted ledger id and the horizon are stored as properties of the durable cursor
``__compaction`` together with its mark-delete position (the horizon) in one cursor
snapshot, persisted before the previous compacted ledger is deleted. A crash before that
leaks at most the new ledger; the previous view stays valid. That cursor also holds back
trimming of what is not compacted yet, as in Pulsar.

Reading: a subscription whose consumer asked for ``read_compacted`` (Exclusive or Failover
only, as in Pulsar) reads through :class:`~magnetar.managed_ledger.compaction.CompactedCursorReader`
with the view from :meth:`Compactor.view`.

Service API (``BrokerService.compactor``), used by the admin REST:

* ``await compactor.trigger_compaction(topic)`` — start compacting in the background
  (``PUT .../compaction``); raises :class:`~magnetar.common.errors.TopicNotFound`, or
  :class:`CompactionInProgress` (HTTP 409) if one is running;
* ``compactor.compaction_status(topic)`` — ``{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|
  "ERROR", "lastError": ""}`` (``GET .../compaction``; in memory, ``NOT_RUN`` after a restart);
* ``await compactor.compact(topic_object)`` — compact and wait (tests, tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError, NotAllowed, ProtocolError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.common.names import TopicName
from magnetar.managed_ledger.compaction import (
    COMPACTED_LEDGER_PROPERTY,
    HORIZON_ENTRY_PROPERTY,
    HORIZON_LEDGER_PROPERTY,
    CompactedLedger,
    CompactedView,
    encode_compacted_entry,
)
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import EARLIEST, Position
from magnetar.protocol import (
    Entry,
    MessageId,
    SingleMessageMetadata,
    Subscribe,
    SubType,
    build_batch,
    split_batch,
)
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.entry import build_entry

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)

COMPACTION_SUBSCRIPTION = "__compaction"

MessageKey = tuple[Position, int]
"""A message's id in the log: its entry and its batch index (-1: not batched)."""


class CompactionInProgress(NotAllowed, RuntimeError):
    """A compaction of this topic is already running (HTTP 409 in the admin REST, whose
    handler catches ``RuntimeError``; hence the second base)."""


class CompactionState(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@frozen_struct(kw_only=False)
class CompactionResult:
    ledger_id: int
    """The compacted ledger (-1: there was nothing to compact and no previous view)."""
    horizon: Position
    keys: int
    entries_read: int
    entries_written: int


# --- the sans-IO core ---------------------------------------------------------------------


@dataclass(slots=True)
class _Message:
    key: str | None
    tombstone: bool
    compacted_out: bool = False


def _is_tombstone(payload_size: int, null_value: bool) -> bool:
    return null_value or payload_size == 0


class CompactionPlan:
    """Phase one and phase two of a compaction, over ``(position, entry bytes)`` pairs fed
    in log order. Holds one message id per live key (never payloads)."""

    def __init__(self, *, retain_null_key: bool = False) -> None:
        self.latest: dict[str, MessageKey] = {}
        self.retain_null_key = retain_null_key

    # phase one

    def observe(self, position: Position, data: bytes) -> None:
        """Record the messages of one entry (later calls win for a key)."""
        messages = _messages_of(data)
        if messages is None:
            return
        for index, m in messages:
            if m.key is None or m.compacted_out:
                continue
            if m.tombstone:
                self.latest.pop(m.key, None)
            else:
                self.latest[m.key] = (position, index)

    # phase two

    def _keeps(self, position: Position, index: int, m: _Message) -> bool:
        if m.compacted_out:
            return False
        if m.key is None:
            return self.retain_null_key and not m.tombstone
        return self.latest.get(m.key) == (position, index)

    def retain(self, position: Position, data: bytes) -> bytes | None:
        """The bytes to store for this entry in the compacted ledger, or ``None`` if
        nothing of it survives. Unparsable entries are kept whole."""
        try:
            entry = Entry(data)
            md = entry.metadata
        except ProtocolError:
            return data
        if md.num_messages_in_batch is None:
            m = _single_message(entry)
            return data if self._keeps(position, -1, m) else None
        try:
            records = _batch_records(entry)
        except ProtocolError:
            return data
        keep = [
            self._keeps(position, i, _batched_message(single, len(payload)))
            for i, (single, payload) in enumerate(records)
        ]
        if not any(keep):
            return None
        if all(keep):
            return data
        survivors = [record for record, kept in zip(records, keep, strict=True) if kept]
        batch = build_batch(survivors)
        typed = md.to_message_metadata()
        typed = dataclasses.replace(
            typed, uncompressed_size=len(batch), num_messages_in_batch=len(survivors)
        )
        return b"".join(build_entry(typed, compress(md.compression, batch)))


def _single_message(entry: Entry) -> _Message:
    md = entry.metadata
    size = md.uncompressed_size if int(md.compression) else len(entry.payload)
    return _Message(md.partition_key, _is_tombstone(size, md.null_value))


def _batched_message(single: SingleMessageMetadata, payload_size: int) -> _Message:
    return _Message(
        single.partition_key, _is_tombstone(payload_size, single.null_value), single.compacted_out
    )


def _batch_records(entry: Entry) -> list[tuple[SingleMessageMetadata, memoryview]]:
    md = entry.metadata
    payload = decompress(md.compression, entry.payload, md.uncompressed_size)
    return split_batch(payload, md.num_messages_in_batch)


def _messages_of(data: bytes) -> list[tuple[int, _Message]] | None:
    """``(batch index, message)`` pairs of an entry; ``None`` if it cannot be parsed."""
    try:
        entry = Entry(data)
        md = entry.metadata
        if md.num_messages_in_batch is None:
            return [(-1, _single_message(entry))]
        return [
            (i, _batched_message(single, len(payload)))
            for i, (single, payload) in enumerate(_batch_records(entry))
        ]
    except ProtocolError:
        return None


def read_compacted_of(cmd: Subscribe) -> bool:
    """Whether a SUBSCRIBE asks for the compacted view. Raises :class:`NotAllowed` for
    Shared/Key_Shared subscriptions, as Pulsar does."""
    if not cmd.read_compacted:
        return False
    if cmd.sub_type not in (SubType.Exclusive, SubType.Failover):
        raise NotAllowed(
            "Read compacted can only be used with exclusive or failover persistent subscriptions"
        )
    return True


# --- the asyncio shell --------------------------------------------------------------------


@dataclass(slots=True)
class _TopicCompaction:
    state: CompactionState = CompactionState.NOT_RUN
    last_error: str = ""
    task: asyncio.Task[CompactionResult] | None = None
    last_result: CompactionResult | None = None


class Compactor:
    """Compaction for every topic of one broker: runs compactions (one at a time per
    topic), keeps their status, and serves each loaded topic's compacted view."""

    def __init__(
        self,
        service: BrokerService,
        *,
        read_batch_entries: int = 200,
        writes_in_flight_max: int = 500,
        retain_null_key: bool = False,
    ) -> None:
        self._service = service
        self.read_batch_entries = read_batch_entries
        self.writes_in_flight_max = writes_in_flight_max
        self.retain_null_key = retain_null_key
        self._runs: dict[str, _TopicCompaction] = {}
        self._views: dict[str, tuple[ManagedLedger, asyncio.Future[CompactedLedger | None]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # --- admin API -------------------------------------------------------------------------

    async def trigger_compaction(self, topic: str | TopicName | Topic) -> None:
        """Start compacting ``topic`` (a name, or a loaded topic) in the background and
        return. Raises TopicNotFound, :class:`CompactionInProgress`, InvalidTopicName."""
        if isinstance(topic, str | TopicName):
            name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
            loaded = None
        else:
            name, loaded = topic.name, topic
        run = self._runs.get(name.full_name)
        if run is not None and run.task is not None and not run.task.done():
            raise CompactionInProgress("Compaction already in progress")
        if loaded is None:
            loaded = await self._service.get_topic(name, create=False)
        run = self._runs.setdefault(name.full_name, _TopicCompaction())
        if run.task is not None and not run.task.done():
            raise CompactionInProgress("Compaction already in progress")
        run.state = CompactionState.RUNNING
        run.last_error = ""
        run.task = asyncio.get_running_loop().create_task(
            self.compact(loaded), name=f"compaction-{name.full_name}"
        )
        run.task.add_done_callback(_retrieve)

    def compaction_status(self, topic: str | TopicName | Topic) -> dict[str, str]:
        """``{"status": ..., "lastError": ...}`` as Pulsar's ``LongRunningProcessStatus``."""
        if isinstance(topic, str | TopicName):
            key = (topic if isinstance(topic, TopicName) else TopicName.parse(topic)).full_name
        else:
            key = topic.full_name
        run = self._runs.get(key)
        if run is None:
            return {"status": CompactionState.NOT_RUN.value, "lastError": ""}
        return {"status": run.state.value, "lastError": run.last_error}

    async def trigger(self, topic: str | TopicName | Topic) -> None:
        """:meth:`trigger_compaction` under the name ``magnetar.admin`` calls."""
        await self.trigger_compaction(topic)

    async def status(self, topic: str | TopicName | Topic) -> dict[str, str]:
        """:meth:`compaction_status` under the name ``magnetar.admin`` calls."""
        return self.compaction_status(topic)

    async def close(self) -> None:
        """Cancel running compactions and close the views' ledgers."""
        for run in self._runs.values():
            if run.task is not None and not run.task.done():
                run.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, MagnetarError):
                    await run.task
        for _, fut in list(self._views.values()):
            await _close_view(fut)
        self._views.clear()

    # --- read-compacted subscriptions -------------------------------------------------------

    async def prepare_read_compacted(self, topic: Topic, cmd: Subscribe) -> bool:
        """Whether the SUBSCRIBE reads compacted (raises :class:`NotAllowed` for Shared and
        Key_Shared); if so, loads the topic's view, so :meth:`last_message_id` can answer."""
        if not read_compacted_of(cmd):
            return False
        await self.view(topic)
        return True

    def last_message_id(self, topic: Topic, default: MessageId) -> MessageId:
        """GET_LAST_MESSAGE_ID for a read-compacted consumer: when nothing follows the
        horizon, the last message of the view (``(-1, -1)``: an empty view), since the log's
        last message may have been compacted away and a reader would wait for it forever
        (Pulsar does the same). ``default`` (the log's last message) otherwise."""
        cached = self._views.get(topic.full_name)
        if cached is None or cached[0] is not topic.ml:
            return default
        fut = cached[1]
        if not fut.done() or fut.cancelled() or fut.exception() is not None:
            return default
        view = fut.result()
        if view is None or topic.ml.last_confirmed > view.horizon:
            return default
        last = view.last_entry
        if last is None:
            return MessageId(-1, -1, topic.partition_index)
        batch_index = -1
        with contextlib.suppress(ProtocolError):
            size = Entry(last.data).metadata.num_messages_in_batch
            if size is not None:
                batch_index = size - 1
        return MessageId(last.position[0], last.position[1], topic.partition_index, batch_index)

    # --- views -----------------------------------------------------------------------------

    async def view(self, topic: Topic) -> CompactedView | None:
        """The topic's current compacted view, opened on first use from the compaction
        cursor's properties (``None``: never compacted). Raises MagnetarError."""
        key = topic.full_name
        cached = self._views.get(key)
        if cached is not None and cached[0] is topic.ml:
            return await asyncio.shield(cached[1])
        fut: asyncio.Future[CompactedLedger | None] = asyncio.get_running_loop().create_future()
        self._views[key] = (topic.ml, fut)
        if cached is not None:
            await _close_view(cached[1])
        try:
            view = await self._load_view(topic.ml)
        except BaseException as exc:
            if self._views.get(key, (None, None))[1] is fut:
                del self._views[key]
            fut.set_exception(exc)
            fut.exception()
            raise
        fut.set_result(view)
        return view

    async def _load_view(self, ml: ManagedLedger) -> CompactedLedger | None:
        cursor = ml.cursors.get(COMPACTION_SUBSCRIPTION)
        if cursor is None:
            return None
        props = cursor.state.properties
        ledger_id = props.get(COMPACTED_LEDGER_PROPERTY)
        if ledger_id is None:
            return None
        horizon = Position(
            props.get(HORIZON_LEDGER_PROPERTY, cursor.state.mark_delete[0]),
            props.get(HORIZON_ENTRY_PROPERTY, cursor.state.mark_delete[1]),
        )
        return await CompactedLedger.open(ml.storage, ledger_id, horizon)

    def _install(
        self, topic: Topic, view: CompactedLedger
    ) -> asyncio.Future[CompactedLedger | None] | None:
        """Make ``view`` the topic's view; returns the previous one's future."""
        old = self._views.get(topic.full_name)
        fut: asyncio.Future[CompactedLedger | None] = asyncio.get_running_loop().create_future()
        fut.set_result(view)
        self._views[topic.full_name] = (topic.ml, fut)
        return None if old is None else old[1]

    # --- compaction ------------------------------------------------------------------------

    async def compact(self, topic: Topic) -> CompactionResult:
        """Compact ``topic`` up to its last entry now; returns when the new view is in
        use. Raises MagnetarError (status ERROR with the message) on failure."""
        key = topic.full_name
        run = self._runs.setdefault(key, _TopicCompaction())
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            run.state = CompactionState.RUNNING
            try:
                result = await self._compact(topic)
            except asyncio.CancelledError:
                run.state = CompactionState.ERROR
                run.last_error = "cancelled"
                raise
            except Exception as exc:
                run.state = CompactionState.ERROR
                run.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: compaction failed: %s", key, run.last_error)
                raise
            run.state = CompactionState.SUCCESS
            run.last_error = ""
            run.last_result = result
            return result

    async def _compact(self, topic: Topic) -> CompactionResult:
        ml = topic.ml
        cursor = ml.cursors.get(COMPACTION_SUBSCRIPTION)
        if cursor is None:
            cursor = await ml.open_cursor(COMPACTION_SUBSCRIPTION, earliest=True)
        old = await self.view(topic)
        end = ml.last_confirmed
        start_after = cursor.state.mark_delete
        if old is not None:
            start_after = max(start_after, old.horizon)
        if not ml.ledgers.exists(end) or end <= start_after:
            if old is None:
                return CompactionResult(-1, start_after, 0, 0, 0)
            return CompactionResult(old.ledger_id, old.horizon, -1, 0, old.entries)
        log.info("%s: compacting up to %s", topic.full_name, end)

        plan = CompactionPlan(retain_null_key=self.retain_null_key)
        read = 0
        async for pos, data in self._source(ml, old, start_after, end):
            plan.observe(pos, data)
            read += 1

        writer = await ml.storage.create_ledger(
            {"managed-ledger": ml.name, "compacted-topic": "true", "horizon": str(end)}
        )
        written = 0
        try:
            pending: deque[asyncio.Future[int]] = deque()
            async for pos, data in self._source(ml, old, start_after, end):
                kept = plan.retain(pos, data)
                if kept is None:
                    continue
                pending.append(writer.add_nowait(encode_compacted_entry(pos, kept)))
                written += 1
                while len(pending) >= self.writes_in_flight_max:
                    await pending.popleft()
            while pending:
                await pending.popleft()
            await writer.close()
        except BaseException:
            with contextlib.suppress(Exception):
                await writer.close()
            with contextlib.suppress(Exception):
                await ml.storage.delete_ledger(writer.ledger_id)
            raise

        try:
            new_view = await CompactedLedger.open(ml.storage, writer.ledger_id, end)
        except BaseException:
            with contextlib.suppress(Exception):
                await ml.storage.delete_ledger(writer.ledger_id)
            raise
        # From here the cursor state names the new ledger: it is never deleted on failure
        # (a later persist may store that state), at worst it leaks.
        props = cursor.state.properties
        props[COMPACTED_LEDGER_PROPERTY] = writer.ledger_id
        props[HORIZON_LEDGER_PROPERTY] = end[0]
        props[HORIZON_ENTRY_PROPERTY] = end[1]
        cursor.ack_cumulative(end)
        old_fut = self._install(topic, new_view)
        await cursor.flush()
        if old_fut is not None:
            await _close_view(old_fut)
        if old is not None:
            await ml.storage.delete_ledger(old.ledger_id)
        log.info(
            "%s: compacted to ledger %d (%d keys, %d of %d entries kept, horizon %s)",
            topic.full_name,
            writer.ledger_id,
            len(plan.latest),
            written,
            read,
            end,
        )
        return CompactionResult(writer.ledger_id, end, len(plan.latest), read, written)

    async def _source(
        self, ml: ManagedLedger, old: CompactedView | None, after: Position, end: Position
    ) -> AsyncIterator[tuple[Position, bytes]]:
        """The previous view's entries, then the log's entries in ``(after, end]``."""
        batch = self.read_batch_entries
        if old is not None:
            at = EARLIEST
            while True:
                got = await old.read(at, batch)
                if not got:
                    break
                for e in got:
                    yield e.position, e.data
                at = got[-1].position
        for seg in list(ml.ledgers):
            if seg.entries <= 0 or seg.ledger_id < after[0] or seg.ledger_id > end[0]:
                continue
            first = after[1] + 1 if seg.ledger_id == after[0] else 0
            last = end[1] if seg.ledger_id == end[0] else seg.entries - 1
            for start in range(first, last + 1, batch):
                datas = await ml.read_range(
                    seg.ledger_id, start, min(start + batch - 1, last), read_ahead=False
                )
                for i, data in enumerate(datas):
                    yield Position(seg.ledger_id, start + i), data


def _retrieve(task: asyncio.Task[CompactionResult]) -> None:
    if not task.cancelled():
        task.exception()  # reported through the status; do not log "never retrieved"


async def _close_view(fut: asyncio.Future[CompactedLedger | None]) -> None:
    if fut.done() and not fut.cancelled() and fut.exception() is None:
        view = fut.result()
        if view is not None:
            await view.close()
