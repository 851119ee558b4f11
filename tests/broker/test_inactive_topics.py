"""Inactive topics: the policy JSON, its resolution, and the pure decision
(:mod:`magnetar.broker.inactive_topics`): activity facts + policy + time -> delete or not."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.inactive_topics import (
    InactivityTracker,
    TopicActivity,
    deletable,
    is_inactive,
    should_delete,
)
from magnetar.broker.policies import (
    BrokerDefaults,
    InactiveTopicDeleteMode,
    InactiveTopicPolicies,
    Policies,
    PolicyError,
    TopicPolicies,
    broker_defaults,
    resolve,
)
from magnetar.common.names import TopicName

NO_SUBS = InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS
CAUGHT_UP = InactiveTopicDeleteMode.DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP
ON_60S = InactiveTopicPolicies(NO_SUBS, 60, True)
IDLE = TopicActivity(clients=0, subscriptions=0, backlog_messages=0, marker="m")


def _activity(**changes: object) -> TopicActivity:
    values: dict[str, object] = {
        "clients": 0,
        "subscriptions": 0,
        "backlog_messages": 0,
        "marker": "m",
    }
    values.update(changes)
    return TopicActivity(**values)  # type: ignore[arg-type]


# --- the policy JSON ---------------------------------------------------------------------


def test_pulsar_json_round_trip() -> None:
    body = {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 3600,
        "deleteWhileInactive": True,
    }
    policy = InactiveTopicPolicies.from_json(body)
    assert policy == InactiveTopicPolicies(CAUGHT_UP, 3600, True)
    assert policy.to_json() == body
    ns = Policies.from_json({"inactive_topic_policies": body})
    assert ns.inactive_topic_policies == policy
    assert Policies.from_json(ns.to_json()).inactive_topic_policies == policy
    tp = TopicPolicies.from_json({"inactiveTopicPolicies": body})
    assert tp.inactiveTopicPolicies == policy and tp.to_json()["inactiveTopicPolicies"] == body


@pytest.mark.parametrize(
    "body",
    [
        {"inactiveTopicDeleteMode": "delete_always"},
        {"maxInactiveDurationSeconds": -1},
        {"maxInactiveDurationSeconds": "60"},
        {"deleteWhileInactive": "yes"},
        [],
    ],
)
def test_malformed_json_is_refused(body: object) -> None:
    with pytest.raises(PolicyError):
        InactiveTopicPolicies.from_json(body)


# --- resolution ----------------------------------------------------------------------------


def test_topic_replaces_namespace_replaces_broker_as_one_object() -> None:
    broker = InactiveTopicPolicies(NO_SUBS, 60, False)
    namespace = InactiveTopicPolicies(CAUGHT_UP, 10, True)
    topic = InactiveTopicPolicies(NO_SUBS, 5, False)
    defaults = BrokerDefaults(inactive_topic=broker)
    assert resolve(defaults, None).inactive_topic == broker
    ns = Policies(inactive_topic_policies=namespace)
    assert resolve(defaults, ns).inactive_topic == namespace
    tp = TopicPolicies(inactiveTopicPolicies=topic)
    assert resolve(defaults, ns, tp).inactive_topic == topic


def test_broker_defaults_follow_the_broker_settings() -> None:
    assert broker_defaults(BrokerConfig()).inactive_topic == InactiveTopicPolicies(
        NO_SUBS, 60, False
    )
    config = BrokerConfig(
        delete_inactive_topics_enabled=True,
        delete_inactive_topics_frequency_s=30,
        delete_inactive_topics_mode="delete_when_subscriptions_caught_up",
    )
    # the max duration defaults to the frequency, as Pulsar's
    assert broker_defaults(config).inactive_topic == InactiveTopicPolicies(CAUGHT_UP, 30, True)
    config = BrokerConfig(delete_inactive_topics_max_inactive_duration_s=7)
    assert broker_defaults(config).inactive_topic.max_inactive_duration_s == 7


# --- the decision --------------------------------------------------------------------------


def test_which_topics_may_be_deleted_at_all() -> None:
    assert deletable(TopicName.parse("persistent://public/default/t"))
    assert not deletable(TopicName.parse("persistent://public/default/t-partition-0"))
    assert not deletable(TopicName.parse("non-persistent://public/default/t"))
    assert not deletable(TopicName.parse("persistent://public/default/__state__wc"))


def test_a_connected_client_keeps_a_topic_active_in_every_mode() -> None:
    for mode in InactiveTopicDeleteMode:
        assert not is_inactive(_activity(clients=1), mode)
        assert is_inactive(IDLE, mode)


def test_a_subscription_keeps_a_topic_in_mode_no_subscriptions() -> None:
    caught_up = _activity(subscriptions=2)
    assert not is_inactive(caught_up, NO_SUBS)
    assert is_inactive(caught_up, CAUGHT_UP)
    assert not is_inactive(_activity(subscriptions=1, backlog_messages=1), CAUGHT_UP)


def test_deleted_only_after_the_max_duration() -> None:
    assert not should_delete(IDLE, ON_60S, 0, inactive_since_ms=0, now_ms=59_999)
    assert should_delete(IDLE, ON_60S, 0, inactive_since_ms=0, now_ms=60_000)


def test_never_when_delete_while_inactive_is_off() -> None:
    off = InactiveTopicPolicies(NO_SUBS, 0, False)
    assert not should_delete(IDLE, off, 0, 0, 10**9)


def test_never_while_active() -> None:
    assert not should_delete(_activity(clients=1), ON_60S, 0, 0, 10**9)
    assert not should_delete(_activity(subscriptions=1), ON_60S, 0, 0, 10**9)
    caught_up = InactiveTopicPolicies(CAUGHT_UP, 60, True)
    backlog = _activity(subscriptions=1, backlog_messages=3)
    assert not should_delete(backlog, caught_up, 0, 0, 10**9)
    assert should_delete(_activity(subscriptions=1), caught_up, 0, 0, 10**9)


def test_retention_time_keeps_the_topic_longer() -> None:
    # Pulsar's shouldTopicBeRetained: the retention time counts from the last activity
    assert not should_delete(IDLE, ON_60S, 120_000, 0, 60_000)
    assert should_delete(IDLE, ON_60S, 120_000, 0, 120_000)
    assert not should_delete(IDLE, ON_60S, -1, 0, 10**12)  # retained for ever


def test_tracker_counts_from_the_first_check_that_saw_it_inactive() -> None:
    tracker = InactivityTracker()
    assert not tracker.due("t", IDLE, ON_60S, 0, now_ms=1_000)
    assert not tracker.due("t", IDLE, ON_60S, 0, now_ms=60_999)
    assert tracker.due("t", IDLE, ON_60S, 0, now_ms=61_000)


def test_tracker_restarts_the_count_after_activity() -> None:
    tracker = InactivityTracker()
    tracker.due("t", IDLE, ON_60S, 0, now_ms=0)
    assert not tracker.due("t", _activity(clients=1), ON_60S, 0, now_ms=30_000)
    assert not tracker.due("t", IDLE, ON_60S, 0, now_ms=60_000)
    assert not tracker.due("t", IDLE, ON_60S, 0, now_ms=119_999)
    assert tracker.due("t", IDLE, ON_60S, 0, now_ms=120_000)


def test_tracker_sees_use_between_checks() -> None:
    # a producer came, published and left between two checks: its marker moved
    tracker = InactivityTracker()
    tracker.due("t", IDLE, ON_60S, 0, now_ms=0)
    published = _activity(marker="m2")
    assert not tracker.due("t", published, ON_60S, 0, now_ms=60_000)
    assert tracker.due("t", published, ON_60S, 0, now_ms=120_000)


def test_tracker_forgets_unloaded_topics() -> None:
    tracker = InactivityTracker()
    tracker.due("t", IDLE, ON_60S, 0, now_ms=0)
    tracker.keep_only(set())
    assert not tracker.due("t", IDLE, ON_60S, 0, now_ms=60_000)  # counted afresh
