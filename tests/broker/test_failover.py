"""Active consumer choice and ACTIVE_CONSUMER_CHANGE effects (reference §6.10)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.failover import (
    ActiveConsumerSelector,
    FailoverConsumer,
    NotifyActiveConsumer,
    RewindCursor,
    ScheduleActivation,
    SingleActiveType,
    StartDispatch,
    choose_active_index,
    java_string_order_key,
    sort_consumers,
)
from magnetar.common.errors import ConsumerBusy, ConsumerNotFound

from .java_reference import java_make_hash, java_string_key

TOPIC = "persistent://public/default/t"


def naive_choose(consumers: list[FailoverConsumer], topic: str, partition: int) -> FailoverConsumer:
    """§6.10 steps 1-4 written out directly."""
    ordered = sorted(consumers, key=lambda c: (c.priority_level, java_string_key(c.name)))
    best = ordered[0].priority_level
    top = [c for c in ordered if c.priority_level == best]
    if partition >= 0:
        return top[partition % len(top)]
    ring: dict[int, int] = {}
    for i, c in enumerate(top):
        for j in range(100):
            ring[java_make_hash((c.name + str(j)).encode())] = i
    h = java_make_hash(topic.encode())
    ceiling = [k for k in ring if k >= h]
    key = min(ceiling) if ceiling else min(ring)
    return top[ring[key]]


NAMES = st.text(alphabet="abAB\u00e9\uffff\U0001f600-", min_size=1, max_size=4)


@given(
    st.lists(st.tuples(NAMES, st.integers(0, 2)), min_size=1, max_size=6),
    st.integers(-1, 9),
    st.text(min_size=1, max_size=10),
)
def test_choice_matches_direct_rules(
    specs: list[tuple[str, int]], partition: int, topic_suffix: str
) -> None:
    consumers = [FailoverConsumer(i, n, p) for i, (n, p) in enumerate(specs)]
    topic = TOPIC + topic_suffix
    ordered = sort_consumers(consumers)
    chosen = ordered[choose_active_index(ordered, topic, partition)]
    expected = naive_choose(consumers, topic, partition)
    # Ties (same name and priority) are interchangeable except by arrival order, which both
    # stable sorts preserve.
    assert chosen == expected


def test_java_string_order_is_utf16() -> None:
    # U+FFFF sorts above U+1F600 in Java (surrogates 0xD83D < 0xFFFF), below in code points.
    assert java_string_order_key("\U0001f600") < java_string_order_key("\uffff")
    assert "\U0001f600" > "\uffff"


def test_partitioned_topic_uses_index_modulo_top_priority() -> None:
    cs = [FailoverConsumer(1, "c"), FailoverConsumer(2, "a"), FailoverConsumer(3, "b", 1)]
    ordered = sort_consumers(cs)
    assert [c.name for c in ordered] == ["a", "c", "b"]
    # Only the two priority-0 consumers share partitions.
    assert [ordered[choose_active_index(ordered, TOPIC, p)].name for p in range(4)] == [
        "a",
        "c",
        "a",
        "c",
    ]


def test_first_failover_consumer_activates_after_delay() -> None:
    sel = ActiveConsumerSelector(TOPIC, 0, SingleActiveType.FAILOVER, failover_delay_ms=1000)
    assert sel.add(FailoverConsumer(1, "a"), now_ms=0) == [ScheduleActivation(1000)]
    assert sel.dispatch_paused
    assert sel.on_timer(999) == [ScheduleActivation(1000)]  # early: arm again
    assert sel.on_timer(1000) == [RewindCursor(), NotifyActiveConsumer(1, True), StartDispatch(1)]
    assert not sel.dispatch_paused
    assert sel.on_timer(2000) == []  # nothing pending any more


def test_early_timer_keeps_the_activation_pending() -> None:
    # Issue 13: a lone Failover consumer (the walkthrough's topic2/sub3) whose activation
    # timer fired 1 ms early by the broker's clock was never activated: the early tick was a
    # no-op that armed nothing, so dispatch stayed paused, and every later switch found an
    # activation "already scheduled" and scheduled nothing either.
    sel = ActiveConsumerSelector(TOPIC + "-partition-0", 0, SingleActiveType.FAILOVER, 1000)
    assert sel.add(FailoverConsumer(1, "b"), now_ms=10_000) == [ScheduleActivation(11_000)]
    assert sel.on_timer(10_999) == [ScheduleActivation(11_000)]
    assert sel.dispatch_paused
    # "a" sorts first and takes partition 0: a switch while the activation is pending
    # neither postpones nor loses it.
    assert sel.add(FailoverConsumer(2, "a"), now_ms=10_999) == []
    assert sel.on_timer(10_999) == [ScheduleActivation(11_000)]
    assert sel.on_timer(11_000) == [
        RewindCursor(),
        NotifyActiveConsumer(2, True),
        NotifyActiveConsumer(1, False),
        StartDispatch(2),
    ]
    assert not sel.dispatch_paused


def test_unchanged_active_notifies_only_newcomer() -> None:
    # "If the active consumer did not change, send ACTIVE_CONSUMER_CHANGE only to the
    # newly added consumer."
    sel = ActiveConsumerSelector(TOPIC + "-partition-0", 0, SingleActiveType.FAILOVER, 0)
    sel.add(FailoverConsumer(1, "a"), 0)
    assert sel.add(FailoverConsumer(2, "b"), 0) == [NotifyActiveConsumer(2, False)]
    assert sel.active is not None and sel.active.consumer_id == 1


def test_changed_active_notifies_everyone_after_delay() -> None:
    # "Wait activeConsumerFailoverDelayTimeMillis ... rewind ... ACTIVE_CONSUMER_CHANGE to
    # every consumer ... then dispatch to the new active consumer."
    sel = ActiveConsumerSelector(TOPIC + "-partition-0", 0, SingleActiveType.FAILOVER, 1000)
    sel.add(FailoverConsumer(1, "b"), 0)
    sel.on_timer(1000)
    assert sel.add(FailoverConsumer(2, "a"), 5000) == [ScheduleActivation(6000)]
    # A further change while one is pending does not postpone it.
    assert sel.add(FailoverConsumer(3, "0", 0), 5500) == []
    assert sel.on_timer(6000) == [
        RewindCursor(),
        NotifyActiveConsumer(3, True),
        NotifyActiveConsumer(2, False),
        NotifyActiveConsumer(1, False),
        StartDispatch(3),
    ]


def test_removal_of_active_switches_and_removal_of_last_clears() -> None:
    sel = ActiveConsumerSelector(TOPIC + "-partition-1", 1, SingleActiveType.FAILOVER, 0)
    sel.add(FailoverConsumer(1, "a"), 0)
    sel.add(FailoverConsumer(2, "b"), 0)
    assert sel.active is not None and sel.active.consumer_id == 2
    assert sel.remove(2, 0) == [RewindCursor(), NotifyActiveConsumer(1, True), StartDispatch(1)]
    assert sel.remove(1, 0) == []
    assert sel.active is None
    with pytest.raises(ConsumerNotFound):
        sel.remove(1, 0)


def test_removing_inactive_consumer_sends_nothing() -> None:
    sel = ActiveConsumerSelector(TOPIC + "-partition-0", 0, SingleActiveType.FAILOVER, 0)
    sel.add(FailoverConsumer(1, "a"), 0)
    sel.add(FailoverConsumer(2, "b"), 0)
    assert sel.remove(2, 0) == []


def test_exclusive_never_notifies_and_is_busy() -> None:
    # "Exclusive subscriptions do not send ACTIVE_CONSUMER_CHANGE."
    sel = ActiveConsumerSelector(TOPIC, -1, SingleActiveType.EXCLUSIVE, 1000)
    assert sel.add(FailoverConsumer(1, "a"), 0) == [RewindCursor(), StartDispatch(1)]
    with pytest.raises(ConsumerBusy, match="Exclusive consumer is already connected"):
        sel.add(FailoverConsumer(2, "b"), 0)
    assert sel.can_unsubscribe(1)


def test_pending_switch_cancelled_when_everyone_leaves() -> None:
    sel = ActiveConsumerSelector(TOPIC, -1, SingleActiveType.FAILOVER, 1000)
    sel.add(FailoverConsumer(1, "a"), 0)
    sel.remove(1, 10)
    assert not sel.dispatch_paused and sel.on_timer(5000) == []


def test_max_consumers() -> None:
    sel = ActiveConsumerSelector(TOPIC, -1, SingleActiveType.FAILOVER, 0, max_consumers=1)
    sel.add(FailoverConsumer(1, "a"), 0)
    with pytest.raises(ConsumerBusy, match="max consumers"):
        sel.add(FailoverConsumer(2, "b"), 0)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 6), st.integers(0, 1)),
            st.tuples(st.just("remove"), st.integers(0, 6), st.just(0)),
        ),
        max_size=25,
    ),
    st.integers(-1, 3),
)
def test_selector_tracks_direct_choice(ops: list[tuple[str, int, int]], partition: int) -> None:
    sel = ActiveConsumerSelector(TOPIC, partition, SingleActiveType.FAILOVER, 0)
    live: dict[int, FailoverConsumer] = {}
    for kind, cid, prio in ops:
        if kind == "add" and cid not in live:
            consumer = FailoverConsumer(cid, f"c{cid % 4}", prio)
            live[cid] = consumer
            effects = sel.add(consumer, 0)
        elif kind == "remove" and cid in live:
            del live[cid]
            effects = sel.remove(cid, 0)
        else:
            continue
        if not live:
            assert sel.active is None
            continue
        assert sel.active is not None
        expected = naive_choose(list(sel.consumers), TOPIC, partition)
        assert sel.active == expected
        notified = [e for e in effects if isinstance(e, NotifyActiveConsumer)]
        if any(isinstance(e, StartDispatch) for e in effects):
            # A change: everyone hears, exactly one is active.
            assert {e.consumer_id for e in notified} == set(live)
            assert [e.consumer_id for e in notified if e.is_active] == [sel.active.consumer_id]
        else:
            assert len(notified) <= 1
