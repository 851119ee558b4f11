"""Topic stats JSON (``GET …/stats``, ``…/partitioned-stats``, ``…/internalStats``) with
Pulsar's field names and shapes (reference §8.3): ``publishers`` a list, ``subscriptions``
an object keyed by name, ``consumers`` a list, ``replication`` an object.

Rates come from the broker's sliding-window meters (:mod:`magnetar.broker.stats`).
Fields Magnetar has no counterpart for are present with Pulsar's neutral value (0, false,
empty, null) so clients that read them keep working.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from magnetar.broker.consumer import SUB_TYPE_NAMES, Consumer
from magnetar.broker.stats import SubscriptionMeters
from magnetar.broker.subscription import Subscription
from magnetar.broker.topic import Topic
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.position import Position

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
    """Subscriptions of a topic: those with a live object and every stored durable cursor."""
    names = set(topic.subscriptions)
    names.update(name for name, c in topic.ml.cursors.items() if c.durable)
    return sorted(names)


def subscription_meters(topic: Topic, name: str) -> SubscriptionMeters:
    meters = topic.subscription_meters.get(name)
    if meters is None:
        meters = topic.subscription_meters.setdefault(name, SubscriptionMeters(topic.service.clock))
    return meters


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
        "avgMessagesPerEntry": (m.msg_out.total_count // m.entries_out) if m.entries_out else 0,
        "blockedConsumerOnUnackedMsgs": False,
        "lastAckedTimestamp": m.ack.last_record_ms,
        "lastConsumedTimestamp": m.msg_out.last_record_ms,
        "lastConsumedFlowTimestamp": m.flow.last_record_ms,
        "readPositionWhenJoining": None,
        "address": f"/{conn.address}",
        "connectedSince": iso_time(consumer.connected_since_ms),
        "clientVersion": conn.client_version,
        "keyHashRanges": None if ranges is None else [f"[{a}, {b}]" for a, b in ranges],
        "metadata": {},
    }


def _ranges_count(cursor: ManagedCursor) -> int:
    return sum(1 for _ in cursor.state.acked.ranges())


def subscription_stats(topic: Topic, name: str) -> dict[str, Any]:
    """One SubscriptionStats object. ``name`` must be in :func:`subscription_names`."""
    sub = topic.subscriptions.get(name)
    cursor = sub.cursor if sub is not None else topic.ml.cursors[name]
    meters = subscription_meters(topic, name)
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
        "earliestMsgPublishTimeInBacklog": 0,
        "isDurable": cursor.durable,
        "isReplicated": False,
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
                "metadata": {},
                "supportsPartialProducer": False,
            }
        )
    return result


def topic_stats(topic: Topic, owner_broker: str) -> dict[str, Any]:
    """One TopicStats object for a loaded topic (or one partition)."""
    ml = topic.ml
    meters = topic.meters
    subs = {name: subscription_stats(topic, name) for name in subscription_names(topic)}
    rate_in = meters.msg_in.rate()
    throughput_in = meters.msg_in.throughput()
    durable = [c for c in ml.cursors.values() if c.durable]
    slowest = min(durable, key=lambda c: c.state.mark_delete, default=None)
    cfg = ml.config
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
        "storageSize": ml.ledgers.total_size_bytes,
        "offloadedStorageSize": sum(s.size_bytes for s in ml.ledgers if s.offloaded),
        "backlogSize": 0 if slowest is None else ml.backlog_size_bytes(slowest),
        "earliestMsgPublishTimeInBacklogs": 0,
        "oldestBacklogMessageAgeSeconds": -1,
        "oldestBacklogMessageSubscriptionName": None,
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
        "replication": {},
    }


_SUMMED_TOPIC_FIELDS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "bytesInCounter",
    "msgInCounter",
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
