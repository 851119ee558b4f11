"""The ``replication`` object of topic stats, Pulsar's ``ReplicatorStats`` per remote
cluster: outbound from this topic's replicators (rates of what the remote receipted, the
replication backlog, the connection), inbound from the remote clusters' replicator
producers on this topic (``pulsar.repl.<remote>--><local>``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from magnetar.replication.manager import ReplicationManager
from magnetar.replication.persistent_replicator import (
    CURSOR_PREFIX,
    PersistentReplicator,
    cursor_name,
)

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _empty() -> dict[str, Any]:
    return {
        "msgRateIn": 0.0,
        "msgThroughputIn": 0.0,
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "msgOutCounter": 0,
        "bytesOutCounter": 0,
        "msgRateExpired": 0.0,
        "replicationBacklog": 0,
        "connected": False,
        "replicationDelayInSeconds": 0,
        "inboundConnection": None,
        "inboundConnectedSince": None,
        "outboundConnection": None,
        "outboundConnectedSince": None,
    }


def _outbound(stats: dict[str, Any], replicator: PersistentReplicator) -> None:
    meter = replicator.stats.msg_out
    connected = replicator.connected
    stats.update(
        msgRateOut=meter.rate(),
        msgThroughputOut=meter.throughput(),
        msgOutCounter=meter.total_count,
        bytesOutCounter=meter.total_bytes,
        replicationBacklog=replicator.backlog_messages,
        connected=connected,
        outboundConnection=replicator.stats.remote_url if connected else None,
        outboundConnectedSince=_iso(replicator.stats.connected_since_ms) if connected else None,
        replicationDelayInSeconds=replicator.delay_s(),
    )


def replication_stats(topic: Topic) -> dict[str, dict[str, Any]]:
    """``{remote cluster: ReplicatorStats}`` of ``topic`` on this broker. Message TTL moves
    the replication cursor as it moves subscriptions'; what it expired there is the
    ``msgRateExpired`` (the topic counts expiries per cursor name)."""
    result: dict[str, dict[str, Any]] = {}
    for hook in topic.service.topic_hooks:
        if isinstance(hook, ReplicationManager):
            for remote, replicator in sorted(hook.replicators_of(topic.full_name).items()):
                stats = result.setdefault(remote, _empty())
                _outbound(stats, replicator)
                meters = topic.subscription_meters.get(cursor_name(remote))
                if meters is not None:
                    stats["msgRateExpired"] = meters.expired.rate()
    local = topic.service.config.cluster_name
    for producer in topic.producers.values():
        name = producer.name
        suffix = f"-->{local}"
        if not (name.startswith(CURSOR_PREFIX) and name.endswith(suffix)):
            continue
        remote = name[len(CURSOR_PREFIX) : -len(suffix)]
        stats = result.setdefault(remote, _empty())
        stats.update(
            msgRateIn=producer.meters.msg_in.rate(),
            msgThroughputIn=producer.meters.msg_in.throughput(),
            inboundConnection=f"/{producer.connection.address}",
            inboundConnectedSince=_iso(producer.connected_since_ms),
        )
    return result


_SUMMED = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgOutCounter",
    "bytesOutCounter",
    "msgRateExpired",
    "replicationBacklog",
)


def merged_replication(partitions: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The ``replication`` object of a partitioned topic from its partitions': rates,
    counters and backlogs summed, ``connected`` only if every partition's replicator is,
    the largest delay; the connection fields of the first partition that has them."""
    merged: dict[str, dict[str, Any]] = {}
    for replication in partitions:
        for remote, stats in replication.items():
            total = merged.get(remote)
            if total is None:
                merged[remote] = dict(stats)
                continue
            for key in _SUMMED:
                total[key] += stats[key]
            total["connected"] = total["connected"] and stats["connected"]
            total["replicationDelayInSeconds"] = max(
                total["replicationDelayInSeconds"], stats["replicationDelayInSeconds"]
            )
            for key in ("inbound", "outbound"):
                if total[f"{key}Connection"] is None:
                    total[f"{key}Connection"] = stats[f"{key}Connection"]
                    total[f"{key}ConnectedSince"] = stats[f"{key}ConnectedSince"]
    return merged
