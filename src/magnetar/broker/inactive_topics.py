"""Which loaded topics the broker deletes for inactivity (Pulsar's inactive-topic GC).

Pure: the broker's maintenance loop (:meth:`BrokerService._delete_inactive_topics`) reads
each loaded topic's :class:`TopicActivity` every ``brokerDeleteInactiveTopicsFrequencySeconds``
and deletes those :meth:`InactivityTracker.due` names. The rules:

* only persistent, non-partitioned topics, and no system topic (local name ``__…``:
  function state, compaction and change-event topics) — :func:`deletable`;
* a topic is inactive when no producer or consumer is connected and, per the effective
  :class:`InactiveTopicPolicies` mode, it has no subscription
  (``delete_when_no_subscriptions``) or no subscription has unacknowledged messages
  (``delete_when_subscriptions_caught_up``) — :func:`is_inactive`;
* it is deleted (:func:`should_delete`) when ``deleteWhileInactive`` is on, it has been
  inactive for ``maxInactiveDurationSeconds`` and for its retention time (Pulsar's
  ``shouldTopicBeRetained``; a retention time of -1 keeps it for ever);
* "inactive since" is the first check that found it inactive with nothing published and no
  subscription added or removed since, so a topic is never deleted before it has been
  inactive for the duration (at most one check period later than that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.policies import InactiveTopicDeleteMode, InactiveTopicPolicies
from magnetar.common.frozen_struct import frozen_struct
from magnetar.common.names import TopicDomain, TopicName

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic


@frozen_struct(kw_only=False)
class TopicActivity:
    """What the check sees of one topic at one moment."""

    clients: int
    """Producers and consumers connected."""
    subscriptions: int
    backlog_messages: int
    """Unacknowledged messages over all subscriptions."""
    marker: object
    """Changes whenever the topic is used between checks (its last entry, its
    subscriptions): a topic whose marker moved is not inactive since the earlier check."""


def activity_of(topic: Topic) -> TopicActivity:
    """The loaded topic's activity now (in-memory reads only). Its subscriptions are those
    with consumers plus every durable cursor (one made by ``admin topics
    create-subscription``, or whose consumers left, has no ``Subscription`` object)."""
    subs = topic.subscriptions
    cursors = {name: c for name, c in topic.ml.cursors.items() if c.durable and name not in subs}
    return TopicActivity(
        clients=len(topic.producers) + sum(len(s.consumers) for s in subs.values()),
        subscriptions=len(subs) + len(cursors),
        backlog_messages=sum(s.backlog_messages for s in subs.values())
        + sum(c.backlog_messages for c in cursors.values()),
        marker=(topic.ml.last_confirmed, frozenset(subs), frozenset(cursors)),
    )


def has_clients(topic: Topic) -> bool:
    """Whether a producer or consumer is attached: the topic is then inactive under no
    policy (``activity_of(topic).clients > 0``, without building the rest)."""
    return bool(topic.producers) or any(s.consumers for s in topic.subscriptions.values())


def deletable(name: TopicName) -> bool:
    """Whether the check may delete this topic at all."""
    return (
        name.domain is TopicDomain.PERSISTENT
        and not name.is_partition
        and not name.local_name.startswith("__")
    )


def is_inactive(activity: TopicActivity, mode: InactiveTopicDeleteMode) -> bool:
    if activity.clients > 0:
        return False
    if mode is InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS:
        return activity.subscriptions == 0
    return activity.backlog_messages == 0


def should_delete(
    activity: TopicActivity,
    policy: InactiveTopicPolicies,
    retention_time_ms: int,
    inactive_since_ms: int,
    now_ms: int,
) -> bool:
    """Whether a topic inactive since ``inactive_since_ms`` goes now (the rules above);
    ``retention_time_ms`` is its effective retention time (-1: for ever)."""
    if not policy.delete_while_inactive or not is_inactive(activity, policy.delete_mode):
        return False
    inactive_ms = now_ms - inactive_since_ms
    if inactive_ms < policy.max_inactive_duration_s * 1000:
        return False
    return retention_time_ms >= 0 and inactive_ms >= retention_time_ms


class InactivityTracker:
    """Since when each topic has been inactive, across checks. One per broker; bounded by
    the loaded topics (:meth:`keep_only` drops the others)."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[int, object]] = {}

    def forget(self, name: str) -> None:
        """``name`` is active (as :meth:`due` records for an active topic)."""
        self._since.pop(name, None)

    def keep_only(self, names: set[str]) -> None:
        """Forget every topic not in ``names`` (unloaded or deleted)."""
        for name in [n for n in self._since if n not in names]:
            del self._since[name]

    def due(
        self,
        name: str,
        activity: TopicActivity,
        policy: InactiveTopicPolicies,
        retention_time_ms: int,
        now_ms: int,
    ) -> bool:
        """Record this check of ``name`` and say whether it is to be deleted now."""
        seen = self._since.get(name)
        if not is_inactive(activity, policy.delete_mode):
            self._since.pop(name, None)
            return False
        if seen is None or seen[1] != activity.marker:
            self._since[name] = (now_ms, activity.marker)
            return False
        return should_delete(activity, policy, retention_time_ms, seen[0], now_ms)
