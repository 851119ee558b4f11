"""Subscribe/unsubscribe admission, redelivery counts, delayed delivery (§6.5, §6.7, §6.9, §6.11)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.delayed_delivery import DelayedDeliveryFull, DelayedDeliveryTracker, applies_to
from magnetar.broker.redelivery_tracker import (
    DisabledRedeliveryTracker,
    RedeliveryTracker,
    redelivery_tracker_for,
)
from magnetar.broker.subscription_rules import (
    KeySharedMode,
    KeySharedPolicy,
    SubType,
    check_subscribe,
    check_unsubscribe,
)
from magnetar.common.clock import ManualClock
from magnetar.common.errors import ConsumerBusy, MetadataError, ServerError


def test_exclusive_busy() -> None:
    # "An Exclusive subscription that already has a consumer gives ConsumerBusy"
    check_subscribe(None, 0, SubType.Exclusive)
    with pytest.raises(ConsumerBusy, match="Exclusive consumer is already connected") as info:
        check_subscribe(SubType.Exclusive, 1, SubType.Exclusive)
    assert info.value.code is ServerError.ConsumerBusy


def test_different_type_while_consumers_exist() -> None:
    # "Subscribing with a different subType while consumers exist gives ConsumerBusy"
    with pytest.raises(ConsumerBusy, match="different type"):
        check_subscribe(SubType.Shared, 2, SubType.Failover)
    check_subscribe(SubType.Shared, 0, SubType.Failover)  # no consumers: any type
    check_subscribe(SubType.Failover, 3, SubType.Failover)
    check_subscribe(SubType.Shared, 3, SubType.Shared)


def test_key_shared_policy_must_match() -> None:
    sticky = KeySharedPolicy(KeySharedMode.STICKY)
    auto_ooo = KeySharedPolicy(KeySharedMode.AUTO_SPLIT, allow_out_of_order_delivery=True)
    with pytest.raises(ConsumerBusy, match="key_shared mode of 'AUTO_SPLIT'"):
        check_subscribe(SubType.Key_Shared, 1, SubType.Key_Shared, KeySharedPolicy(), sticky)
    with pytest.raises(ConsumerBusy, match="does not allow out of order"):
        check_subscribe(SubType.Key_Shared, 1, SubType.Key_Shared, KeySharedPolicy(), auto_ooo)
    with pytest.raises(ConsumerBusy, match="allows out of order"):
        check_subscribe(SubType.Key_Shared, 1, SubType.Key_Shared, auto_ooo, KeySharedPolicy())
    check_subscribe(SubType.Key_Shared, 1, SubType.Key_Shared, None, KeySharedPolicy())


def test_max_consumers() -> None:
    with pytest.raises(ConsumerBusy, match="max consumers"):
        check_subscribe(SubType.Shared, 2, SubType.Shared, max_consumers=2)


def test_unsubscribe_rules() -> None:
    # "Allowed only when the requesting consumer is the only consumer; Java also requires it
    # to be the active one for single-active subscriptions."
    check_unsubscribe(SubType.Shared, 1, is_member=True, is_active=False)
    check_unsubscribe(SubType.Failover, 1, is_member=True, is_active=True)
    for args in [
        (SubType.Shared, 2, True, False),
        (SubType.Shared, 1, False, False),
        (SubType.Failover, 1, True, False),
    ]:
        with pytest.raises(MetadataError, match="Unconnected or shared consumer"):
            check_unsubscribe(*args)


def test_redelivery_counts() -> None:
    # "Increment redelivery_count for each entry" on explicit redelivery; disconnect replay
    # uses addIfAbsent: "the redelivery count is not incremented".
    tracker = redelivery_tracker_for(SubType.Shared)
    assert type(tracker) is RedeliveryTracker
    assert tracker.increment((1, 1)) == 1
    assert tracker.increment((1, 1)) == 2
    tracker.add_if_absent((1, 1))
    tracker.add_if_absent((1, 2))
    assert tracker.count((1, 1)) == 2 and tracker.count((1, 2)) == 0
    tracker.remove_up_to((1, 1))
    assert tracker.count((1, 1)) == 0 and len(tracker) == 1
    tracker.clear()
    assert len(tracker) == 0
    # "Exclusive/Failover dispatchers always send 0."
    for sub in (SubType.Exclusive, SubType.Failover):
        disabled = redelivery_tracker_for(sub)
        assert isinstance(disabled, DisabledRedeliveryTracker)
        assert disabled.increment((1, 1)) == 0 and disabled.count((1, 1)) == 0
    # it holds nothing, so every Exclusive and Failover subscription shares one
    assert redelivery_tracker_for(SubType.Exclusive) is redelivery_tracker_for(SubType.Failover)


def test_redelivery_tracker_bound_evicts_lowest() -> None:
    tracker = RedeliveryTracker(max_tracked_entries=2)
    for entry in (3, 1, 2):
        tracker.increment((0, entry))
    assert len(tracker) == 2 and tracker.count((0, 1)) == 0 and tracker.count((0, 3)) == 1


def test_delayed_delivery_only_for_shared_types() -> None:
    # "deliver_at_time: honoured (held back until due) only for Shared and Key_Shared."
    assert applies_to(SubType.Shared) and applies_to(SubType.Key_Shared)
    assert not applies_to(SubType.Exclusive) and not applies_to(SubType.Failover)


def test_delayed_delivery_holds_until_due() -> None:
    clock = ManualClock(start_ms=0)
    tracker = DelayedDeliveryTracker(clock, tick_ms=1000)
    assert not tracker.add((1, 0), deliver_at_ms=500)  # within the tick: deliver now
    assert tracker.add((1, 1), deliver_at_ms=5000)
    assert tracker.add((1, 2), deliver_at_ms=3000)
    assert tracker.add((1, 2), deliver_at_ms=3000)  # duplicate: no-op
    assert len(tracker) == 2 and tracker.next_delivery_ms == 3000
    assert tracker.pop_due(10) == []
    clock.advance(2.0)  # cutoff = now + tick = 3000
    assert tracker.has_due()
    assert tracker.pop_due(10) == [(1, 2)]
    clock.advance(10.0)
    assert tracker.pop_due(10) == [(1, 1)] and tracker.next_delivery_ms is None


def test_delayed_delivery_strict_and_bounded() -> None:
    clock = ManualClock(start_ms=0)
    tracker = DelayedDeliveryTracker(clock, strict=True, max_messages=1)
    assert tracker.add((1, 0), deliver_at_ms=10)
    assert tracker.is_full
    with pytest.raises(DelayedDeliveryFull):
        tracker.add((1, 1), deliver_at_ms=20)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 10_000)), max_size=40))
def test_delayed_pop_order(items: list[tuple[int, int]]) -> None:
    clock = ManualClock(start_ms=0)
    tracker = DelayedDeliveryTracker(clock, tick_ms=0)
    held: dict[tuple[int, int], int] = {}
    for entry, at in items:
        pos = (0, entry)
        if pos in held:
            continue
        if tracker.add(pos, at):
            held[pos] = at
    clock.advance(20.0)
    out = tracker.pop_due(len(held) + 1)
    assert out == sorted(held, key=lambda p: (held[p], p))
