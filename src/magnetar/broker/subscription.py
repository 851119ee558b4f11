"""A subscription: one cursor, its consumers, and the dispatcher that feeds them; the
asyncio shell around :class:`~magnetar.broker.subscription_state.SubscriptionState`.

The state core holds the bookkeeping and makes every decision (who may subscribe, who is
active, what is replayed, the unacked limits; who gets which entry through its dispatch
steps, :mod:`~magnetar.broker.subscription_dispatch`); this shell reads
storage, writes to connections, arms timers and runs the dispatcher task, executing the
core's effects in order.

The dispatcher is one task per subscription. Each round it reads up to
``dispatch_entries_max`` entries (entries to replay first, for Shared/Key_Shared), asks the
core who gets which entry, and the consumers write MESSAGE frames. It never sends more than
a consumer's permits allow (reference §6.6): an entry is sent only while the consumer has
permits > 0, and costs its message count. It reads no more than the dispatch rates allow
(the topic's and the subscription's, :class:`~magnetar.broker.rate_limit.DispatchRateLimiter`)
and waits while they are used up. When there is nothing to do it parks until a FLOW, an ack,
a redelivery, a consumer change or a new entry wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from magnetar.broker import subscription_rules as rules
from magnetar.broker.consumer import Consumer
from magnetar.broker.failover import (
    NotifyActiveConsumer,
    RewindCursor,
    ScheduleActivation,
    StartDispatch,
)
from magnetar.broker.key_shared import KeySharedRouter
from magnetar.broker.marker_filter import drop_markers
from magnetar.broker.rate_limit import DispatchRateLimiter
from magnetar.broker.subscription_dispatch import (
    Dispatched,
    DispatchItem,
    dispatch_items,
    dispatch_runs_shared,
    send_single_active,
)
from magnetar.broker.subscription_state import (
    RunDispatcher,
    SubscriptionEffect,
    SubscriptionState,
)
from magnetar.common.clock import Timer
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
    Seek,
    SubType,
    Success,
)

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic

log = logging.getLogger(__name__)

_ACTIVE_CONSUMER_CHANGE_MIN_PROTOCOL = 12


def _publish_time_of(data: bytes) -> int:
    return Entry(data).metadata.publish_time


class _Wake:
    """The dispatcher's wake-up flag. :meth:`set` also resumes the dispatcher when it is
    parked (:attr:`parked`: its task ended, waiting for an append or a wake-up), on a
    later loop turn."""

    __slots__ = ("_resume", "flag", "parked")

    def __init__(self, resume: Callable[[], None]) -> None:
        self.flag = False
        self.parked = False
        self._resume = resume

    def set(self) -> None:
        self.flag = True
        if self.parked:
            self.parked = False
            asyncio.get_running_loop().call_soon(self._resume)

    def clear(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag


class Subscription:
    """One subscription of ``topic``. Created by the topic; consumers come and go."""

    # Slots: one per topic on a broker holding thousands of idle topics.
    __slots__ = (
        "_activation_timer",
        "_append_registered",
        "_clock",
        "_compacted_reader",
        "_config",
        "_delayed_timer",
        "_orphan_timer",
        "_rate_timer",
        "_reset_done",
        "_task",
        "_wake",
        "closed",
        "consumers",
        "cursor",
        "dispatch_limiter",
        "durable",
        "keep_when_empty",
        "msg_out_counter",
        "name",
        "read_compacted",
        "state",
        "topic",
        "waiting_for_reset",
    )

    def __init__(
        self, topic: Topic, name: str, cursor: ManagedCursor, durable: bool, sub_type: SubType
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self._config = config = topic.service.config
        self._clock = topic.service.clock
        self.state: SubscriptionState[Consumer] = SubscriptionState(
            topic.full_name,
            topic.partition_index,
            sub_type,
            cursor.state,
            topic.ml.ledgers,
            self._clock,
            failover_delay_ms=config.failover_delay_ms,
            delayed_delivery_tick_ms=config.delayed_delivery_tick_ms,
        )
        self.consumers: dict[int, Consumer] = self.state.consumers
        """uid -> consumer (the state core's own table)."""
        self._wake = _Wake(self._woken)
        self._append_registered = False
        """Whether the log calls :meth:`_appended` at its next append (one call at most)."""
        self._task: asyncio.Task[None] | None = None
        self._activation_timer: Timer | None = None
        """Fires the selector's pending failover activation (Failover)."""
        self._orphan_timer: Timer | None = None
        self._delayed_timer: Timer | None = None
        self._rate_timer: Timer | None = None
        """Wakes the dispatcher when a used-up dispatch rate allows reading again."""
        self.dispatch_limiter = DispatchRateLimiter()
        """This subscription's own dispatch rate (policy ``subscriptionDispatchRate``)."""
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

    @property
    def sub_type(self) -> SubType:
        """The type of the subscription's consumers (the first one's)."""
        return self.state.sub_type

    # --- consumers -----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, key_shared: KeySharedMeta | None) -> None:
        """Admit ``consumer``; raises ConsumerBusy / ConsumerAssignError (nothing changed)."""
        effects = self.state.add_consumer(
            consumer, consumer.sub_type, key_shared, self._selector_now_ms()
        )
        self._apply(effects)
        self._ensure_task()
        self._wake.set()

    async def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer`` (close, disconnect, seek); its unacknowledged entries go to
        the remaining consumers. Idempotent."""
        if self.consumers.get(consumer.uid) is not consumer:
            return
        consumer.closed = True
        self._apply(self.state.remove_consumer(consumer, self._selector_now_ms()))
        if not self.consumers:
            self._cancel_timers()
            if not self.durable and not self.keep_when_empty:
                await self.topic.drop_subscription(self)
                return
        self._wake.set()

    def _selector_now_ms(self) -> int:
        """The failover selector's time: the injected clock's monotonic reading, the one its
        ``call_later`` measures, so a timer armed for a due time finds it reached."""
        return int(self._clock.monotonic_s() * 1000)

    def _apply(self, effects: Sequence[SubscriptionEffect]) -> None:
        """Execute the state core's effects, in order."""
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
                    self.cursor.rewind()
                case NotifyActiveConsumer(consumer_id=uid, is_active=active):
                    c = self.consumers.get(uid)
                    if (
                        c is not None
                        and c.connection.protocol_version >= _ACTIVE_CONSUMER_CHANGE_MIN_PROTOCOL
                    ):
                        c.connection.send_command(
                            ActiveConsumerChange(consumer_id=c.consumer_id, is_active=active)
                        )
                case StartDispatch() | RunDispatcher():
                    self._wake.set()

    def _on_failover_timer(self) -> None:
        self._activation_timer = None
        if not self.closed:
            self._apply(self.state.on_failover_timer(self._selector_now_ms()))

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
        self.state.flow(consumer, permits)
        consumer.meters.flow.touch()
        self._wake.set()

    def handle_ack(self, consumer: Consumer, ack: Ack) -> None:
        """Apply an ACK (:meth:`SubscriptionState.ack_individual`,
        :meth:`SubscriptionState.ack_cumulative`), count it, and answer it when asked."""
        cursor = self.cursor
        state = cursor.state
        mark_delete_before = state.mark_delete
        consumer.meters.ack.touch()
        # messageAckRate counts messages (batch-aware), not message ids
        cumulative = ack.ack_type is AckType.Cumulative
        error: InvalidCursorPosition | None = None
        if cumulative:
            backlog_before = cursor.backlog_messages
            if ack.message_id:
                error = self.state.ack_cumulative(consumer, ack.message_id[0])
            consumer.meters.ack.record(max(backlog_before - cursor.backlog_messages, 0))
        else:
            acked_messages, error = self.state.ack_individual(consumer, ack.message_id)
            consumer.meters.ack.record(acked_messages)
        if error is not None:
            log.info("%s/%s: ignoring ack: %s", self.topic.full_name, self.name, error)
        if state.mark_delete != mark_delete_before:
            consumer.subscription_meters.last_mark_delete_advanced_ms = (
                consumer.meters.ack.last_record_ms
            )
        if ack.request_id is not None:
            consumer.connection.send_command(
                AckResponse(consumer_id=consumer.consumer_id, request_id=ack.request_id)
            )
        if self.state.wake_after_ack(consumer):
            self._wake.set()

    def handle_redeliver(self, consumer: Consumer, ids: Sequence[MessageId]) -> None:
        if consumer.closed:
            return
        effects, entries = self.state.redeliver(consumer, ids)
        if entries is not None:
            consumer.meters.redeliver.record(entries)
        self._apply(effects)

    async def unsubscribe(self, consumer: Consumer, request_id: int) -> Success:
        self.state.check_unsubscribe(consumer)
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
        self.state.on_reset()
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
        self.state.after_reset()

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
        uid = self.state.active_uid
        return None if uid is None else self.consumers.get(uid)

    @property
    def delayed_messages(self) -> int:
        """Entries held back by ``deliver_at_time`` (Shared/Key_Shared)."""
        delayed = self.state.delayed
        return 0 if delayed is None else len(delayed)

    @property
    def key_shared_policy(self) -> rules.KeySharedPolicy | None:
        return self.state.key_shared_policy

    def key_hash_ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Key_Shared: consumer uid -> its inclusive hash ranges (empty otherwise)."""
        router: KeySharedRouter | None = self.state.router
        return {} if router is None else router.selector.ranges()

    # --- dispatching ---------------------------------------------------------------------

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"dispatch-{self.topic.full_name}-{self.name}"
            )

    async def close(self) -> None:
        self.closed = True
        self._cancel_timers()
        self._wake.parked = False
        if self._append_registered:
            self._append_registered = False
            self.topic.ml.cancel_on_append(self._appended)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while self.consumers and not self.closed:
            self._wake.clear()
            try:
                progressed = await self._round()
            except ManagedLedgerError as exc:
                log.warning("%s/%s: dispatch stopped: %s", self.topic.full_name, self.name, exc)
                return
            if progressed and not self._caught_up():
                await asyncio.sleep(0)  # let the connections run between rounds
                continue
            try:
                parked = self._park()
            except ManagedLedgerError:
                return
            if not parked:  # woken during the round
                continue
            # The task ends here and the next append or wake-up resumes dispatch
            # (:meth:`_resume`), so an idle subscription holds no task or coroutine frame.
            self._task = None  # this task (the only one: see _ensure_task), about to end
            return

    def _caught_up(self) -> bool:
        """Whether another round now would find nothing to send: an Exclusive/Failover
        subscription (its rounds only read the cursor) whose cursor is at the end of the
        log. Then the dispatcher parks at once instead of a loop turn and an empty round
        (with many topics each round carries an entry or two: the empty one cost as much)."""
        if self.state.selector is None or self.read_compacted:
            return False
        # past the last entry: no entry at or after it (else a round finds out)
        return self.cursor.state.read_position > self.topic.ml.ledgers.last_confirmed

    def _park(self) -> bool:
        """Park the dispatcher until the next append or wake-up: True when parked, False
        when it was woken meanwhile (dispatch on). Raises :class:`ManagedLedgerError` when
        the log is no longer usable (dispatch stops)."""
        if not self._append_registered:
            self.topic.ml.call_on_append(self._appended)
            self._append_registered = True
        if self._wake.is_set():
            return False
        self._wake.parked = True
        return True

    def _appended(self, appended: bool) -> None:
        """The log's call after an append (``appended``) or once it failed or closed."""
        self._append_registered = False
        wake = self._wake
        if wake.parked:
            wake.parked = False
            self._resume(appended)

    def _woken(self) -> None:
        self._resume(True)

    def _resume(self, now: bool) -> None:
        """Dispatch again after parking: when ``now`` (an append, a wake-up), mostly one
        round on this loop turn parks again without a task (:meth:`_round_now`); else (the
        log failed or closed) the task's round reports the log's state."""
        if self.consumers and not self.closed:
            if now and (self._task is None or self._task.done()) and self._round_now():
                return
            self._ensure_task()

    def _round_now(self) -> bool:
        """One round of :meth:`_run` without a task, when it needs no wait: an Exclusive or
        Failover subscription (markers, compaction and dispatch rates aside) whose consumer
        can be written to, every entry read in the cache. True when it ran and parked the
        dispatcher again (or the log is no longer usable, where the task would end too);
        False when the task is to go on from here (sent what it could, if anything)."""
        state = self.state
        topic = self.topic
        if state.selector is None or self.read_compacted or topic.may_hold_markers:
            return False
        consumer = state.single_active_target()
        if consumer is None or not consumer.connection.writable:
            return False
        if self._dispatch_rate_permits() is not None:
            return False
        self._wake.clear()
        config = self._config
        runs = self.cursor.read_runs_cached(
            min(consumer.permits, config.dispatch_entries_max),
            config.dispatcher_max_read_size_bytes,
        )
        if runs is None:
            return False
        if runs:
            sent = Dispatched()
            send_single_active(state, consumer, runs, sent)
            self._account_dispatch(sent)
            if not self._caught_up():
                return False
        try:
            return self._park()
        except ManagedLedgerError:
            return True

    async def _round(self) -> bool:
        if self.state.selector is not None:
            return await self._round_single_active()
        return await self._round_multi()

    async def _round_single_active(self) -> bool:
        state = self.state
        consumer = state.single_active_target()
        if consumer is None:
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
        epoch = state.epoch
        runs = await self._read_single_active(budget, epoch)
        if not runs:
            return False
        if self.topic.may_hold_markers:
            runs = self._without_markers(runs)
            if not runs:
                return True
        if consumer.closed or not state.still_active(consumer, epoch):
            return True  # state changed during the read; the cursor was rewound meanwhile
        sent = Dispatched()
        send_single_active(state, consumer, runs, sent)
        self._account_dispatch(sent)
        return True

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
            lambda: epoch == self.state.epoch,
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

    async def _read_replay(self, budget: int) -> list[DispatchItem]:
        ml = self.topic.ml
        state = self.state
        items: list[DispatchItem] = []
        for pos in state.replay_candidates(budget):
            if not state.take_for_replay(pos):  # acknowledged or trimmed meanwhile
                continue
            data = await ml.read_range(pos[0], pos[1], pos[1], read_ahead=False)
            if data:
                item = DispatchItem(pos, data[0])
                item.key_hash = -1  # delayed check done already
                items.append(item)
        return items

    def _without_markers(self, runs: list[EntryRun]) -> list[EntryRun]:
        """``runs`` without marker entries, which are acknowledged instead: never
        delivered, never left as backlog (:mod:`magnetar.broker.marker_filter`)."""
        kept, markers = drop_markers(runs)
        if markers:
            self.cursor.ack_many(markers)
        return kept

    def wake(self) -> None:
        """Re-run dispatch (e.g. after a policy change)."""
        self._wake.set()

    async def _round_multi(self) -> bool:
        state = self.state
        policies = self.topic.policies
        limit_c = policies.max_unacked_messages_per_consumer
        limit_s = policies.max_unacked_messages_per_subscription
        if state.unacked_gate(limit_s, limit_c):
            return False
        permitted = state.permitted()
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
        epoch = state.epoch
        sent = False
        if state.has_replay():
            items = await self._read_replay(budget)
            if epoch != state.epoch:
                return True
            if items:
                sent = self._dispatch_items(items, replay=True)
                if sent:
                    return True
        runs = await self.cursor.read_runs(budget, self._config.dispatcher_max_read_size_bytes)
        if epoch != state.epoch:
            return True
        if runs and self.topic.may_hold_markers:
            runs = self._without_markers(runs)
            if not runs:
                return True
        if not runs:
            self._schedule_delayed_wake()
            return sent
        if state.ring is not None:
            done = Dispatched()
            if dispatch_runs_shared(state, runs, limit_c > 0 or limit_s > 0, done):
                self._schedule_delayed_wake()
                self._account_dispatch(done)
                return True
        items = [
            DispatchItem(p, d, m)
            for run in runs
            for p, d, m in zip(run.positions, run.data, run.messages, strict=True)
        ]
        self._dispatch_items(items, replay=False)
        return True

    def _dispatch_items(self, items: list[DispatchItem], *, replay: bool) -> bool:
        policies = self.topic.policies
        done = Dispatched()
        sent = dispatch_items(
            self.state,
            items,
            replay=replay,
            limit_per_consumer=policies.max_unacked_messages_per_consumer,
            limit_per_subscription=policies.max_unacked_messages_per_subscription,
            sent=done,
        )
        self._schedule_delayed_wake()
        self._account_dispatch(done)
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

    def _account_dispatch(self, sent: Dispatched) -> None:
        """Charge what was sent to the dispatch rates."""
        topic_limiter, own = self.topic.dispatch_limiter, self.dispatch_limiter
        if topic_limiter.rate.limited or own.rate.limited:
            now_s = self._clock.monotonic_s()
            topic_limiter.on_dispatch(sent.messages, sent.size_bytes, now_s, sent.entries)
            own.on_dispatch(sent.messages, sent.size_bytes, now_s, sent.entries)

    def _schedule_delayed_wake(self) -> None:
        due = self.state.next_delayed_delivery_ms()
        if due is None:
            return
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
        delay_s = max(0, due - self._clock.now_ms()) / 1000
        self._delayed_timer = self._clock.call_later(delay_s, self._wake.set)
