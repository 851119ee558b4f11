"""The subscription's state core without a broker, a socket or storage: consumers as plain
records that keep what they were sent, a cursor state over an in-memory ledger list, a
manual clock. Each test follows one rule of the core's docstring (reference §6.5-§6.10)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from magnetar.broker.consumer import PendingEntries
from magnetar.broker.failover import (
    NotifyActiveConsumer,
    RewindCursor,
    ScheduleActivation,
    StartDispatch,
)
from magnetar.broker.subscription_dispatch import (
    Dispatched,
    DispatchItem,
    dispatch_items,
    dispatch_runs_shared,
    prepare,
    send_single_active,
)
from magnetar.broker.subscription_state import (
    RunDispatcher,
    SubscriptionEffect,
    SubscriptionState,
    batch_indexes_acked,
)
from magnetar.common.clock import ManualClock
from magnetar.common.errors import ConsumerBusy
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.entry_run import EntryRun
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.position import Position
from magnetar.protocol import KeySharedMeta, MessageId, MessageMetadata, SubType
from magnetar.protocol.entry import build_entry

LEDGER = 7


@dataclass
class Sent:
    position: Position
    messages: int
    redelivery_count: int
    ack_set: list[int] | None


@dataclass(eq=False)
class Member:
    """A consumer as the core sees it; what it is sent is kept in ``sent``."""

    uid: int
    name: str = ""
    priority_level: int = 0
    permits: int = 0
    pending: PendingEntries = field(default_factory=PendingEntries)
    blocked_on_unacked: bool = False
    sent: list[Sent] = field(default_factory=list)

    def send(
        self,
        position: Position,
        data: bytes,
        messages: int,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None:
        self.pending[position] = messages
        self.permits -= messages
        self.sent.append(Sent(position, messages, redelivery_count, ack_set))

    def send_run(
        self,
        positions: list[Position],
        data: list[bytes],
        counts: list[int],
        redelivery_counts: list[int] | None = None,
    ) -> tuple[int, int]:
        rcs = redelivery_counts or [0] * len(positions)
        for pos, entry, count, rc in zip(positions, data, counts, rcs, strict=True):
            self.send(pos, entry, count, rc, None)
        return sum(counts), sum(map(len, data))

    @property
    def positions(self) -> list[Position]:
        return [s.position for s in self.sent]


def entry(key: str | None = None, *, batch: int | None = None, at_ms: int | None = None) -> bytes:
    md = MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        partition_key=key,
        num_messages_in_batch=batch,
        deliver_at_time=at_ms,
    )
    return b"".join(build_entry(md, b"x"))


class Log:
    """A topic's log of ``len(entries)`` entries in one ledger, and a subscription on it."""

    def __init__(self, entries: list[bytes], sub_type: SubType) -> None:
        self.entries = entries
        self.ledgers = LedgerList([LedgerSegment(LEDGER)])
        for i, data in enumerate(entries):
            self.ledgers.record_append(LEDGER, i, len(data), 1)
        self.cursor = CursorState("sub", self.ledgers, Position(LEDGER, -1))
        self.clock = ManualClock()
        self.state: SubscriptionState[Member] = SubscriptionState(
            "persistent://t/n/topic",
            -1,
            sub_type,
            self.cursor,
            self.ledgers,
            self.clock,
            failover_delay_ms=0,
            delayed_delivery_tick_ms=0,
        )

    def now_ms(self) -> int:
        return int(self.clock.monotonic_s() * 1000)

    def join(
        self, member: Member, sub_type: SubType, key_shared: KeySharedMeta | None = None
    ) -> list[SubscriptionEffect]:
        return self.state.add_consumer(member, sub_type, key_shared, self.now_ms())

    def run(self, first: int, last: int) -> list[EntryRun]:
        """Entries ``first..last`` as the cursor would read them (counts known)."""
        ids = range(first, last + 1)
        return [
            EntryRun(
                [Position(LEDGER, i) for i in ids], [self.entries[i] for i in ids], [1] * len(ids)
            )
        ]

    def take_replay(self, budget: int) -> list[Position]:
        """What the shell reads for replay: the candidates still to be sent, in order."""
        return [p for p in self.state.replay_candidates(budget) if self.state.take_for_replay(p)]

    def items(self, *ids: int, replay: bool = False) -> list[DispatchItem]:
        out = []
        for i in ids:
            item = DispatchItem(Position(LEDGER, i), self.entries[i])
            if replay:
                item.key_hash = -1
            out.append(item)
        return out

    def dispatch(
        self, items: list[DispatchItem], *, replay: bool = False, limit_c: int = 0, limit_s: int = 0
    ) -> bool:
        return dispatch_items(
            self.state,
            items,
            replay=replay,
            limit_per_consumer=limit_c,
            limit_per_subscription=limit_s,
            sent=Dispatched(),
        )


def mid(i: int, ack_set: list[int] | None = None, batch_size: int | None = None) -> MessageId:
    return MessageId(LEDGER, i, ack_set=tuple(ack_set or ()), batch_size=batch_size)


def test_shared_sends_each_entry_once_within_permits() -> None:
    log = Log([entry() for _ in range(6)], SubType.Shared)
    a, b = Member(1), Member(2)
    log.join(a, SubType.Shared)
    log.join(b, SubType.Shared)
    log.state.flow(a, 2)
    log.state.flow(b, 2)
    sent = Dispatched()
    assert dispatch_runs_shared(log.state, log.run(0, 5), False, sent)
    assert sorted(a.positions + b.positions) == [Position(LEDGER, i) for i in range(4)]
    assert a.permits == b.permits == 0
    assert (sent.entries, sent.messages) == (4, 4)
    # no permits left: the rest waits for replay, in log order
    assert log.take_replay(10) == [Position(LEDGER, 4), Position(LEDGER, 5)]


def test_shared_unacked_entries_of_a_leaver_are_replayed_to_the_others() -> None:
    log = Log([entry() for _ in range(4)], SubType.Shared)
    a, b = Member(1), Member(2)
    log.join(a, SubType.Shared)
    log.join(b, SubType.Shared)
    log.state.flow(a, 4)
    dispatch_runs_shared(log.state, log.run(0, 3), False, Dispatched())
    assert a.positions == [Position(LEDGER, i) for i in range(4)]
    log.state.ack_individual(a, [mid(1)])
    assert log.state.remove_consumer(a, log.now_ms()) == []
    assert a.pending == {}
    assert log.state.has_replay()
    replay = log.take_replay(10)
    assert replay == [Position(LEDGER, 0), Position(LEDGER, 2), Position(LEDGER, 3)]
    log.state.flow(b, 10)
    assert log.dispatch(log.items(0, 2, 3, replay=True), replay=True)
    assert b.positions == replay
    assert [s.redelivery_count for s in b.sent] == [0, 0, 0]  # a disconnect is no redelivery


def test_shared_redelivery_counts_and_replay() -> None:
    log = Log([entry() for _ in range(3)], SubType.Shared)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 3)
    dispatch_runs_shared(log.state, log.run(0, 2), False, Dispatched())
    effects, entries = log.state.redeliver(a, [mid(1)])
    assert effects == [RunDispatcher()] and entries == 1
    assert Position(LEDGER, 1) not in a.pending
    assert log.take_replay(10) == [Position(LEDGER, 1)]
    log.state.flow(a, 1)
    log.dispatch(log.items(1, replay=True), replay=True)
    assert a.sent[-1] == Sent(Position(LEDGER, 1), 1, 1, None)
    # an acknowledged entry is dropped from pending, replay and the redelivery counts
    log.state.redeliver(a, [mid(1)])
    log.state.ack_individual(a, [mid(1)])
    assert not log.state.replay and len(log.state.tracker) == 0
    assert not log.state.take_for_replay(Position(LEDGER, 1))


def test_individual_ack_past_the_end_applies_what_came_before() -> None:
    log = Log([entry() for _ in range(3)], SubType.Shared)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 3)
    dispatch_runs_shared(log.state, log.run(0, 2), False, Dispatched())
    acked, error = log.state.ack_individual(a, [mid(0), mid(9)])
    assert error is not None
    assert log.cursor.is_acked(Position(LEDGER, 0))
    assert list(a.pending) == [Position(LEDGER, 1), Position(LEDGER, 2)]
    acked, error = log.state.ack_individual(a, [mid(1), mid(2)])
    assert (acked, error) == (2, None)
    assert a.pending == {} and log.cursor.backlog_entries == 0


def test_batch_index_acks_remove_the_entry_once_every_message_is_acked() -> None:
    log = Log([entry(batch=3)], SubType.Shared)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 10)
    log.dispatch(log.items(0))
    assert a.sent == [Sent(Position(LEDGER, 0), 3, 0, None)]
    # ackSet: a SET bit is a message not yet acknowledged; message 1 acknowledged
    assert batch_indexes_acked([0b101], 3) == [1]
    log.state.ack_individual(a, [mid(0, [0b101], 3)])
    assert Position(LEDGER, 0) in a.pending
    assert log.cursor.batch_ack_set(Position(LEDGER, 0)) == [0b101]
    # sent again (a redelivery), it carries the ack set and counts only what is left
    item = log.items(0)[0]
    assert prepare(log.state, item) and (item.messages, item.ack_set) == (2, [0b101])
    log.state.ack_individual(a, [mid(0, [0b010], 3)])
    assert a.pending == {} and log.cursor.is_acked(Position(LEDGER, 0))


def test_exclusive_refuses_a_second_consumer_and_acks_cumulatively() -> None:
    log = Log([entry() for _ in range(4)], SubType.Exclusive)
    a = Member(1, name="a")
    effects = log.join(a, SubType.Exclusive)
    assert RewindCursor() in effects
    with pytest.raises(ConsumerBusy):
        log.join(Member(2, name="b"), SubType.Exclusive)
    assert list(log.state.consumers) == [1]
    a.permits = 4
    assert log.state.single_active_target() is a
    epoch = log.state.epoch
    send_single_active(log.state, a, log.run(0, 3), Dispatched())
    assert log.state.still_active(a, epoch)
    assert log.state.ack_cumulative(a, mid(2)) is None
    assert list(a.pending) == [Position(LEDGER, 3)]
    assert log.cursor.mark_delete == Position(LEDGER, 2)
    assert log.state.ack_cumulative(a, mid(9)) is not None  # past the end: nothing changes
    assert log.cursor.mark_delete == Position(LEDGER, 2)


def test_failover_redelivery_by_the_active_consumer_rewinds() -> None:
    log = Log([entry() for _ in range(2)], SubType.Failover)
    a, b = Member(1, name="a"), Member(2, name="b")
    log.join(a, SubType.Failover)
    effects = log.join(b, SubType.Failover)
    assert NotifyActiveConsumer(2, False) in effects or NotifyActiveConsumer(2, True) in effects
    active = log.state.consumers[log.state.active_uid or 0]
    standby = b if active is a else a
    active.permits = 2
    send_single_active(log.state, active, log.run(0, 1), Dispatched())
    assert log.state.redeliver(standby, []) == ([], None)
    epoch = log.state.epoch
    effects, entries = log.state.redeliver(active, [])
    assert effects == [RewindCursor(), RunDispatcher()] and entries is None
    assert active.pending == {} and log.state.epoch == epoch + 1
    assert not log.state.still_active(active, epoch)  # a read begun before is dropped


def test_failover_active_leaving_hands_over_with_a_rewind() -> None:
    log = Log([entry()], SubType.Failover)
    a, b = Member(1, name="a"), Member(2, name="b")
    log.join(a, SubType.Failover)
    log.join(b, SubType.Failover)
    active_uid = log.state.active_uid
    leaving = log.state.consumers[active_uid or 0]
    staying = b if leaving is a else a
    effects = log.state.remove_consumer(leaving, log.now_ms())
    assert effects[:2] == [RewindCursor(), RunDispatcher()]
    assert NotifyActiveConsumer(staying.uid, True) in effects
    assert StartDispatch(staying.uid) in effects
    assert log.state.active_uid == staying.uid


def test_the_last_consumer_leaving_forgets_replays_and_rewinds() -> None:
    log = Log([entry() for _ in range(2)], SubType.Shared)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 2)
    dispatch_runs_shared(log.state, log.run(0, 1), False, Dispatched())
    log.state.redeliver(a, [mid(0)])
    epoch = log.state.epoch
    assert log.state.remove_consumer(a, log.now_ms()) == [RewindCursor()]
    assert not log.state.replay and len(log.state.tracker) == 0
    assert log.state.epoch == epoch + 1


def test_unacked_limit_per_subscription_blocks_at_the_limit_and_releases_at_half() -> None:
    log = Log([entry() for _ in range(4)], SubType.Shared)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 10)
    assert not log.state.unacked_gate(4, 0)
    # the per-message limit holds inside a round: the fourth entry waits for replay
    log.dispatch(log.items(0, 1, 2, 3), limit_s=3)
    assert len(a.sent) == 3 and list(log.state.replay) == [Position(LEDGER, 3)]
    assert log.state.unacked_gate(3, 0)
    log.state.ack_individual(a, [mid(0)])
    assert log.state.wake_after_ack(a)
    assert log.state.unacked_gate(3, 0)  # 2 pending: above half of 3
    log.state.ack_individual(a, [mid(1)])
    assert not log.state.unacked_gate(3, 0)


def test_delayed_entries_wait_until_due() -> None:
    log = Log([entry(at_ms=0), entry()], SubType.Shared)
    at_ms = log.clock.now_ms() + 5_000
    log.entries[0] = entry(at_ms=at_ms)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 10)
    # the tag of deliver_at_time sends the round to the per-entry path
    assert not dispatch_runs_shared(log.state, log.run(0, 1), False, Dispatched())
    log.dispatch(log.items(0, 1))
    assert a.positions == [Position(LEDGER, 1)]
    assert log.state.next_delayed_delivery_ms() == at_ms
    assert not log.state.has_replay()
    log.clock.advance(5)
    assert log.state.has_replay()
    assert log.take_replay(10) == [Position(LEDGER, 0)]


def test_key_shared_keeps_a_key_on_one_consumer() -> None:
    keys = ["k1", "k2", "k1", "k3", "k2", "k1"]
    log = Log([entry(k) for k in keys], SubType.Key_Shared)
    a, b = Member(1, name="a"), Member(2, name="b")
    log.join(a, SubType.Key_Shared)
    log.join(b, SubType.Key_Shared)
    log.state.flow(a, 10)
    log.state.flow(b, 10)
    assert log.dispatch(log.items(*range(len(keys))))
    owner: dict[str, int] = {}
    for m in (a, b):
        for p in m.positions:
            assert owner.setdefault(keys[p.entry_id], m.uid) == m.uid
    assert sorted(a.positions + b.positions) == [Position(LEDGER, i) for i in range(len(keys))]


def test_a_delayed_failover_switch_runs_on_the_timer() -> None:
    log = Log([entry()], SubType.Failover)
    log.state = SubscriptionState(
        "persistent://t/n/topic",
        -1,
        SubType.Failover,
        log.cursor,
        log.ledgers,
        log.clock,
        failover_delay_ms=1_000,
        delayed_delivery_tick_ms=0,
    )
    a = Member(1, name="a")
    effects = log.join(a, SubType.Failover)
    assert effects == [ScheduleActivation(log.now_ms() + 1_000)]
    assert log.state.single_active_target() is None  # paused until the switch
    log.clock.advance(1)
    effects = log.state.on_failover_timer(log.now_ms())
    assert effects[:2] == [RewindCursor(), RunDispatcher()]
    a.permits = 1
    assert log.state.single_active_target() is a


def test_a_seek_drops_what_was_read_and_every_replay() -> None:
    log = Log([entry() for _ in range(2)], SubType.Shared)
    a = Member(1)
    log.join(a, SubType.Shared)
    log.state.flow(a, 2)
    dispatch_runs_shared(log.state, log.run(0, 1), False, Dispatched())
    log.state.redeliver(a, [])
    epoch = log.state.epoch
    log.state.on_reset()
    assert log.state.epoch == epoch + 1
    log.state.after_reset()
    assert not log.state.has_replay() and len(log.state.tracker) == 0
