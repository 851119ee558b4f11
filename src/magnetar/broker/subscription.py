"""A subscription: one cursor, its consumers, and the dispatcher that feeds them.

The dispatcher is one task per subscription. Each round it reads up to
``dispatch_entries_max`` entries (entries to replay first, for Shared/Key_Shared), asks the
decision core of the subscription type who gets which entry, and writes MESSAGE frames.
It never sends more than a consumer's permits allow (reference §6.6): an entry is sent
only while the consumer has permits > 0, and costs its message count. When there is
nothing to do it parks until a FLOW, an ack, a redelivery, a consumer change or a new
entry wakes it.

Types (reference §6.5-§6.10):

* Exclusive / Failover: :class:`~magnetar.broker.failover.ActiveConsumerSelector` picks the
  active consumer; only it receives entries. A change of active consumer rewinds the cursor
  so the new one gets every unacknowledged entry. Redelivery rewinds the cursor.
* Shared: :class:`~magnetar.broker.shared_dispatch.SharedConsumerRing` round-robin by
  permits and priority. Entries of a departed consumer and redelivered entries go to the
  replay set, read again before new entries; redelivery counts from
  :class:`~magnetar.broker.redelivery_tracker.RedeliveryTracker`.
* Key_Shared: :class:`~magnetar.broker.key_shared.KeySharedRouter` (AUTO_SPLIT or STICKY,
  ordering rule for consumers that join late).
* Shared and Key_Shared hold entries with a future ``deliver_at_time`` in a
  :class:`~magnetar.broker.delayed_delivery.DelayedDeliveryTracker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING

from magnetar.broker import subscription_rules as rules
from magnetar.broker.consumer import Consumer, PendingEntries
from magnetar.broker.delayed_delivery import DelayedDeliveryFull, DelayedDeliveryTracker
from magnetar.broker.failover import (
    ActiveConsumerSelector,
    FailoverConsumer,
    FailoverEffect,
    NotifyActiveConsumer,
    RewindCursor,
    ScheduleActivation,
    SingleActiveType,
    StartDispatch,
)
from magnetar.broker.key_shared import HashRange, KeySharedRouter, sticky_key, sticky_key_hash
from magnetar.broker.rate_limit import DispatchRateLimiter
from magnetar.broker.redelivery_tracker import RedeliveryTracker, redelivery_tracker_for
from magnetar.broker.shared_dispatch import SharedConsumerRing
from magnetar.common.clock import Timer
from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.compaction import CompactedCursorReader
from magnetar.managed_ledger.entry_run import EntryRun
from magnetar.managed_ledger.errors import InvalidCursorPosition, ManagedLedgerError
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.position import Position
from magnetar.protocol import (
    Ack,
    AckResponse,
    AckType,
    ActiveConsumerChange,
    Entry,
    GetLastMessageIdResponse,
    KeySharedMeta,
    MessageId,
    ProtocolError,
    Seek,
    SubType,
    Success,
)

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)

_ACTIVE_CONSUMER_CHANGE_MIN_PROTOCOL = 12


_DELIVER_AT_TIME_TAG = b"\x98\x01"
"""The key of MessageMetadata's ``deliver_at_time`` (field 19, varint) as it appears on
the wire."""
_tuple_new = tuple.__new__
_ledger_and_entry_ids = attrgetter("ledger_id", "entry_id")


def _popcount(words: Sequence[int]) -> int:
    return sum(bin(w & 0xFFFFFFFFFFFFFFFF).count("1") for w in words)


def _publish_time_of(data: bytes) -> int:
    return Entry(data).metadata.publish_time


class _Item:
    """An entry on its way to a consumer."""

    __slots__ = ("ack_set", "data", "key_hash", "messages", "position")

    def __init__(self, position: Position, data: bytes, messages: int | None = None) -> None:
        self.position = position
        self.data = data
        self.messages = 0 if messages is None else messages
        """0 until known (from the log's cache, or by :meth:`Subscription._prepare`)."""
        self.ack_set: list[int] | None = None
        self.key_hash = 0


class _Wake:
    """The dispatcher's wake-up flag. :meth:`set` also resolves the future the dispatcher is
    parked on (:attr:`parked`), so waiting for "an append or a wake-up" is one future."""

    __slots__ = ("flag", "parked")

    def __init__(self) -> None:
        self.flag = False
        self.parked: asyncio.Future[None] | None = None

    def set(self) -> None:
        self.flag = True
        parked = self.parked
        if parked is not None and not parked.done():
            parked.set_result(None)

    def clear(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag


class Subscription:
    """One subscription of ``topic``. Created by the topic; consumers come and go."""

    def __init__(
        self, topic: Topic, name: str, cursor: ManagedCursor, durable: bool, sub_type: SubType
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type = sub_type
        self.consumers: dict[int, Consumer] = {}
        self._config = topic.service.config
        self._clock = topic.service.clock
        self._selector: ActiveConsumerSelector | None = None
        self._ring: SharedConsumerRing | None = None
        self._router: KeySharedRouter | None = None
        self._key_shared_policy: rules.KeySharedPolicy | None = None
        self._tracker: RedeliveryTracker = redelivery_tracker_for(rules.SubType(int(sub_type)))
        self._delayed: DelayedDeliveryTracker | None = None
        self._replay: dict[Position, int] = {}
        """Entries to send again (Shared/Key_Shared) -> key hash (Key_Shared only)."""
        self._wake = _Wake()
        self._sub_blocked_on_unacked = False
        self._task: asyncio.Task[None] | None = None
        self._activation_timer: Timer | None = None
        """Fires the selector's pending failover activation (Failover)."""
        self._orphan_timer: Timer | None = None
        self._delayed_timer: Timer | None = None
        self._rate_timer: Timer | None = None
        """Wakes the dispatcher when a used-up dispatch rate allows reading again."""
        self.dispatch_limiter = DispatchRateLimiter()
        """This subscription's own dispatch rate (policy ``subscriptionDispatchRate``)."""
        self._epoch = 0
        self.closed = False
        self.keep_when_empty = False
        self.msg_out_counter = 0
        self.read_compacted = False
        """Set by the first consumer (Exclusive/Failover): read the compacted view."""
        self._compacted_reader: CompactedCursorReader | None = None
        self._reset_done: asyncio.Event | None = None
        """Set while :meth:`seek` moves the cursor; SUBSCRIBE waits for it to clear."""
        self.waiting_for_reset = 0
        """Callers of :meth:`wait_for_reset` now waiting (observable by tests)."""

    # --- consumers -----------------------------------------------------------------------

    def _configure(self, sub_type: SubType, key_shared: KeySharedMeta | None) -> None:
        """Set up the dispatch core for the first consumer's type."""
        self.sub_type = sub_type
        self._selector = None
        self._ring = None
        self._router = None
        self._key_shared_policy = None
        self._replay.clear()
        self._tracker = redelivery_tracker_for(rules.SubType(int(sub_type)))
        self._delayed = None
        cfg = self._config
        if sub_type in (SubType.Exclusive, SubType.Failover):
            self._selector = ActiveConsumerSelector(
                self.topic.full_name,
                self.topic.partition_index,
                SingleActiveType.EXCLUSIVE
                if sub_type is SubType.Exclusive
                else SingleActiveType.FAILOVER,
                failover_delay_ms=cfg.failover_delay_ms,
            )
            return
        self._delayed = DelayedDeliveryTracker(self._clock, tick_ms=cfg.delayed_delivery_tick_ms)
        if sub_type is SubType.Shared:
            self._ring = SharedConsumerRing()
            return
        policy = _key_shared_policy(key_shared)
        self._key_shared_policy = policy
        self._router = KeySharedRouter(
            sticky=policy.mode is rules.KeySharedMode.STICKY,
            allow_out_of_order=policy.allow_out_of_order_delivery,
        )

    def add_consumer(self, consumer: Consumer, key_shared: KeySharedMeta | None) -> None:
        """Admit ``consumer``; raises ConsumerBusy / ConsumerAssignError (nothing changed)."""
        new_type = consumer.sub_type
        current = self.sub_type if self.consumers else None
        new_policy = _key_shared_policy(key_shared) if new_type is SubType.Key_Shared else None
        rules.check_subscribe(
            None if current is None else rules.SubType(int(current)),
            len(self.consumers),
            rules.SubType(int(new_type)),
            self._key_shared_policy,
            new_policy,
        )
        if not self.consumers:
            self._configure(new_type, key_shared)
        if self._selector is not None:
            effects = self._selector.add(
                FailoverConsumer(consumer.uid, consumer.name, consumer.priority_level),
                self._selector_now_ms(),
            )
            self.consumers[consumer.uid] = consumer
            self._apply_failover(effects)
        elif self._ring is not None:
            self._ring.add(consumer.uid, consumer.priority_level)
            self.consumers[consumer.uid] = consumer
        else:
            assert self._router is not None
            ranges: tuple[HashRange, ...] = ()
            if key_shared is not None:
                ranges = tuple(HashRange(r.start, r.end) for r in key_shared.hash_ranges)
            state = self.cursor.state
            ledgers = self.topic.ml.ledgers
            read_pos = ledgers.normalize(state.read_position)
            since = (
                ledgers.entries_between(state.mark_delete, ledgers.previous_position(read_pos))
                if read_pos > state.mark_delete
                else 0
            )
            self._router.add_consumer(consumer.uid, read_pos, since, ranges)
            self.consumers[consumer.uid] = consumer
        self._ensure_task()
        self._wake.set()

    async def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer`` (close, disconnect, seek); its unacknowledged entries go to
        the remaining consumers. Idempotent."""
        if self.consumers.get(consumer.uid) is not consumer:
            return
        del self.consumers[consumer.uid]
        consumer.closed = True
        pending = consumer.pending
        consumer.pending = PendingEntries()
        if self._selector is not None:
            with contextlib.suppress(MagnetarError):
                self._apply_failover(self._selector.remove(consumer.uid, self._selector_now_ms()))
        else:
            if self._ring is not None:
                self._ring.remove(consumer.uid)
            if self._router is not None:
                self._router.remove_consumer(consumer.uid)
            for pos in pending:
                if not self.cursor.state.is_acked(pos):
                    self._tracker.add_if_absent(pos)
                    self._replay[pos] = self._replay.get(pos, 0)
        if not self.consumers:
            self._tracker.clear()
            self._replay.clear()
            self._cancel_timers()
            self._epoch += 1
            self.cursor.rewind()
            if not self.durable and not self.keep_when_empty:
                await self.topic.drop_subscription(self)
                return
        self._wake.set()

    def _selector_now_ms(self) -> int:
        """The failover selector's time: the injected clock's monotonic reading, the one its
        ``call_later`` measures, so a timer armed for a due time finds it reached."""
        return int(self._clock.monotonic_s() * 1000)

    def _apply_failover(self, effects: Sequence[FailoverEffect]) -> None:
        for effect in effects:
            match effect:
                case ScheduleActivation(due_ms=due_ms):
                    if self._activation_timer is not None:
                        self._activation_timer.cancel()
                    delay_s = max(0, due_ms - self._selector_now_ms()) / 1000
                    self._activation_timer = self._clock.call_later(
                        delay_s, self._on_failover_timer
                    )
                case RewindCursor():
                    self._rewind()
                case NotifyActiveConsumer(consumer_id=uid, is_active=active):
                    c = self.consumers.get(uid)
                    if (
                        c is not None
                        and c.connection.protocol_version >= _ACTIVE_CONSUMER_CHANGE_MIN_PROTOCOL
                    ):
                        c.connection.send_command(
                            ActiveConsumerChange(consumer_id=c.consumer_id, is_active=active)
                        )
                case StartDispatch():
                    self._wake.set()

    def _on_failover_timer(self) -> None:
        self._activation_timer = None
        if self._selector is not None and not self.closed:
            self._apply_failover(self._selector.on_timer(self._selector_now_ms()))

    def _rewind(self) -> None:
        for c in self.consumers.values():
            c.pending.clear()
        self._epoch += 1
        self.cursor.rewind()
        self._wake.set()

    def _cancel_timers(self) -> None:
        for timer in (
            self._activation_timer,
            self._orphan_timer,
            self._delayed_timer,
            self._rate_timer,
        ):
            if timer is not None:
                timer.cancel()
        self._activation_timer = None
        self._orphan_timer = None
        self._delayed_timer = None
        self._rate_timer = None

    # --- commands from consumers ---------------------------------------------------------

    def handle_flow(self, consumer: Consumer, permits: int) -> None:
        if consumer.closed:
            return
        consumer.permits += permits
        consumer.meters.flow.touch()
        if self._ring is not None:
            self._ring.add_permits(consumer.uid, permits)
        self._wake.set()

    def handle_ack(self, consumer: Consumer, ack: Ack) -> None:
        """Apply an ACK. Individual acknowledgements of whole entries (a client groups
        them: often hundreds per ACK) are applied in one pass: the cursor takes them as
        runs, the consumer's pending entries, the replay set and the redelivery counts
        drop them at once."""
        cursor = self.cursor
        state = cursor.state
        mark_delete_before = state.mark_delete
        consumer.meters.ack.touch()
        # messageAckRate counts messages (batch-aware), not message ids
        cumulative = ack.ack_type is AckType.Cumulative
        backlog_before = cursor.backlog_messages if cumulative else 0
        acked_messages = 0
        try:
            if cumulative:
                if self.sub_type in (SubType.Exclusive, SubType.Failover) and ack.message_id:
                    mid = ack.message_id[0]
                    pos = Position(mid.ledger_id, mid.entry_id)
                    if mid.ack_set:
                        cursor.ack_cumulative(self.topic.ml.ledgers.previous_position(pos))
                        self._ack_batch(consumer, pos, mid)
                    else:
                        cursor.ack_cumulative(pos)
                    for c in self.consumers.values():
                        c.pending.remove_up_to(state.mark_delete)
            else:
                mids = ack.message_id
                batch_mids = [mid for mid in mids if mid.ack_set]
                whole = [mid for mid in mids if not mid.ack_set] if batch_mids else mids
                positions = list(
                    map(_tuple_new, repeat(Position), map(_ledger_and_entry_ids, whole))
                )
                applied = False
                try:
                    acked_messages = cursor.ack_positions(positions)
                    applied = True
                finally:  # also after an invalid position: drop what is acknowledged now
                    if not applied:
                        positions = [p for p in positions if state.is_acked(p)]
                    self._forget_acked(consumer, positions)
                for mid in batch_mids:
                    acked_messages += 1
                    self._ack_batch(consumer, Position(mid.ledger_id, mid.entry_id), mid)
        except InvalidCursorPosition as exc:
            log.info("%s/%s: ignoring ack: %s", self.topic.full_name, self.name, exc)
        if cumulative:
            consumer.meters.ack.record(max(backlog_before - cursor.backlog_messages, 0))
        else:
            consumer.meters.ack.record(acked_messages)
        if cursor.state.mark_delete != mark_delete_before:
            consumer.subscription_meters.last_mark_delete_advanced_ms = (
                consumer.meters.ack.last_record_ms
            )
        if ack.request_id is not None:
            consumer.connection.send_command(
                AckResponse(consumer_id=consumer.consumer_id, request_id=ack.request_id)
            )
        if consumer.blocked_on_unacked or self._sub_blocked_on_unacked:
            self._wake.set()
        if self._router is not None:
            state = cursor.state
            if self._router.recently_joined.release(state.first_unacked()) or self._replay:
                self._wake.set()

    def _forget_acked(self, consumer: Consumer, positions: list[Position]) -> None:
        """Drop acknowledged ``positions`` from ``consumer``'s pending entries, the replay
        set and the redelivery counts."""
        consumer.pending.remove_many(positions)
        replay = self._replay
        if replay:
            for p in positions:
                replay.pop(p, None)
        if len(self._tracker):
            self._tracker.remove_many(positions)

    def _ack_batch(self, consumer: Consumer, pos: Position, mid: MessageId) -> None:
        size = mid.batch_size
        if size is None or size <= 0:
            size = consumer.pending.get(pos) or self.topic.ml.ledgers.messages_at(pos)
            if size <= 1:
                size = max(size, 64 * len(mid.ack_set))
        words = mid.ack_set
        acked = (
            [i for i in range(size) if not (words[i // 64] >> (i % 64)) & 1]
            if len(words) * 64 >= size
            else list(range(size))
        )
        self.cursor.ack_batch_indexes(pos, size, acked)
        if self.cursor.state.is_acked(pos):
            consumer.pending.pop(pos, None)
            self._replay.pop(pos, None)
            self._tracker.remove(pos)

    def handle_redeliver(self, consumer: Consumer, ids: Sequence[MessageId]) -> None:
        if consumer.closed:
            return
        if self._selector is not None:
            if self._selector.dispatch_paused:
                return
            active = self._selector.active
            if active is not None and active.consumer_id == consumer.uid:
                self._rewind()
            return
        positions = (
            [Position(m.ledger_id, m.entry_id) for m in ids] if ids else list(consumer.pending)
        )
        consumer.meters.redeliver.record(len(positions))
        for pos in positions:
            if consumer.pending.pop(pos, None) is None and ids:
                continue
            if self.cursor.state.is_acked(pos):
                continue
            self._tracker.increment(pos)
            self._replay[pos] = self._replay.get(pos, 0)
        self._wake.set()

    async def unsubscribe(self, consumer: Consumer, request_id: int) -> Success:
        is_active = True
        if self._selector is not None:
            active = self._selector.active
            is_active = active is not None and active.consumer_id == consumer.uid
        rules.check_unsubscribe(
            rules.SubType(int(self.sub_type)),
            len(self.consumers),
            consumer.uid in self.consumers,
            is_active,
        )
        consumer.connection.consumers.pop(consumer.consumer_id, None)
        self.keep_when_empty = True
        await self.remove_consumer(consumer)
        await self.topic.delete_subscription(self)
        return Success(request_id=request_id)

    @property
    def resetting(self) -> bool:
        """True while a seek is moving the cursor (consumers are detached meanwhile)."""
        return self._reset_done is not None

    async def wait_for_reset(self) -> None:
        """Return once no seek is moving the cursor. A consumer must not attach during a
        reset: it would be fed from the read position the reset is about to replace, and
        a dispatcher that found nothing there would stay parked after the reset (nothing
        wakes it until the next append). Pulsar fences the subscription for the reset and
        refuses SUBSCRIBE meanwhile; here the SUBSCRIBE waits, bounded by the reset."""
        while (done := self._reset_done) is not None:
            self.waiting_for_reset += 1
            try:
                await done.wait()
            finally:
                self.waiting_for_reset -= 1

    async def seek(self, cmd: Seek) -> Success:
        """Reset the cursor to the SEEK's target, as Pulsar does: the consumers are
        disconnected first (CLOSE_CONSUMER; they reconnect and resubscribe), so nothing is
        dispatched to them from the old read position while the cursor moves; SUCCESS once
        the cursor is reset. Seeks of one subscription run one at a time; a SUBSCRIBE that
        arrives meanwhile is answered once the reset is over (:meth:`wait_for_reset`)."""
        await self.wait_for_reset()
        done = asyncio.Event()
        self._reset_done = done
        try:
            await self._reset_cursor(cmd)
        finally:
            self._reset_done = None
            done.set()
        if not self.consumers and not self.durable:
            self._schedule_orphan_check()
        return Success(request_id=cmd.request_id)

    async def _reset_cursor(self, cmd: Seek) -> None:
        ledgers = self.topic.ml.ledgers
        self._epoch += 1
        self.keep_when_empty = True
        try:
            for c in list(self.consumers.values()):
                c.connection.consumer_closed_by_broker(c)
                await self.remove_consumer(c)
        finally:
            self.keep_when_empty = False
        if cmd.message_publish_time is not None and cmd.message_id is None:
            await self.cursor.reset_to_publish_time(cmd.message_publish_time, _publish_time_of)
        else:
            mid = cmd.message_id or MessageId(-1, -1)
            if mid.is_earliest or mid.ledger_id < 0:
                target = ledgers.first_position
            elif mid.is_latest:
                target = ledgers.end_position
            else:
                target = Position(mid.ledger_id, max(mid.entry_id, 0))
                target = min(target, ledgers.end_position)
            await self.cursor.reset(target)
        self._replay.clear()
        self._tracker.clear()
        if self._delayed is not None:
            self._delayed.clear()

    def _schedule_orphan_check(self) -> None:
        """A reader's subscription emptied by a seek waits for its consumer to come back;
        drop it if none does within a while."""

        def check() -> None:
            self._orphan_timer = None
            if not self.consumers and not self.closed:
                task = asyncio.get_running_loop().create_task(self.topic.drop_subscription(self))
                self.topic.service.track(task)

        if self._orphan_timer is not None:
            self._orphan_timer.cancel()
        timeout_s = self._config.orphan_reader_subscription_timeout_ms / 1000
        self._orphan_timer = self._clock.call_later(timeout_s, check)

    def last_message_id_response(self, request_id: int) -> GetLastMessageIdResponse:
        md = self.cursor.state.mark_delete
        last = self.topic.last_message_id()
        if self.read_compacted:
            last = self.topic.service.compactor.last_message_id(self.topic, last)
        return GetLastMessageIdResponse(
            last_message_id=last,
            request_id=request_id,
            consumer_mark_delete_position=MessageId(md[0], md[1], self.topic.partition_index),
        )

    @property
    def backlog_messages(self) -> int:
        return self.cursor.backlog_messages

    # --- read-only views for stats -------------------------------------------------------

    @property
    def active_consumer(self) -> Consumer | None:
        """The consumer receiving messages of an Exclusive/Failover subscription."""
        active = self._selector.active if self._selector is not None else None
        return None if active is None else self.consumers.get(active.consumer_id)

    @property
    def delayed_messages(self) -> int:
        """Entries held back by ``deliver_at_time`` (Shared/Key_Shared)."""
        return 0 if self._delayed is None else len(self._delayed)

    @property
    def key_shared_policy(self) -> rules.KeySharedPolicy | None:
        return self._key_shared_policy

    def key_hash_ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Key_Shared: consumer uid -> its inclusive hash ranges (empty otherwise)."""
        return {} if self._router is None else self._router.selector.ranges()

    # --- dispatching ---------------------------------------------------------------------

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"dispatch-{self.topic.full_name}-{self.name}"
            )

    async def close(self) -> None:
        self.closed = True
        self._cancel_timers()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        ml = self.topic.ml
        while self.consumers and not self.closed:
            self._wake.clear()
            try:
                progressed = await self._round()
            except ManagedLedgerError as exc:
                log.warning("%s/%s: dispatch stopped: %s", self.topic.full_name, self.name, exc)
                return
            if progressed:
                await asyncio.sleep(0)  # let the connections run between rounds
                continue
            try:
                waiter = ml.register_waiter()
            except ManagedLedgerError:
                return
            if self._wake.is_set():  # woken during the round
                waiter.cancel()
                continue
            # Parked on the log's next append; a wake-up resolves the same future (no task
            # and no asyncio.wait per park: this runs once per journal sync when caught up).
            self._wake.parked = waiter
            try:
                await waiter
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
            except MagnetarError:
                pass  # the log failed or closed: the next round finds out
            finally:
                self._wake.parked = None

    async def _round(self) -> bool:
        if self._selector is not None:
            return await self._round_single_active()
        return await self._round_multi()

    def _prepare(self, item: _Item) -> bool:
        """Fill message count, ack set and key hash; False for an unparsable entry. The
        metadata is parsed only when needed: the count of an entry appended by this broker
        comes with it (it was parsed on publish)."""
        if self._router is not None or not item.messages:
            try:
                md = Entry(item.data).metadata
                item.messages = md.num_messages
                if self._router is not None:
                    item.key_hash = sticky_key_hash(
                        sticky_key(md.ordering_key, md.partition_key, md.partition_key_b64_encoded)
                    )
            except ProtocolError:
                return False
        ack_set = self.cursor.state.batch_ack_set(item.position)
        if ack_set is not None:
            item.ack_set = ack_set
            item.messages = _popcount(ack_set)
        return True

    async def _round_single_active(self) -> bool:
        selector = self._selector
        assert selector is not None
        if selector.dispatch_paused:
            return False
        active = selector.active
        if active is None:
            return False
        consumer = self.consumers.get(active.consumer_id)
        if consumer is None or consumer.permits <= 0:
            return False
        if not consumer.connection.writable:
            await consumer.connection.wait_writable()
            return True
        budget = min(consumer.permits, self._config.dispatch_entries_max)
        rate_permits = self._dispatch_rate_permits()
        if rate_permits is not None:
            if rate_permits == 0:
                return False  # a wake-up is scheduled for when the rate allows
            budget = min(budget, rate_permits)
        epoch = self._epoch
        runs = await self._read_single_active(budget, epoch)
        if not runs:
            return False
        current = selector.active
        if (
            epoch != self._epoch
            or consumer.closed
            or current is None
            or current.consumer_id != consumer.uid
        ):
            return True  # state changed during the read; the cursor was rewound meanwhile
        messages = size_bytes = sent = 0
        # Entries appended by this broker come with their message count; without partly
        # acknowledged batches a run of them goes out as it was read (no object per entry).
        plain = not self.cursor.state.partial_batches
        for run in runs:
            if plain and run.counts_known:
                m, b = consumer.send_run(run.positions, run.data, run.messages)  # type: ignore[arg-type]
                sent += len(run)
            else:
                m, b, n = self._send_prepared(consumer, run)
                sent += n
            messages += m
            size_bytes += b
        self._account_dispatch(messages, size_bytes, sent)
        return True

    def _send_prepared(self, consumer: Consumer, run: EntryRun) -> tuple[int, int, int]:
        """Send a run whose entries need preparing (message counts to parse, partly
        acknowledged batches): entries without an ack set still go in runs, in log order.
        Returns ``(messages, bytes, entries)`` sent (unparsable entries are skipped)."""
        messages = size_bytes = sent = 0
        positions: list[Position] = []
        data: list[bytes] = []
        counts: list[int] = []
        for pos, entry, count in zip(run.positions, run.data, run.messages, strict=True):
            item = _Item(pos, entry, count)
            if not self._prepare(item):
                continue
            sent += 1
            if item.ack_set is None:
                positions.append(pos)
                data.append(entry)
                counts.append(item.messages)
                continue
            m, b = consumer.send_run(positions, data, counts)
            messages += m + item.messages
            size_bytes += b + len(entry)
            positions, data, counts = [], [], []
            consumer.send(pos, entry, item.messages, 0, item.ack_set)
        m, b = consumer.send_run(positions, data, counts)
        return messages + m, size_bytes + b, sent

    async def _read_single_active(self, max_entries: int, epoch: int) -> list[EntryRun]:
        """The cursor's next entries; through the compacted view for ``read_compacted``
        (:mod:`magnetar.broker.compactor`)."""
        if not self.read_compacted:
            return await self.cursor.read_runs(
                max_entries, self._config.dispatcher_max_read_size_bytes
            )
        reader = self._compacted_reader
        if reader is None:
            reader = CompactedCursorReader(self.cursor, self.topic.ml.ledgers)
            self._compacted_reader = reader
        topic = self.topic
        entries = await reader.read_entries(
            lambda: topic.service.compactor.view(topic),
            max_entries,
            lambda: epoch == self._epoch,
        )
        if not entries:
            return []
        return [
            EntryRun(
                [e.position for e in entries],
                [e.data for e in entries],
                [e.messages for e in entries],
            )
        ]

    async def _read_replay(self, budget: int) -> list[_Item]:
        positions = sorted(self._replay)[:budget]
        if self._delayed is not None:
            for due in self._delayed.pop_due(budget):
                positions.append(Position(*due))
            positions.sort()
        ml = self.topic.ml
        state = self.cursor.state
        items: list[_Item] = []
        for pos in positions:
            self._replay.pop(pos, None)
            if state.is_acked(pos) or not ml.ledgers.exists(pos):
                continue
            data = await ml.read_range(pos[0], pos[1], pos[1], read_ahead=False)
            if data:
                item = _Item(pos, data[0])
                item.key_hash = -1  # delayed check done already
                items.append(item)
        return items

    def wake(self) -> None:
        """Re-run dispatch (e.g. after a policy change)."""
        self._wake.set()

    def _unacked_gate(self) -> bool:
        """Apply the max-unacked-messages policies (Shared/Key_Shared, as Java): True when
        the whole subscription is blocked; marks blocked consumers (hysteresis: blocked at
        the limit, released at half)."""
        policies = self.topic.policies
        limit = policies.max_unacked_messages_per_subscription
        if limit <= 0:
            self._sub_blocked_on_unacked = False
        else:
            total = sum(c.pending.messages for c in self.consumers.values())
            if self._sub_blocked_on_unacked:
                self._sub_blocked_on_unacked = total > limit // 2
            else:
                self._sub_blocked_on_unacked = total >= limit
        per_consumer = policies.max_unacked_messages_per_consumer
        ring = self._ring
        for c in self.consumers.values():
            blocked = c.check_unacked(per_consumer)
            if ring is not None:
                ring.set_blocked(c.uid, blocked)
        return self._sub_blocked_on_unacked

    async def _round_multi(self) -> bool:
        if self._unacked_gate():
            return False
        permitted = [
            c for c in self.consumers.values() if c.permits > 0 and not c.blocked_on_unacked
        ]
        if not permitted:
            return False
        if not all(c.connection.writable for c in permitted):
            for c in permitted:
                if not c.connection.writable:
                    await c.connection.wait_writable()
            return True
        budget = min(sum(c.permits for c in permitted), self._config.dispatch_entries_max)
        rate_permits = self._dispatch_rate_permits()
        if rate_permits is not None:
            if rate_permits == 0:
                return False  # a wake-up is scheduled for when the rate allows
            budget = min(budget, rate_permits)
        epoch = self._epoch
        sent = False
        if self._replay or (self._delayed is not None and self._delayed.has_due()):
            items = await self._read_replay(budget)
            if epoch != self._epoch:
                return True
            if items:
                sent = self._dispatch_items(items, replay=True)
                if sent:
                    return True
        runs = await self.cursor.read_runs(budget, self._config.dispatcher_max_read_size_bytes)
        if epoch != self._epoch:
            return True
        if not runs:
            self._schedule_delayed_wake()
            return sent
        if self._ring is not None and self._dispatch_runs_shared(runs):
            return True
        items = [
            _Item(p, d, m)
            for run in runs
            for p, d, m in zip(run.positions, run.data, run.messages, strict=True)
        ]
        self._dispatch_items(items, replay=False)
        return True

    def _dispatch_runs_shared(self, runs: list[EntryRun]) -> bool:
        """Shared, the common case: entries with known message counts, no partly
        acknowledged batch, no ``deliver_at_time``, no max-unacked limit. The ring picks a
        consumer per group of consecutive entries and each group goes out as one run.
        False (nothing done) when the round needs the per-entry path."""
        policies = self.topic.policies
        if (
            policies.max_unacked_messages_per_consumer > 0
            or policies.max_unacked_messages_per_subscription > 0
            or self.cursor.state.partial_batches
        ):
            return False
        if len(runs) == 1:
            positions, data, counts = runs[0].positions, runs[0].data, runs[0].messages
        else:
            positions, data, counts = [], [], []
            for run in runs:
                positions += run.positions
                data += run.data
                counts += run.messages
        if not all(counts):
            return False  # counts to parse (entries read from bookies)
        # deliver_at_time's tag: where these bytes appear nowhere in the entries none has
        # the field (where they do, maybe in a payload, the per-entry path parses the
        # metadata). One search over the joined bytes: a generator would be a call per entry.
        if self._delayed is not None and _DELIVER_AT_TIME_TAG in b"".join(data):
            return False
        assert self._ring is not None
        known: list[int] = counts  # type: ignore[assignment]  # all(counts): no None
        tracker = self._tracker
        sent_messages = sent_bytes = sent_entries = assigned = 0
        for uid, indexes in self._ring.assign(known):
            if not indexes:
                continue
            lo, hi = indexes[0], indexes[-1] + 1
            assigned = hi
            consumer = self.consumers.get(uid)
            if consumer is None:  # not expected: the ring holds the subscription's consumers
                for p in positions[lo:hi]:
                    self._replay[p] = 0
                continue
            group = positions[lo:hi]
            rcs = list(map(tracker.count, group)) if len(tracker) else None
            m, b = consumer.send_run(group, data[lo:hi], known[lo:hi], rcs)
            sent_messages += m
            sent_bytes += b
            sent_entries += hi - lo
        for p in positions[assigned:]:
            self._replay[p] = 0
        self._schedule_delayed_wake()
        self._account_dispatch(sent_messages, sent_bytes, sent_entries)
        return True

    def _dispatch_items(self, items: list[_Item], *, replay: bool) -> bool:
        ready: list[_Item] = []
        delayed = self._delayed
        now_cutoff = None
        for item in items:
            from_replay = item.key_hash == -1
            if not self._prepare(item):
                continue
            if delayed is not None and not from_replay and _DELIVER_AT_TIME_TAG in item.data:
                at = Entry(item.data).metadata.deliver_at_time
                if at is not None:
                    if now_cutoff is None:
                        now_cutoff = delayed.cutoff_ms()
                    if at > now_cutoff:
                        try:
                            if delayed.add(item.position, at):
                                continue
                        except DelayedDeliveryFull:
                            self._replay[item.position] = item.key_hash
                            continue
            ready.append(item)
        self._schedule_delayed_wake()
        if not ready:
            return False
        # the max-unacked limits hold per message: what would pass them waits for replay
        policies = self.topic.policies
        limit_c = policies.max_unacked_messages_per_consumer
        limit_s = policies.max_unacked_messages_per_subscription
        total = sum(c.pending.messages for c in self.consumers.values()) if limit_s > 0 else 0
        sent_messages = sent_bytes = sent_entries = 0
        if self._ring is not None:
            groups = self._ring.assign([i.messages for i in ready])
            assigned = set()
            for uid, indexes in groups:
                consumer = self.consumers.get(uid)
                for i in indexes:
                    item = ready[i]
                    assigned.add(i)
                    if (
                        consumer is None
                        or (limit_c > 0 and consumer.pending.messages >= limit_c)
                        or (limit_s > 0 and total >= limit_s)
                    ):
                        self._replay[item.position] = 0
                        continue
                    total += item.messages
                    sent_messages += item.messages
                    sent_bytes += len(item.data)
                    sent_entries += 1
                    consumer.send(
                        item.position,
                        item.data,
                        item.messages,
                        self._tracker.count(item.position),
                        item.ack_set,
                    )
            for i, item in enumerate(ready):
                if i not in assigned:
                    self._replay[item.position] = 0
            self._account_dispatch(sent_messages, sent_bytes, sent_entries)
            return bool(assigned)
        router = self._router
        assert router is not None
        permits = {
            c.uid: c.permits
            for c in self.consumers.values()
            if c.permits > 0 and not c.blocked_on_unacked
        }
        by_pos: dict[tuple[int, int], _Item] = {i.position: i for i in ready}
        routed = router.route(
            [(i.position, i.key_hash) for i in ready],
            permits,
            replay,
            set(self._replay.values()),
        )
        sent = False
        for uid, positions in routed.by_consumer.items():
            consumer = self.consumers.get(uid)
            for routed_pos in positions:
                item = by_pos[routed_pos]
                pos = item.position
                if (
                    consumer is None
                    or (limit_c > 0 and consumer.pending.messages >= limit_c)
                    or (limit_s > 0 and total >= limit_s)
                ):
                    self._replay[pos] = item.key_hash
                    continue
                total += item.messages
                sent_messages += item.messages
                sent_bytes += len(item.data)
                sent_entries += 1
                consumer.send(pos, item.data, item.messages, self._tracker.count(pos), item.ack_set)
                sent = True
        for deferred in routed.deferred:
            item = by_pos[deferred]
            self._replay[item.position] = item.key_hash
        self._account_dispatch(sent_messages, sent_bytes, sent_entries)
        return sent

    def _dispatch_rate_permits(self) -> int | None:
        """Entries the dispatch rates (the topic's and this subscription's) allow reading
        now (their message permits over the batch size seen): None for no limit; 0 when
        used up, with a wake-up scheduled for when reading may go on (Pulsar's dispatch
        throttling: the read waits, nothing is dropped)."""
        topic_limiter, own = self.topic.dispatch_limiter, self.dispatch_limiter
        rate = self.topic.policies.subscription_dispatch_rate
        if own.rate is not rate:
            own.configure(rate, self._clock.monotonic_s())
        if not topic_limiter.rate.limited and not own.rate.limited:
            return None
        now_s = self._clock.monotonic_s()
        if topic_limiter.rate.relative_to_publish_rate or own.rate.relative_to_publish_rate:
            published = self.topic.meters.msg_in
            for limiter in (topic_limiter, own):
                limiter.follow_publish_rate(published.rate(), published.throughput(), now_s)
        permits: int | None = None
        for limiter in (topic_limiter, own):
            available = limiter.permits(now_s)
            if available == 0:
                if self._rate_timer is None:
                    self._rate_timer = self._clock.call_later(
                        limiter.pause_s(now_s), self._on_rate_timer
                    )
                return 0
            if available is not None:
                entries = limiter.entries_for(available)
                permits = entries if permits is None else min(permits, entries)
        return permits

    def _on_rate_timer(self) -> None:
        self._rate_timer = None
        self._wake.set()

    def _account_dispatch(self, messages: int, size_bytes: int, entries: int) -> None:
        """Charge what was sent to the dispatch rates."""
        topic_limiter, own = self.topic.dispatch_limiter, self.dispatch_limiter
        if topic_limiter.rate.limited or own.rate.limited:
            now_s = self._clock.monotonic_s()
            topic_limiter.on_dispatch(messages, size_bytes, now_s, entries)
            own.on_dispatch(messages, size_bytes, now_s, entries)

    def _schedule_delayed_wake(self) -> None:
        delayed = self._delayed
        if delayed is None:
            return
        due = delayed.next_delivery_ms
        if due is None:
            return
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
        delay_s = max(0, due - self._clock.now_ms()) / 1000
        self._delayed_timer = self._clock.call_later(delay_s, self._wake.set)


def _key_shared_policy(meta: KeySharedMeta | None) -> rules.KeySharedPolicy:
    if meta is None:
        return rules.KeySharedPolicy()
    return rules.KeySharedPolicy(
        rules.KeySharedMode(int(meta.key_shared_mode)), meta.allow_out_of_order_delivery
    )
