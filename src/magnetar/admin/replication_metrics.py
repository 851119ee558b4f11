"""Geo-replication in ``/metrics``, Pulsar's ``pulsar_replication_*`` families per topic and
remote cluster (labels ``cluster``, ``namespace``, ``topic``, ``remote_cluster``), from the
same numbers as topic stats' ``replication`` (:mod:`magnetar.replication.stats`):
``pulsar_replication_rate_in``, ``…_rate_out``, ``…_throughput_in``, ``…_throughput_out``,
``…_backlog``, ``…_connected_count`` (1 while the replicator is connected),
``…_rate_expired`` and ``…_delay_in_seconds``. Topics that replicate nowhere add nothing."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.admin.context import AdminContext
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
