"""Topic stats JSON (``GET …/stats``, ``…/partitioned-stats``, ``…/internalStats``) with
Pulsar's field names and shapes (reference §8.3): ``publishers`` a list, ``subscriptions``
an object keyed by name, ``consumers`` a list, ``replication`` an object.

Rates come from the broker's sliding-window meters (:mod:`magnetar.broker.stats`).
The publish time of each subscription's oldest unacknowledged message
(``earliestMsgPublishTimeInBacklog``, and the topic's ``earliestMsgPublishTimeInBacklogs``
and ``oldestBacklogMessageAgeSeconds``) is read from the entry itself: call
:func:`backlog_publish_times` first (one entry read per distinct position, bounded by
:data:`BACKLOG_READS_MAX`) and pass its answer to :func:`topic_stats`.
Fields Magnetar has no counterpart for are present with Pulsar's neutral value (0, false,
empty, null) so clients that read them keep working.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from magnetar.broker.consumer import SUB_TYPE_NAMES, Consumer
from magnetar.broker.replicated_subscription import is_replicated
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic
from magnetar.common.errors import MagnetarError
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.retention import keeps_nothing_consumed
from magnetar.protocol import Entry, ProtocolError
from magnetar.replication.persistent_replicator import CURSOR_PREFIX as REPLICATOR_CURSOR_PREFIX
from magnetar.replication.stats import merged_replication, replication_stats

log = logging.getLogger(__name__)

BACKLOG_READS_MAX = 64
"""Entries one stats request may read to find backlog publish times; subscriptions past
this many distinct positions report 0 (unknown), as Pulsar does when it does not look."""

UNRETAINED_NOTE = (
    "no subscription and retention 0: messages are not retained, they are deleted when"
    " their ledger closes (rollover, restart, failover); create a subscription or set"
    " a retention policy to keep them"
)
"""``retentionNote`` of a topic whose messages nothing keeps (a Magnetar field; null otherwise)."""

ACCESS_MODE_NAMES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}


def iso_time(ms: int) -> str:
    """Pulsar's date format for ``connectedSince`` and friends (ISO 8601, UTC)."""
    return (
        datetime.fromtimestamp(ms / 1000, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def position_str(position: Position) -> str:
    return f"{position[0]}:{position[1]}"


def subscription_names(topic: Topic) -> list[str]:
    """Subscriptions of a topic: those with a live object and every stored durable cursor
    but the geo-replicators' (``pulsar.repl.<cluster>``, reported under ``replication``)."""
    names = set(topic.subscriptions)
    names.update(
        name
        for name, c in topic.ml.cursors.items()
        if c.durable and not name.startswith(REPLICATOR_CURSOR_PREFIX)
    )
    return sorted(names)


def _consumer_stats(consumer: Consumer, sub: Subscription) -> dict[str, Any]:
    m = consumer.meters
    conn = consumer.connection
    ranges = sub.key_hash_ranges().get(consumer.uid)
    return {
        "consumerName": consumer.name,
        "msgRateOut": m.msg_out.rate(),
        "msgThroughputOut": m.msg_out.throughput(),
        "bytesOutCounter": m.msg_out.total_bytes,
        "msgOutCounter": m.msg_out.total_count,
        "msgRateRedeliver": m.redeliver.rate(),
        "messageAckRate": m.ack.rate(),
        "chunkedMessageRate": 0.0,
        "availablePermits": max(consumer.permits, 0),
        "unackedMessages": sum(consumer.pending.values()),
        "avgMessagesPerEntry": m.avg_messages_per_entry(),
        "blockedConsumerOnUnackedMsgs": False,
        "lastAckedTimestamp": m.ack.last_record_ms,
        "lastConsumedTimestamp": m.msg_out.last_record_ms,
        "lastConsumedFlowTimestamp": m.flow.last_record_ms,
        "readPositionWhenJoining": None,
        "address": f"/{conn.address}",
        "connectedSince": iso_time(consumer.connected_since_ms),
        "clientVersion": conn.client_version,
        "keyHashRanges": None if ranges is None else [f"[{a}, {b}]" for a, b in ranges],
        "metadata": dict(consumer.metadata),
    }


def _ranges_count(cursor: ManagedCursor) -> int:
    return sum(1 for _ in cursor.state.acked.ranges())


def _cursor_of(topic: Topic, name: str) -> ManagedCursor:
    sub = topic.subscriptions.get(name)
    return sub.cursor if sub is not None else topic.ml.cursors[name]


async def backlog_publish_times(topic: Topic) -> dict[str, int]:
    """Publish time (ms) of the first unacknowledged message of each subscription with a
    backlog, read from that entry's metadata (entry cache first, then storage). At most
    :data:`BACKLOG_READS_MAX` distinct entries are read; an entry that cannot be read
    (trimmed meanwhile, storage error) leaves its subscriptions out."""
    ledgers = topic.ml.ledgers
    by_position: dict[Position, list[str]] = {}
    for name in subscription_names(topic):
        cursor = _cursor_of(topic, name)
        if cursor.backlog_messages <= 0:
            continue
        position = cursor.state.first_unacked()
        if not ledgers.exists(position):
            position = ledgers.normalize(position)
            if not ledgers.exists(position):
                continue
        names = by_position.get(position)
        if names is None:
            if len(by_position) >= BACKLOG_READS_MAX:
                continue
            names = by_position[position] = []
        names.append(name)
    times: dict[str, int] = {}
    for position, names in by_position.items():
        try:
            data = await topic.ml.read_range(
                position[0], position[1], position[1], read_ahead=False
            )
            publish_time = Entry(data[0]).metadata.publish_time
        except (MagnetarError, ProtocolError, IndexError) as exc:
            log.debug("%s: no publish time at %s: %s", topic.full_name, position, exc)
            continue
        for name in names:
            times[name] = publish_time
    return times


def subscription_stats(topic: Topic, name: str, earliest_publish_ms: int = 0) -> dict[str, Any]:
    """One SubscriptionStats object. ``name`` must be in :func:`subscription_names`;
    ``earliest_publish_ms`` is its entry of :func:`backlog_publish_times` (0 = none)."""
    sub = topic.subscriptions.get(name)
    cursor = _cursor_of(topic, name)
    meters = topic.meters_of_subscription(name)
    consumers = list(sub.consumers.values()) if sub is not None else []
    consumer_stats = [_consumer_stats(c, sub) for c in consumers] if sub is not None else []
    delayed = sub.delayed_messages if sub is not None else 0
    backlog = cursor.backlog_messages
    sub_type = SUB_TYPE_NAMES[sub.sub_type] if sub is not None else "None"
    active = sub.active_consumer if sub is not None else None
    policy = sub.key_shared_policy if sub is not None else None
    ranges = _ranges_count(cursor)
    return {
        "msgRateOut": meters.msg_out.rate(),
        "msgThroughputOut": meters.msg_out.throughput(),
        "bytesOutCounter": meters.msg_out.total_bytes,
        "msgOutCounter": meters.msg_out.total_count,
        "msgRateRedeliver": sum(c["msgRateRedeliver"] for c in consumer_stats),
        "messageAckRate": sum(c["messageAckRate"] for c in consumer_stats),
        "chunkedMessageRate": 0.0,
        "msgBacklog": backlog,
        "msgBacklogNoDelayed": max(backlog - delayed, 0),
        "msgDelayed": delayed,
        "backlogSize": topic.ml.backlog_size_bytes(cursor),
        "unackedMessages": sum(c["unackedMessages"] for c in consumer_stats),
        "blockedSubscriptionOnUnackedMsgs": False,
        "type": sub_type,
        "activeConsumerName": None if active is None else active.name,
        "msgRateExpired": meters.expired.rate(),
        "totalMsgExpired": meters.expired.total_count,
        "lastExpireTimestamp": meters.last_expire_ms,
        "lastConsumedFlowTimestamp": max(
            (c["lastConsumedFlowTimestamp"] for c in consumer_stats), default=0
        ),
        "lastConsumedTimestamp": max(
            (c["lastConsumedTimestamp"] for c in consumer_stats), default=0
        ),
        "lastAckedTimestamp": max((c["lastAckedTimestamp"] for c in consumer_stats), default=0),
        "lastMarkDeleteAdvancedTimestamp": meters.last_mark_delete_advanced_ms,
        "earliestMsgPublishTimeInBacklog": earliest_publish_ms,
        "isDurable": cursor.durable,
        "isReplicated": is_replicated(cursor),
        "allowOutOfOrderDelivery": bool(policy and policy.allow_out_of_order_delivery),
        "keySharedMode": None if policy is None else policy.mode.name,
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": ranges,
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "delayedMessageIndexSizeInBytes": 0,
        "subscriptionProperties": {},
        "filterProcessedMsgCount": 0,
        "filterAcceptedMsgCount": 0,
        "filterRejectedMsgCount": 0,
        "filterRescheduledMsgCount": 0,
        "consumers": consumer_stats,
        # dispatch throttling (``magnetar.broker.rate_limit``): the topic's counts are the
        # topic's limiter's, shared by all its subscriptions
        "dispatchThrottledMsgEventsBySubscriptionLimit": 0
        if sub is None
        else sub.dispatch_limiter.throttled_msg_events,
        "dispatchThrottledBytesEventsBySubscriptionLimit": 0
        if sub is None
        else sub.dispatch_limiter.throttled_bytes_events,
        "dispatchThrottledMsgEventsByTopicLimit": topic.dispatch_limiter.throttled_msg_events,
        "dispatchThrottledBytesEventsByTopicLimit": topic.dispatch_limiter.throttled_bytes_events,
    }


def _publisher_stats(topic: Topic) -> list[dict[str, Any]]:
    result = []
    for p in topic.producers.values():
        m = p.meters
        rate = m.msg_in.rate()
        throughput = m.msg_in.throughput()
        result.append(
            {
                "producerId": p.producer_id,
                "producerName": p.name,
                "address": f"/{p.connection.address}",
                "connectedSince": iso_time(p.connected_since_ms),
                "accessMode": ACCESS_MODE_NAMES.get(int(p.access_mode), "Shared"),
                "msgRateIn": rate,
                "msgThroughputIn": throughput,
                "averageMsgSize": throughput / rate if rate else 0.0,
                "chunkedMessageRate": m.chunked.rate(),
                "clientVersion": p.connection.client_version,
                "metadata": dict(p.metadata),
                "supportsPartialProducer": False,
            }
        )
    return result


def topic_stats(
    topic: Topic, owner_broker: str, publish_times: dict[str, int] | None = None
) -> dict[str, Any]:
    """One TopicStats object for a loaded topic (or one partition). ``publish_times`` is
    :func:`backlog_publish_times`'s answer (without it, the backlog ages are unknown:
    0 and -1, Pulsar's values when it does not compute them)."""
    ml = topic.ml
    meters = topic.meters
    times = publish_times or {}
    subs = {
        name: subscription_stats(topic, name, times.get(name, 0))
        for name in subscription_names(topic)
    }
    oldest = min(times.items(), key=lambda kv: (kv[1], kv[0]), default=None)
    now_ms = topic.service.clock.now_ms()
    rate_in = meters.msg_in.rate()
    throughput_in = meters.msg_in.throughput()
    durable = [c for c in ml.cursors.values() if c.durable]
    slowest = min(durable, key=lambda c: c.state.mark_delete, default=None)
    cfg = ml.config
    unretained = not durable and keeps_nothing_consumed(
        cfg.retention_time_ms, cfg.retention_size_bytes
    )
    publishers = _publisher_stats(topic)
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": throughput_in,
        "msgRateOut": sum(s["msgRateOut"] for s in subs.values()),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subs.values()),
        "averageMsgSize": throughput_in / rate_in if rate_in else 0.0,
        "bytesInCounter": meters.msg_in.total_bytes,
        "msgInCounter": meters.msg_in.total_count,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subs.values()),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subs.values()),
        "msgChunkPublished": any(p.meters.chunked.total_count for p in topic.producers.values()),
        "publishRateLimitedTimes": topic.publish_limiter.limited_times,
        "subscribeRateLimitedTimes": topic.subscribe_limiter.limited_times,
        "storageSize": ml.ledgers.total_size_bytes,
        "offloadedStorageSize": sum(s.size_bytes for s in ml.ledgers if s.offloaded),
        "backlogSize": 0 if slowest is None else ml.backlog_size_bytes(slowest),
        "earliestMsgPublishTimeInBacklogs": 0 if oldest is None else oldest[1],
        "oldestBacklogMessageAgeSeconds": -1
        if oldest is None
        else max(now_ms - oldest[1], 0) // 1000,
        "oldestBacklogMessageSubscriptionName": None if oldest is None else oldest[0],
        "retentionNote": UNRETAINED_NOTE if unretained else None,
        "backlogQuotaLimitSize": cfg.backlog_quota_size_bytes,
        "backlogQuotaLimitTime": cfg.backlog_quota_time_ms // 1000
        if cfg.backlog_quota_time_ms > 0
        else -1,
        "waitingPublishers": 0,
        "deduplicationStatus": "Enabled" if topic.dedup is not None else "Disabled",
        "topicEpoch": topic.access.topic_epoch,
        "filteredEntriesCount": 0,
        "nonContiguousDeletedMessagesRanges": sum(
            s["nonContiguousDeletedMessagesRanges"] for s in subs.values()
        ),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "ownerBroker": owner_broker,
        "topicCreationTimeStamp": topic.created_ms,
        "lastPublishTimestamp": meters.last_publish_ms,
        "publishers": publishers,
        "subscriptions": subs,
        "replication": replication_stats(topic),
    }


_SUMMED_TOPIC_FIELDS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "bytesInCounter",
    "msgInCounter",
    "publishRateLimitedTimes",
    "bytesOutCounter",
    "msgOutCounter",
    "storageSize",
    "offloadedStorageSize",
    "backlogSize",
    "waitingPublishers",
    "filteredEntriesCount",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
)
_SUMMED_SUBSCRIPTION_FIELDS = (
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "msgBacklog",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "backlogSize",
    "unackedMessages",
    "msgRateExpired",
    "totalMsgExpired",
    "nonContiguousDeletedMessagesRanges",
)


def _earliest(times: list[int]) -> int:
    """The earliest of publish times where 0 means "none" (Pulsar's merge rule)."""
    return min((t for t in times if t > 0), default=0)


def partitioned_stats(
    partitions: dict[str, dict[str, Any]], count: int, *, per_partition: bool
) -> dict[str, Any]:
    """PartitionedTopicStats: the partitions' TopicStats summed (subscriptions merged by
    name, publishers concatenated), plus ``metadata`` and, if asked, ``partitions``."""
    total: dict[str, Any] = {}
    first = next(iter(partitions.values()), None)
    if first is not None:
        total = {k: v for k, v in first.items() if k not in ("publishers", "subscriptions")}
        for key in _SUMMED_TOPIC_FIELDS:
            total[key] = sum(p[key] for p in partitions.values())
    else:
        total = {key: 0 for key in _SUMMED_TOPIC_FIELDS}
        total.update({"replication": {}, "deduplicationStatus": "Disabled"})
    earliest = [p["earliestMsgPublishTimeInBacklogs"] for p in partitions.values()]
    total["earliestMsgPublishTimeInBacklogs"] = _earliest(earliest)
    oldest = max(
        partitions.values(), key=lambda p: p["oldestBacklogMessageAgeSeconds"], default=None
    )
    if oldest is not None:
        total["oldestBacklogMessageAgeSeconds"] = oldest["oldestBacklogMessageAgeSeconds"]
        total["oldestBacklogMessageSubscriptionName"] = oldest[
            "oldestBacklogMessageSubscriptionName"
        ]
    total["replication"] = merged_replication([p["replication"] for p in partitions.values()])
    rate_in = total["msgRateIn"]
    total["averageMsgSize"] = total["msgThroughputIn"] / rate_in if rate_in else 0.0
    total["publishers"] = [pub for p in partitions.values() for pub in p["publishers"]]
    subs: dict[str, dict[str, Any]] = {}
    for p in partitions.values():
        for name, s in p["subscriptions"].items():
            merged = subs.get(name)
            if merged is None:
                subs[name] = dict(s, consumers=list(s["consumers"]))
                continue
            for key in _SUMMED_SUBSCRIPTION_FIELDS:
                merged[key] += s[key]
            merged["earliestMsgPublishTimeInBacklog"] = _earliest(
                [merged["earliestMsgPublishTimeInBacklog"], s["earliestMsgPublishTimeInBacklog"]]
            )
            merged["consumers"].extend(s["consumers"])
    total["subscriptions"] = subs
    total["metadata"] = {"partitions": count}
    total["partitions"] = partitions if per_partition else {}
    return total


def _ranges_str(cursor: ManagedCursor) -> str:
    parts = [f"({a[0]}:{a[1]}..{b[0]}:{b[1]}]" for a, b in cursor.state.acked.ranges()]
    return "[" + ",".join(parts) + "]"


def internal_stats(topic: Topic) -> dict[str, Any]:
    """PersistentTopicInternalStats of a loaded topic."""
    ml = topic.ml
    ledgers = ml.ledgers
    last = ledgers.last_segment
    cursors: dict[str, Any] = {}
    for name, cursor in sorted(ml.cursors.items()):
        state = cursor.state
        cursors[name] = {
            "markDeletePosition": position_str(state.mark_delete),
            "readPosition": position_str(state.read_position),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": ledgers.messages_between(
                ledgers.previous_position(ledgers.first_position), state.mark_delete
            )
            if state.mark_delete >= ledgers.first_position
            else 0,
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": _ranges_str(cursor),
            "lastLedgerSwitchTimestamp": "",
            "state": "Open" if cursor.durable else "NoLedger",
            "numberOfEntriesSinceFirstNotAckedMessage": ledgers.entries_between(
                state.mark_delete, ledgers.previous_position(ledgers.normalize(state.read_position))
            )
            if state.read_position > state.mark_delete
            else 0,
            "totalNonContiguousDeletedMessagesRange": _ranges_count(cursor),
            "properties": {},
        }
    return {
        "entriesAddedCounter": ml.stats_added,
        "numberOfEntries": ledgers.total_entries,
        "totalSize": ledgers.total_size_bytes,
        "currentLedgerEntries": 0 if last is None else last.entries,
        "currentLedgerSize": 0 if last is None else last.size_bytes,
        "lastLedgerCreatedTimestamp": "" if last is None else iso_time(last.created_ms),
        "lastLedgerCreationFailureTimestamp": None,
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": position_str(ml.last_confirmed),
        "state": "Terminated" if ml.is_terminated else "LedgerOpened",
        "ledgers": [
            {
                "ledgerId": seg.ledger_id,
                "entries": seg.entries,
                "size": seg.size_bytes,
                "timestamp": seg.created_ms,
                "offloaded": seg.offloaded,
                "metadata": None,
                "underReplicated": False,
            }
            for seg in ledgers
        ],
        "cursors": cursors,
        "schemaLedgers": [],
        "compactedLedger": {
            "ledgerId": -1,
            "entries": -1,
            "size": -1,
            "offloaded": False,
            "underReplicated": False,
        },
    }
