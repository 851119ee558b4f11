"""The bookkeeping of one subscription, without I/O: who its consumers are, what each may
receive, what must be sent again, and who gets which entry.

Sans-IO: :class:`SubscriptionState` takes a subscription's inputs (a consumer joins or
leaves, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, a seek, entries the shell has read)
and returns *effects* for the shell to execute in order (the
:mod:`~magnetar.broker.failover` effects: :class:`ScheduleActivation`,
:class:`RewindCursor`, :class:`NotifyActiveConsumer`, :class:`StartDispatch`). It reads and
writes no socket and no storage, and arms no timer; the time it needs comes from the
injected clock (delayed delivery) or the caller's ``now_ms`` (failover).

Consumers enter as :class:`DispatchConsumer` (what the core reads of a consumer: permits,
unacknowledged entries, priority) and are also the core's output port: the core hands each
one its entries with :meth:`DispatchConsumer.send` / :meth:`DispatchConsumer.send_run`, which
write the MESSAGE frames and record the entries as pending. The acknowledgement state is
the cursor's :class:`~magnetar.managed_ledger.cursor.CursorState` (acks are applied to it
here); moving the read position is the shell's (:class:`RewindCursor`, reads, seeks).

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
from magnetar.broker.delayed_delivery import DelayedDeliveryFull, DelayedDeliveryTracker
from magnetar.broker.failover import (
    ActiveConsumerSelector,
    FailoverConsumer,
    FailoverEffect,
    RewindCursor,
    SingleActiveType,
)
from magnetar.broker.key_shared import HashRange, KeySharedRouter, sticky_key, sticky_key_hash
from magnetar.broker.redelivery_tracker import RedeliveryTracker, redelivery_tracker_for
from magnetar.broker.shared_dispatch import SharedConsumerRing
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.entry_run import EntryRun
from magnetar.managed_ledger.errors import InvalidCursorPosition
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position
from magnetar.protocol import Entry, KeySharedMeta, MessageId, ProtocolError, SubType

DELIVER_AT_TIME_TAG = b"\x98\x01"
"""The key of MessageMetadata's ``deliver_at_time`` (field 19, varint) as it appears on
the wire."""
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


class DispatchItem:
    """An entry on its way to a consumer."""

    __slots__ = ("ack_set", "data", "key_hash", "messages", "position")

    def __init__(self, position: Position, data: bytes, messages: int | None = None) -> None:
        self.position = position
        self.data = data
        self.messages = 0 if messages is None else messages
        """0 until known (from the log's cache, or by :meth:`SubscriptionState.prepare`)."""
        self.ack_set: list[int] | None = None
        self.key_hash = 0
        """Key_Shared's sticky key hash; -1 for an entry read for replay (its
        ``deliver_at_time`` was checked already)."""


class Dispatched:
    """What one dispatch step sent (the shell charges it to the dispatch rates)."""

    __slots__ = ("entries", "messages", "size_bytes")

    def __init__(self) -> None:
        self.messages = 0
        self.size_bytes = 0
        self.entries = 0

    def add(self, messages: int, size_bytes: int, entries: int) -> None:
        self.messages += messages
        self.size_bytes += size_bytes
        self.entries += entries


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


def _popcount(words: Sequence[int]) -> int:
    return sum(bin(w & 0xFFFFFFFFFFFFFFFF).count("1") for w in words)


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
        shared empty table (never added to) until the first: add through :meth:`_replay_at`."""
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
                    self._replay_at(pos, self.replay.get(pos, 0))
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
            self._replay_at(pos, self.replay.get(pos, 0))
        return [RunDispatcher()], len(positions)

    def _replay_at(self, pos: Position, key_hash: int) -> None:
        """Put ``pos`` in the replay set with ``key_hash``."""
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

    # --- dispatching ---------------------------------------------------------------------

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

    def prepare(self, item: DispatchItem) -> bool:
        """Fill message count, ack set and key hash; False for an unparsable entry. The
        metadata is parsed only when needed: the count of an entry appended by this broker
        comes with it (it was parsed on publish)."""
        if self.router is not None or not item.messages:
            try:
                md = Entry(item.data).metadata
                item.messages = md.num_messages
                if self.router is not None:
                    item.key_hash = sticky_key_hash(
                        sticky_key(md.ordering_key, md.partition_key, md.partition_key_b64_encoded)
                    )
            except ProtocolError:
                return False
        ack_set = self.cursor.batch_ack_set(item.position)
        if ack_set is not None:
            item.ack_set = ack_set
            item.messages = _popcount(ack_set)
        return True

    def send_single_active(self, consumer: C, runs: list[EntryRun], sent: Dispatched) -> None:
        """Exclusive/Failover: send ``runs`` (read in log order) to ``consumer``. Entries
        appended by this broker come with their message count; without partly acknowledged
        batches a run of them goes out as it was read (no object per entry)."""
        plain = not self.cursor.partial_batches
        for run in runs:
            if plain and run.counts_known:
                m, b = consumer.send_run(run.positions, run.data, run.messages)  # type: ignore[arg-type]
                sent.add(m, b, len(run))
            else:
                self._send_prepared(consumer, run, sent)

    def _send_prepared(self, consumer: C, run: EntryRun, sent: Dispatched) -> None:
        """Send a run whose entries need preparing (message counts to parse, partly
        acknowledged batches): entries without an ack set still go in runs, in log order
        (unparsable entries are skipped)."""
        positions: list[Position] = []
        data: list[bytes] = []
        counts: list[int] = []
        for pos, entry, count in zip(run.positions, run.data, run.messages, strict=True):
            item = DispatchItem(pos, entry, count)
            if not self.prepare(item):
                continue
            sent.entries += 1
            if item.ack_set is None:
                positions.append(pos)
                data.append(entry)
                counts.append(item.messages)
                continue
            m, b = consumer.send_run(positions, data, counts)
            sent.add(m + item.messages, b + len(entry), 0)
            positions, data, counts = [], [], []
            consumer.send(pos, entry, item.messages, 0, item.ack_set)
        m, b = consumer.send_run(positions, data, counts)
        sent.add(m, b, 0)

    def dispatch_runs_shared(
        self, runs: list[EntryRun], limits_set: bool, sent: Dispatched
    ) -> bool:
        """Shared, the common case: entries with known message counts, no partly
        acknowledged batch, no ``deliver_at_time``, no max-unacked limit (``limits_set``
        False). The ring picks a consumer per group of consecutive entries and each group
        goes out as one run; what no consumer takes waits for replay. False (nothing done)
        when the round needs the per-entry path (:meth:`dispatch_items`)."""
        if limits_set or self.cursor.partial_batches:
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
        if self.delayed is not None and DELIVER_AT_TIME_TAG in b"".join(data):
            return False
        assert self.ring is not None
        known: list[int] = counts  # type: ignore[assignment]  # all(counts): no None
        tracker = self.tracker
        assigned = 0
        for uid, indexes in self.ring.assign(known):
            if not indexes:
                continue
            lo, hi = indexes[0], indexes[-1] + 1
            assigned = hi
            consumer = self.consumers.get(uid)
            if consumer is None:  # not expected: the ring holds the subscription's consumers
                for p in positions[lo:hi]:
                    self._replay_at(p, 0)
                continue
            group = positions[lo:hi]
            rcs = list(map(tracker.count, group)) if len(tracker) else None
            m, b = consumer.send_run(group, data[lo:hi], known[lo:hi], rcs)
            sent.add(m, b, hi - lo)
        for p in positions[assigned:]:
            self._replay_at(p, 0)
        return True

    def _hold_delayed(self, items: list[DispatchItem]) -> list[DispatchItem]:
        """Prepare ``items`` and keep back those with a future ``deliver_at_time``."""
        ready: list[DispatchItem] = []
        delayed = self.delayed
        now_cutoff = None
        for item in items:
            from_replay = item.key_hash == -1
            if not self.prepare(item):
                continue
            if delayed is not None and not from_replay and DELIVER_AT_TIME_TAG in item.data:
                at = Entry(item.data).metadata.deliver_at_time
                if at is not None:
                    if now_cutoff is None:
                        now_cutoff = delayed.cutoff_ms()
                    if at > now_cutoff:
                        try:
                            if delayed.add(item.position, at):
                                continue
                        except DelayedDeliveryFull:
                            self._replay_at(item.position, item.key_hash)
                            continue
            ready.append(item)
        return ready

    def dispatch_items(
        self,
        items: list[DispatchItem],
        *,
        replay: bool,
        limit_per_consumer: int,
        limit_per_subscription: int,
        sent: Dispatched,
    ) -> bool:
        """Shared/Key_Shared, entry by entry: hold back delayed entries, let the ring or
        the router pick a consumer per entry, and send what the max-unacked limits (per
        message; 0 = none) allow; the rest waits for replay. ``replay`` says the items
        were read from the replay set. True when something was assigned (Shared) or sent
        (Key_Shared)."""
        ready = self._hold_delayed(items)
        if not ready:
            return False
        limit_c, limit_s = limit_per_consumer, limit_per_subscription
        total = sum(c.pending.messages for c in self.consumers.values()) if limit_s > 0 else 0
        if self.ring is not None:
            groups = self.ring.assign([i.messages for i in ready])
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
                        self._replay_at(item.position, 0)
                        continue
                    total += item.messages
                    sent.add(item.messages, len(item.data), 1)
                    consumer.send(
                        item.position,
                        item.data,
                        item.messages,
                        self.tracker.count(item.position),
                        item.ack_set,
                    )
            for i, item in enumerate(ready):
                if i not in assigned:
                    self._replay_at(item.position, 0)
            return bool(assigned)
        router = self.router
        assert router is not None
        permits = {
            c.uid: c.permits
            for c in self.consumers.values()
            if c.permits > 0 and not c.blocked_on_unacked
        }
        by_pos: dict[tuple[int, int], DispatchItem] = {i.position: i for i in ready}
        routed = router.route(
            [(i.position, i.key_hash) for i in ready],
            permits,
            replay,
            set(self.replay.values()),
        )
        any_sent = False
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
                    self._replay_at(pos, item.key_hash)
                    continue
                total += item.messages
                sent.add(item.messages, len(item.data), 1)
                consumer.send(pos, item.data, item.messages, self.tracker.count(pos), item.ack_set)
                any_sent = True
        for deferred in routed.deferred:
            item = by_pos[deferred]
            self._replay_at(item.position, item.key_hash)
        return any_sent
