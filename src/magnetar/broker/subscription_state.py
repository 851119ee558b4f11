"""The bookkeeping of one subscription, without I/O: who its consumers are, what each may
receive and what must be sent again (who gets which entry is decided by the dispatch steps
over it, :mod:`~magnetar.broker.subscription_dispatch`).

Sans-IO: :class:`SubscriptionState` takes a subscription's inputs (a consumer joins or
leaves, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, a seek; through the dispatch steps,
entries the shell has read) and returns *effects* for the shell to execute in order (the
:mod:`~magnetar.broker.failover` effects: :class:`ScheduleActivation`,
:class:`RewindCursor`, :class:`NotifyActiveConsumer`, :class:`StartDispatch`). It reads and
writes no socket and no storage, and arms no timer; the time it needs comes from the
injected clock (delayed delivery) or the caller's ``now_ms`` (failover).

Consumers enter as :class:`DispatchConsumer` (what the core reads of a consumer: permits,
unacknowledged entries, priority) and are also the core's output port: the dispatch steps
hand each one its entries with :meth:`DispatchConsumer.send` /
:meth:`DispatchConsumer.send_run`, which write the MESSAGE frames and record the entries as
pending. The acknowledgement state is the cursor's
:class:`~magnetar.managed_ledger.cursor.CursorState` (acks are applied to it here); moving
the read position is the shell's (:class:`RewindCursor`, reads, seeks).

The rules per subscription type (reference §6.5-§6.10):

* Exclusive / Failover: :class:`~magnetar.broker.failover.ActiveConsumerSelector` picks the
  active consumer; only it receives entries. A change of active consumer, or a redelivery
  asked by the active consumer, rewinds the cursor (every consumer's pending entries are
  forgotten, the epoch moves) so the active one gets every unacknowledged entry.
* Shared: :class:`~magnetar.broker.shared_dispatch.SharedConsumerRing` round-robin by
  permits and priority. Entries of a departed consumer and redelivered entries go to the
  replay set, read again before new entries; redelivery counts from
  :class:`~magnetar.broker.redelivery_tracker.RedeliveryTracker`.
* Key_Shared: :class:`~magnetar.broker.key_shared.KeySharedRouter` (AUTO_SPLIT or STICKY,
  ordering rule for consumers that join late).
* Shared and Key_Shared hold entries with a future ``deliver_at_time`` in a
  :class:`~magnetar.broker.delayed_delivery.DelayedDeliveryTracker`, and apply the
  max-unacked-messages limits per consumer and per subscription (blocked at the limit,
  released at half).

The **epoch** moves whenever what was read may no longer be sent (a rewind, a seek, the last
consumer leaving): the shell compares it before and after each read and drops a read that
straddled a change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

from magnetar.broker import subscription_rules as rules
from magnetar.broker.consumer import PendingEntries
from magnetar.broker.delayed_delivery import DelayedDeliveryTracker
from magnetar.broker.failover import (
    ActiveConsumerSelector,
    FailoverConsumer,
    FailoverEffect,
    RewindCursor,
    SingleActiveType,
)
from magnetar.broker.key_shared import HashRange, KeySharedRouter
from magnetar.broker.redelivery_tracker import RedeliveryTracker, redelivery_tracker_for
from magnetar.broker.shared_dispatch import SharedConsumerRing
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.errors import InvalidCursorPosition
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position
from magnetar.protocol import KeySharedMeta, MessageId, SubType

_tuple_new = tuple.__new__
_ledger_and_entry_ids = attrgetter("ledger_id", "entry_id")


@frozen_struct(kw_only=False)
class RunDispatcher:
    """Run the dispatcher: it may have something to send now."""


SubscriptionEffect = FailoverEffect | RunDispatcher
"""What the shell executes, in order: arm the failover timer, rewind the cursor's read
position, tell a consumer whether it is active, run the dispatcher."""


class DispatchConsumer(Protocol):
    """A consumer as the core sees it. ``uid`` keys it in the subscription; ``permits`` and
    ``pending`` change as it is sent entries (by its own :meth:`send` / :meth:`send_run`)
    and as it acknowledges them (here); ``blocked_on_unacked`` is kept here."""

    uid: int
    name: str
    priority_level: int
    permits: int
    pending: PendingEntries
    blocked_on_unacked: bool

    def send(
        self,
        position: Position,
        data: bytes,
        messages: int,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None:
        """Send one entry; it becomes pending and costs ``messages`` permits."""
        ...

    def send_run(
        self,
        positions: list[Position],
        data: list[bytes],
        counts: list[int],
        redelivery_counts: list[int] | None = None,
    ) -> tuple[int, int]:
        """Send a run of entries without ack sets; returns ``(messages, bytes)`` sent."""
        ...


C = TypeVar("C", bound=DispatchConsumer)


def key_shared_policy_of(meta: KeySharedMeta | None) -> rules.KeySharedPolicy:
    """The Key_Shared policy a SUBSCRIBE asks for (AUTO_SPLIT, in order, when unset)."""
    if meta is None:
        return rules.KeySharedPolicy()
    return rules.KeySharedPolicy(
        rules.KeySharedMode(int(meta.key_shared_mode)), meta.allow_out_of_order_delivery
    )


def unacked_limit_blocks(blocked: bool, unacked_messages: int, limit: int) -> bool:
    """Whether a max-unacked-messages ``limit`` (0 or less: none) blocks a consumer or a
    subscription holding ``unacked_messages``, ``blocked`` before: Java's hysteresis,
    blocked at the limit, released at half of it."""
    if limit <= 0:
        return False
    if blocked:
        return unacked_messages > limit // 2
    return unacked_messages >= limit


def batch_indexes_acked(words: Sequence[int], size: int) -> list[int]:
    """The indexes of a batch of ``size`` messages that an ack set (Pulsar's ``ackSet``: a
    SET bit means NOT yet acknowledged) acknowledges; every index when the words do not
    cover the batch."""
    if len(words) * 64 < size:
        return list(range(size))
    return [i for i in range(size) if not (words[i // 64] >> (i % 64)) & 1]


_NO_REPLAY: dict[Position, int] = {}
"""The replay set of every subscription with nothing to replay (never added to)."""


class SubscriptionState(Generic[C]):
    """One subscription's consumers and dispatch bookkeeping (see the module docstring).

    ``cursor`` is the subscription's cursor state over ``ledgers`` (the topic's log);
    ``clock`` times delayed delivery. Methods raise only where they say so.
    """

    __slots__ = (
        "_clock",
        "_delayed_delivery_tick_ms",
        "_failover_delay_ms",
        "blocked_on_unacked",
        "consumers",
        "cursor",
        "delayed",
        "epoch",
        "key_shared_policy",
        "ledgers",
        "partition_index",
        "replay",
        "ring",
        "router",
        "selector",
        "sub_type",
        "topic_name",
        "tracker",
    )

    def __init__(
        self,
        topic_name: str,
        partition_index: int,
        sub_type: SubType,
        cursor: CursorState,
        ledgers: LedgerList,
        clock: Clock,
        *,
        failover_delay_ms: int,
        delayed_delivery_tick_ms: int,
    ) -> None:
        self.topic_name = topic_name
        self.partition_index = partition_index
        self.sub_type = sub_type
        self.cursor = cursor
        self.ledgers = ledgers
        self._clock = clock
        self._failover_delay_ms = failover_delay_ms
        self._delayed_delivery_tick_ms = delayed_delivery_tick_ms
        self.consumers: dict[int, C] = {}
        """uid -> consumer, in arrival order."""
        self.selector: ActiveConsumerSelector | None = None
        self.ring: SharedConsumerRing | None = None
        self.router: KeySharedRouter | None = None
        self.key_shared_policy: rules.KeySharedPolicy | None = None
        self.tracker: RedeliveryTracker = redelivery_tracker_for(rules.SubType(int(sub_type)))
        self.delayed: DelayedDeliveryTracker | None = None
        self.replay: dict[Position, int] = _NO_REPLAY
        """Entries to send again (Shared/Key_Shared) -> key hash (Key_Shared only). The
        shared empty table (never added to) until the first: add through :meth:`add_replay`."""
        self.blocked_on_unacked = False
        """The whole subscription is over max_unacked_messages_per_subscription."""
        self.epoch = 0

    # --- consumers -----------------------------------------------------------------------

    def _configure(self, sub_type: SubType, key_shared: KeySharedMeta | None) -> None:
        """Set up the dispatch core for the first consumer's type."""
        self.sub_type = sub_type
        self.selector = None
        self.ring = None
        self.router = None
        self.key_shared_policy = None
        self.replay.clear()
        self.tracker = redelivery_tracker_for(rules.SubType(int(sub_type)))
        self.delayed = None
        if sub_type in (SubType.Exclusive, SubType.Failover):
            self.selector = ActiveConsumerSelector(
                self.topic_name,
                self.partition_index,
                SingleActiveType.EXCLUSIVE
                if sub_type is SubType.Exclusive
                else SingleActiveType.FAILOVER,
                failover_delay_ms=self._failover_delay_ms,
            )
            return
        self.delayed = DelayedDeliveryTracker(self._clock, tick_ms=self._delayed_delivery_tick_ms)
        if sub_type is SubType.Shared:
            self.ring = SharedConsumerRing()
            return
        policy = key_shared_policy_of(key_shared)
        self.key_shared_policy = policy
        self.router = KeySharedRouter(
            sticky=policy.mode is rules.KeySharedMode.STICKY,
            allow_out_of_order=policy.allow_out_of_order_delivery,
        )

    def add_consumer(
        self, consumer: C, sub_type: SubType, key_shared: KeySharedMeta | None, now_ms: int
    ) -> list[SubscriptionEffect]:
        """Admit ``consumer`` subscribing with ``sub_type``. Raises ConsumerBusy /
        ConsumerAssignError (and nothing changes) when the subscription refuses it."""
        current = self.sub_type if self.consumers else None
        new_policy = key_shared_policy_of(key_shared) if sub_type is SubType.Key_Shared else None
        rules.check_subscribe(
            None if current is None else rules.SubType(int(current)),
            len(self.consumers),
            rules.SubType(int(sub_type)),
            self.key_shared_policy,
            new_policy,
        )
        if not self.consumers:
            self._configure(sub_type, key_shared)
        if self.selector is not None:
            effects = self.selector.add(
                FailoverConsumer(consumer.uid, consumer.name, consumer.priority_level), now_ms
            )
            self.consumers[consumer.uid] = consumer
            return self._single_active(effects)
        if self.ring is not None:
            self.ring.add(consumer.uid, consumer.priority_level)
        else:
            assert self.router is not None
            ranges: tuple[HashRange, ...] = ()
            if key_shared is not None:
                ranges = tuple(HashRange(r.start, r.end) for r in key_shared.hash_ranges)
            state, ledgers = self.cursor, self.ledgers
            read_pos = ledgers.normalize(state.read_position)
            since = (
                ledgers.entries_between(state.mark_delete, ledgers.previous_position(read_pos))
                if read_pos > state.mark_delete
                else 0
            )
            self.router.add_consumer(consumer.uid, read_pos, since, ranges)
        self.consumers[consumer.uid] = consumer
        return []

    def remove_consumer(self, consumer: C, now_ms: int) -> list[SubscriptionEffect]:
        """Detach ``consumer`` (a member); its unacknowledged entries go to the remaining
        consumers (Shared/Key_Shared: the replay set; Exclusive/Failover: a rewind if it
        was active). The last one leaving forgets every redelivery and rewinds the cursor."""
        del self.consumers[consumer.uid]
        pending = consumer.pending
        consumer.pending = PendingEntries()
        effects: list[SubscriptionEffect] = []
        if self.selector is not None:
            # not known to the selector (ConsumerNotFound): nothing to hand over
            with contextlib.suppress(MagnetarError):
                effects = self._single_active(self.selector.remove(consumer.uid, now_ms))
        else:
            if self.ring is not None:
                self.ring.remove(consumer.uid)
            if self.router is not None:
                self.router.remove_consumer(consumer.uid)
            for pos in pending:
                if not self.cursor.is_acked(pos):
                    self.tracker.add_if_absent(pos)
                    self.add_replay(pos, self.replay.get(pos, 0))
        if not self.consumers:
            self.tracker.clear()
            self.replay.clear()
            self.epoch += 1
            effects.append(RewindCursor())
        return effects

    def on_failover_timer(self, now_ms: int) -> list[SubscriptionEffect]:
        """The failover activation timer fired (see :class:`ScheduleActivation`)."""
        if self.selector is None:
            return []
        return self._single_active(self.selector.on_timer(now_ms))

    def _single_active(self, effects: Sequence[FailoverEffect]) -> list[SubscriptionEffect]:
        """The selector's effects, with this core's part of each rewind done."""
        out: list[SubscriptionEffect] = []
        for effect in effects:
            if isinstance(effect, RewindCursor):
                out += self._rewind()
            else:
                out.append(effect)
        return out

    def _rewind(self) -> list[SubscriptionEffect]:
        """Every unacknowledged entry goes out again, from the first: no consumer holds any
        now, and what was read before is not sent."""
        for c in self.consumers.values():
            c.pending.clear()
        self.epoch += 1
        return [RewindCursor(), RunDispatcher()]

    @property
    def active_uid(self) -> int | None:
        """The consumer receiving entries of an Exclusive/Failover subscription."""
        active = self.selector.active if self.selector is not None else None
        return None if active is None else active.consumer_id

    def check_unsubscribe(self, consumer: C) -> None:
        """Raises unless ``consumer`` may unsubscribe (Pulsar's rules:
        :func:`~magnetar.broker.subscription_rules.check_unsubscribe`)."""
        rules.check_unsubscribe(
            rules.SubType(int(self.sub_type)),
            len(self.consumers),
            consumer.uid in self.consumers,
            self.selector is None or self.active_uid == consumer.uid,
        )

    # --- commands from consumers ---------------------------------------------------------

    def flow(self, consumer: C, permits: int) -> None:
        """FLOW: ``consumer`` may receive ``permits`` more messages."""
        consumer.permits += permits
        if self.ring is not None:
            self.ring.add_permits(consumer.uid, permits)

    def ack_cumulative(self, consumer: C, mid: MessageId) -> InvalidCursorPosition | None:
        """A cumulative ACK up to ``mid`` (Exclusive/Failover only; ignored otherwise).
        Returns the error of an ACK past the log's end (nothing is acknowledged then)."""
        if self.sub_type not in (SubType.Exclusive, SubType.Failover):
            return None
        cursor = self.cursor
        pos = Position(mid.ledger_id, mid.entry_id)
        try:
            if mid.ack_set:
                cursor.ack_cumulative(self.ledgers.previous_position(pos))
                self._ack_batch(consumer, pos, mid)
            else:
                cursor.ack_cumulative(pos)
        except InvalidCursorPosition as exc:
            return exc
        for c in self.consumers.values():
            c.pending.remove_up_to(cursor.mark_delete)
        return None

    def ack_individual(
        self, consumer: C, mids: Sequence[MessageId]
    ) -> tuple[int, InvalidCursorPosition | None]:
        """An individual ACK of ``mids``: whole entries are acknowledged in one pass (a
        client groups them: often hundreds per ACK) and dropped at once from the consumer's
        pending entries, the replay set and the redelivery counts; batch indexes one by
        one. Returns the messages acknowledged (one per batch-index ack) and the error of a
        position past the log's end (what came before it is applied)."""
        cursor = self.cursor
        batch_mids = [mid for mid in mids if mid.ack_set]
        whole = [mid for mid in mids if not mid.ack_set] if batch_mids else mids
        positions = list(map(_tuple_new, repeat(Position), map(_ledger_and_entry_ids, whole)))
        acked_messages = 0
        try:
            applied = False
            try:
                acked_messages = cursor.ack_positions(positions)[1]
                applied = True
            finally:  # also after an invalid position: drop what is acknowledged now
                if not applied:
                    positions = [p for p in positions if cursor.is_acked(p)]
                self._forget_acked(consumer, positions)
            for mid in batch_mids:
                acked_messages += 1
                self._ack_batch(consumer, Position(mid.ledger_id, mid.entry_id), mid)
        except InvalidCursorPosition as exc:
            return acked_messages, exc
        return acked_messages, None

    def wake_after_ack(self, consumer: C) -> bool:
        """Whether an ACK from ``consumer`` may let the dispatcher send more (a consumer or
        the subscription was held by the unacked limits; Key_Shared: consumers that joined
        late may now receive, or entries wait for replay)."""
        wake = consumer.blocked_on_unacked or self.blocked_on_unacked
        router = self.router
        # release() runs on every ACK: it moves the late joiners' limit forward
        if router is not None and (
            router.recently_joined.release(self.cursor.first_unacked()) or self.replay
        ):
            wake = True
        return wake

    def _forget_acked(self, consumer: C, positions: list[Position]) -> None:
        consumer.pending.remove_many(positions)
        replay = self.replay
        if replay:
            for p in positions:
                replay.pop(p, None)
        if len(self.tracker):
            self.tracker.remove_many(positions)

    def _ack_batch(self, consumer: C, pos: Position, mid: MessageId) -> None:
        size = mid.batch_size
        if size is None or size <= 0:
            size = consumer.pending.get(pos) or self.ledgers.messages_at(pos)
            if size <= 1:
                size = max(size, 64 * len(mid.ack_set))
        self.cursor.ack_batch_indexes(pos, size, batch_indexes_acked(mid.ack_set, size))
        if self.cursor.is_acked(pos):
            consumer.pending.pop(pos, None)
            self.replay.pop(pos, None)
            self.tracker.remove(pos)

    def redeliver(
        self, consumer: C, ids: Sequence[MessageId]
    ) -> tuple[list[SubscriptionEffect], int | None]:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES of ``ids`` (all of the consumer's pending
        entries when empty). Exclusive/Failover: the active consumer's request rewinds the
        cursor; anyone else's is ignored. Shared/Key_Shared: the entries go to the replay
        set with their redelivery counts raised. Returns the effects and how many entries
        were asked for (Shared/Key_Shared; None for Exclusive/Failover)."""
        if self.selector is not None:
            if not self.selector.dispatch_paused and self.active_uid == consumer.uid:
                return self._rewind(), None
            return [], None
        positions = (
            [Position(m.ledger_id, m.entry_id) for m in ids] if ids else list(consumer.pending)
        )
        for pos in positions:
            if consumer.pending.pop(pos, None) is None and ids:
                continue
            if self.cursor.is_acked(pos):
                continue
            self.tracker.increment(pos)
            self.add_replay(pos, self.replay.get(pos, 0))
        return [RunDispatcher()], len(positions)

    def add_replay(self, pos: Position, key_hash: int) -> None:
        """Put ``pos`` in the replay set with ``key_hash`` (what a dispatch step could not
        send goes there too)."""
        replay = self.replay
        if replay is _NO_REPLAY:
            replay = self.replay = {}
        replay[pos] = key_hash

    def on_reset(self) -> None:
        """A seek has moved the cursor: nothing read before is sent, nothing is replayed."""
        self.epoch += 1

    def after_reset(self) -> None:
        """The cursor is at its new position: forget replays, redeliveries, delays."""
        self.replay.clear()
        self.tracker.clear()
        if self.delayed is not None:
            self.delayed.clear()

    # --- dispatching (the steps that send: subscription_dispatch) ------------------------

    def single_active_target(self) -> C | None:
        """Exclusive/Failover: the consumer to send to now (active, with permits), if any."""
        selector = self.selector
        if selector is None or selector.dispatch_paused:
            return None
        active = selector.active
        if active is None:
            return None
        consumer = self.consumers.get(active.consumer_id)
        if consumer is None or consumer.permits <= 0:
            return None
        return consumer

    def still_active(self, consumer: C, epoch: int) -> bool:
        """After a read for ``consumer`` begun at ``epoch``: may its entries still go out?"""
        return epoch == self.epoch and self.active_uid == consumer.uid

    def unacked_gate(self, limit_per_subscription: int, limit_per_consumer: int) -> bool:
        """Apply the max-unacked-messages limits (Shared/Key_Shared, as Java; 0 = none):
        True when the whole subscription is blocked; marks blocked consumers."""
        total = (
            sum(c.pending.messages for c in self.consumers.values())
            if limit_per_subscription > 0
            else 0
        )
        self.blocked_on_unacked = unacked_limit_blocks(
            self.blocked_on_unacked, total, limit_per_subscription
        )
        ring = self.ring
        for c in self.consumers.values():
            blocked = c.blocked_on_unacked = unacked_limit_blocks(
                c.blocked_on_unacked, c.pending.messages, limit_per_consumer
            )
            if ring is not None:
                ring.set_blocked(c.uid, blocked)
        return self.blocked_on_unacked

    def permitted(self) -> list[C]:
        """Shared/Key_Shared: the consumers that may receive now."""
        return [c for c in self.consumers.values() if c.permits > 0 and not c.blocked_on_unacked]

    def has_replay(self) -> bool:
        """Entries wait to be sent again, or delayed ones are due."""
        return bool(self.replay) or (self.delayed is not None and self.delayed.has_due())

    def replay_candidates(self, budget: int) -> list[Position]:
        """Up to ``budget`` entries of the replay set plus the delayed ones now due (taken
        out of the delayed-delivery tracker), in log order. The shell reads each that
        :meth:`take_for_replay` still wants, when its turn comes."""
        positions = sorted(self.replay)[:budget]
        if self.delayed is not None:
            for due in self.delayed.pop_due(budget):
                positions.append(Position(*due))
            positions.sort()
        return positions

    def take_for_replay(self, position: Position) -> bool:
        """Take ``position`` out of the replay set; True if it is still to be sent (not
        acknowledged, not trimmed from the log meanwhile)."""
        self.replay.pop(position, None)
        return not self.cursor.is_acked(position) and self.ledgers.exists(position)

    def next_delayed_delivery_ms(self) -> int | None:
        """When the earliest held-back entry is due (the shell wakes the dispatcher then)."""
        return None if self.delayed is None else self.delayed.next_delivery_ms
