"""Geo-replication in ``/metrics``, Pulsar's ``pulsar_replication_*`` families per topic and
remote cluster (labels ``cluster``, ``namespace``, ``topic``, ``remote_cluster``), from the
same numbers as topic stats' ``replication`` (:mod:`magnetar.replication.stats`):
``pulsar_replication_rate_in``, ``…_rate_out``, ``…_throughput_in``, ``…_throughput_out``,
``…_backlog``, ``…_connected_count`` (1 while the replicator is connected),
``…_rate_expired`` and ``…_delay_in_seconds``. Topics that replicate nowhere add nothing.
Replicated subscriptions add ``pulsar_replicated_subscriptions_pending_snapshots`` and
``pulsar_replicated_subscriptions_timedout_snapshots`` (broker-wide, as Pulsar's)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.admin.context import AdminContext
from magnetar.replication.manager import ReplicationManager
from magnetar.replication.stats import replication_stats

_LABELS = ["cluster", "namespace", "topic", "remote_cluster"]
_FAMILIES = (
    ("pulsar_replication_rate_in", "msgRateIn", "Messages/s received from the remote cluster"),
    ("pulsar_replication_rate_out", "msgRateOut", "Messages/s replicated to the remote cluster"),
    ("pulsar_replication_throughput_in", "msgThroughputIn", "Bytes/s received from it"),
    ("pulsar_replication_throughput_out", "msgThroughputOut", "Bytes/s replicated to it"),
    ("pulsar_replication_backlog", "replicationBacklog", "Messages not yet replicated"),
    ("pulsar_replication_connected_count", "connected", "1 while the replicator is connected"),
    ("pulsar_replication_rate_expired", "msgRateExpired", "Messages/s expired unreplicated"),
    ("pulsar_replication_delay_in_seconds", "replicationDelayInSeconds", "Replication delay"),
)


class ReplicationCollector(Collector):
    """The replication families of ``ctx``'s broker, collected at scrape time."""

    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(name, doc, labels=_LABELS) for name, _, doc in _FAMILIES
        }
        cluster = self.ctx.cluster
        for topic in self.ctx.service.loaded_topics():
            ns = f"{topic.name.tenant}/{topic.name.namespace}"
            for remote, stats in replication_stats(topic).items():
                labels = [cluster, ns, topic.full_name, remote]
                for name, field, _ in _FAMILIES:
                    families[name].add_metric(labels, float(stats[field]))
        yield from families.values()
        yield from _snapshot_families(self.ctx)


def _snapshot_families(ctx: AdminContext) -> Iterator[Metric]:
    """Replicated subscriptions' snapshots of this broker's topics (Pulsar's names, no
    labels): pending now, and timed out since the topics loaded."""
    controllers = [
        c for hook in ctx.service.topic_hooks if isinstance(hook, ReplicationManager)
        for c in hook.controllers()
    ]  # fmt: skip
    pending = GaugeMetricFamily(
        "pulsar_replicated_subscriptions_pending_snapshots",
        "Replicated subscriptions' snapshots started and not complete",
        value=sum(c.core.pending for c in controllers),
    )
    timed_out = CounterMetricFamily(
        "pulsar_replicated_subscriptions_timedout_snapshots",
        "Replicated subscriptions' snapshots that timed out",
        value=sum(c.core.timed_out_total for c in controllers),
    )
    yield pending
    yield timed_out
