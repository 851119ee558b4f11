"""Prometheus ``/metrics`` (text format) with Pulsar's metric names where they exist.

Collected on request, on the event loop (the broker is single-threaded), from the loaded
topics' meters:

* per topic (labels ``cluster``, ``namespace``, ``topic``): ``pulsar_rate_in``,
  ``pulsar_rate_out``, ``pulsar_throughput_in``, ``pulsar_throughput_out``,
  ``pulsar_producers_count``, ``pulsar_consumers_count``, ``pulsar_subscriptions_count``,
  ``pulsar_msg_backlog``, ``pulsar_storage_size``, ``pulsar_storage_backlog_size``,
  ``pulsar_in_messages_total``, ``pulsar_in_bytes_total``, ``pulsar_out_messages_total``,
  ``pulsar_out_bytes_total``, and the write latency buckets
  ``pulsar_storage_write_latency_le_0_5`` … ``_le_1000``, ``_overflow``, ``_count``, ``_sum``;
* per subscription (plus label ``subscription``): ``pulsar_subscription_back_log``,
  ``pulsar_subscription_msg_rate_out``, ``pulsar_subscription_msg_throughput_out``,
  ``pulsar_subscription_unacked_messages``, ``pulsar_subscription_consumers_count``,
  ``pulsar_subscription_msg_rate_redeliver``;
* per broker (label ``cluster``), Pulsar's broker-level families: ``pulsar_broker_topics_count``,
  ``…_subscriptions_count``, ``…_producers_count``, ``…_consumers_count``, ``…_rate_in``,
  ``…_rate_out``, ``…_throughput_in``, ``…_throughput_out``, ``…_storage_size``,
  ``…_msg_backlog`` (sums over the topics this broker serves);
* broker-wide: ``pulsar_active_connections``, ``pulsar_topics_count``,
  ``pulsar_broker_throttled_connections_global_limit`` (connections stopped by the publish
  buffer's bound), ``magnetar_publish_buffer_used_bytes`` and ``magnetar_publish_buffer_full_total``,
  and ``magnetar_publish_latency_ms`` — a proper histogram over every loaded topic;
* per topic and remote cluster, ``pulsar_replication_*``
  (:mod:`magnetar.admin.replication_metrics`);
* per topic, tiered storage: ``pulsar_storage_offloaded_size`` and ``brk_ledgeroffloader_*``
  (:mod:`magnetar.admin.offload_metrics`);
* the host's extra collectors (standalone: ``bookie_journal_sync_latency_seconds``,
  a summary of the bookie journal's write+fdatasync time), and ``process_*``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from magnetar.admin.context import AdminContext
from magnetar.admin.offload_metrics import OffloadCollector
from magnetar.admin.replication_metrics import ReplicationCollector
from magnetar.admin.topic_stats import subscription_names
from magnetar.common.latency import LATENCY_BOUNDS_MS, LatencyHistogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TOPIC_LABELS = ["cluster", "namespace", "topic"]
_SUB_LABELS = [*_TOPIC_LABELS, "subscription"]
_BROKER_FAMILIES = {
    "topics_count": "Topics this broker serves",
    "subscriptions_count": "Subscriptions of the topics this broker serves",
    "producers_count": "Producers connected to this broker",
    "consumers_count": "Consumers connected to this broker",
    "rate_in": "Messages/s published to this broker",
    "rate_out": "Messages/s dispatched by this broker",
    "throughput_in": "Bytes/s published to this broker",
    "throughput_out": "Bytes/s dispatched by this broker",
    "storage_size": "Bytes stored for the topics this broker serves",
    "msg_backlog": "Messages in the backlogs of the topics this broker serves",
}
"""Pulsar's broker-level families (``pulsar_broker_*``, label ``cluster``): the sums over
this broker's topics, so a cluster's brokers can be compared without adding up topics."""


def _bound_name(bound: float) -> str:
    return f"{bound:g}".replace(".", "_")


class BrokerCollector(Collector):
    """Everything the broker of ``ctx`` knows, collected at scrape time."""

    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        ctx = self.ctx
        cluster = ctx.cluster
        g: dict[str, GaugeMetricFamily] = {}
        c: dict[str, CounterMetricFamily] = {}

        def gauge(name: str, doc: str, labels: list[str] = _TOPIC_LABELS) -> GaugeMetricFamily:
            fam = g.get(name)
            if fam is None:
                fam = g[name] = GaugeMetricFamily(name, doc, labels=labels)
            return fam

        def counter(name: str, doc: str) -> CounterMetricFamily:
            fam = c.get(name)
            if fam is None:
                fam = c[name] = CounterMetricFamily(name, doc, labels=_TOPIC_LABELS)
            return fam

        total_latency = LatencyHistogram()
        broker_totals = dict.fromkeys(_BROKER_FAMILIES, 0.0)
        topics = ctx.service.loaded_topics()
        for topic in topics:
            ns = f"{topic.name.tenant}/{topic.name.namespace}"
            lv = [cluster, ns, topic.full_name]
            meters = topic.meters
            ml = topic.ml
            subs = []
            for name in subscription_names(topic):
                sub = topic.subscriptions.get(name)
                cursor = sub.cursor if sub is not None else ml.cursors[name]
                subs.append((name, sub, cursor))
            rate_out = throughput_out = 0.0
            out_msgs = out_bytes = 0
            consumers = 0
            backlog = 0
            for name, sub, cursor in subs:
                sm = topic.subscription_meters.get(name)
                sub_rate = sm.msg_out.rate() if sm else 0.0
                sub_throughput = sm.msg_out.throughput() if sm else 0.0
                rate_out += sub_rate
                throughput_out += sub_throughput
                if sm is not None:
                    out_msgs += sm.msg_out.total_count
                    out_bytes += sm.msg_out.total_bytes
                sub_consumers = list(sub.consumers.values()) if sub is not None else []
                consumers += len(sub_consumers)
                sub_backlog = cursor.backlog_messages
                backlog += sub_backlog
                slv = [*lv, name]
                gauge(
                    "pulsar_subscription_back_log", "Messages in the backlog", _SUB_LABELS
                ).add_metric(slv, sub_backlog)
                gauge(
                    "pulsar_subscription_msg_rate_out", "Messages/s dispatched", _SUB_LABELS
                ).add_metric(slv, sub_rate)
                gauge(
                    "pulsar_subscription_msg_throughput_out", "Bytes/s dispatched", _SUB_LABELS
                ).add_metric(slv, sub_throughput)
                gauge(
                    "pulsar_subscription_unacked_messages",
                    "Messages sent, not acknowledged",
                    _SUB_LABELS,
                ).add_metric(slv, sum(sum(x.pending.values()) for x in sub_consumers))
                gauge(
                    "pulsar_subscription_consumers_count", "Connected consumers", _SUB_LABELS
                ).add_metric(slv, len(sub_consumers))
                gauge(
                    "pulsar_subscription_msg_rate_redeliver", "Messages/s redelivered", _SUB_LABELS
                ).add_metric(slv, sum(x.meters.redeliver.rate() for x in sub_consumers))
            gauge("pulsar_rate_in", "Messages/s published").add_metric(lv, meters.msg_in.rate())
            gauge("pulsar_throughput_in", "Bytes/s published").add_metric(
                lv, meters.msg_in.throughput()
            )
            gauge("pulsar_rate_out", "Messages/s dispatched").add_metric(lv, rate_out)
            gauge("pulsar_throughput_out", "Bytes/s dispatched").add_metric(lv, throughput_out)
            gauge("pulsar_producers_count", "Connected producers").add_metric(
                lv, len(topic.producers)
            )
            gauge("pulsar_consumers_count", "Connected consumers").add_metric(lv, consumers)
            gauge("pulsar_subscriptions_count", "Subscriptions").add_metric(lv, len(subs))
            gauge("pulsar_msg_backlog", "Messages in all subscriptions' backlogs").add_metric(
                lv, backlog
            )
            gauge("pulsar_storage_size", "Bytes stored").add_metric(lv, ml.ledgers.total_size_bytes)
            for family, value in (
                ("subscriptions_count", len(subs)),
                ("producers_count", len(topic.producers)),
                ("consumers_count", consumers),
                ("rate_in", meters.msg_in.rate()),
                ("rate_out", rate_out),
                ("throughput_in", meters.msg_in.throughput()),
                ("throughput_out", throughput_out),
                ("storage_size", ml.ledgers.total_size_bytes),
                ("msg_backlog", backlog),
            ):
                broker_totals[family] += value
            durable = [cur for _, _, cur in subs if cur.durable]
            slowest = min(durable, key=lambda cur: cur.state.mark_delete, default=None)
            gauge("pulsar_storage_backlog_size", "Bytes in the slowest backlog").add_metric(
                lv, 0 if slowest is None else ml.backlog_size_bytes(slowest)
            )
            counter("pulsar_in_messages", "Messages published").add_metric(
                lv, meters.msg_in.total_count
            )
            counter("pulsar_in_bytes", "Bytes published").add_metric(lv, meters.msg_in.total_bytes)
            counter("pulsar_out_messages", "Messages dispatched").add_metric(lv, out_msgs)
            counter("pulsar_out_bytes", "Bytes dispatched").add_metric(lv, out_bytes)
            hist = ml.add_latency
            total_latency.merge(hist)
            for bound, count in zip(LATENCY_BOUNDS_MS, hist.counts, strict=False):
                gauge(
                    f"pulsar_storage_write_latency_le_{_bound_name(bound)}",
                    f"Writes within {bound} ms",
                ).add_metric(lv, count)
            gauge("pulsar_storage_write_latency_overflow", "Writes over 1 s").add_metric(
                lv, hist.counts[-1]
            )
            gauge("pulsar_storage_write_latency_count", "Writes").add_metric(lv, hist.count)
            gauge("pulsar_storage_write_latency_sum", "Total write latency (ms)").add_metric(
                lv, hist.sum_ms
            )
        yield from g.values()
        yield from c.values()
        yield GaugeMetricFamily(
            "pulsar_topics_count", "Topics loaded on this broker", value=len(topics)
        )
        broker_totals["topics_count"] = len(topics)
        for family, doc in _BROKER_FAMILIES.items():
            fam = GaugeMetricFamily(f"pulsar_broker_{family}", doc, labels=["cluster"])
            fam.add_metric([cluster], broker_totals[family])
            yield fam
        yield GaugeMetricFamily(
            "pulsar_active_connections", "Client connections", value=ctx.service.connection_count
        )
        cache = ctx.service.entry_cache_budget
        yield GaugeMetricFamily(
            "pulsar_ml_cache_used_size",
            "Bytes the tailing-read caches of all topics hold (managedLedgerCacheSizeMB bounds it)",
            value=cache.size_bytes,
        )
        yield CounterMetricFamily(
            "magnetar_ml_cache_evicted_bytes",
            "Bytes dropped from the tailing-read caches because they were full",
            value=cache.evicted_bytes,
        )
        publish = ctx.service.publish_buffer
        throttled = GaugeMetricFamily(
            "pulsar_broker_throttled_connections_global_limit",
            "Connections not read because the bytes of publishes in flight passed "
            "maxMessagePublishBufferSizeInMB",
            labels=["cluster"],
        )
        throttled.add_metric([cluster], publish.stopped)
        yield throttled
        yield GaugeMetricFamily(
            "magnetar_publish_buffer_used_bytes",
            "Bytes of publishes handed to storage and not yet answered, broker-wide",
            value=publish.held_bytes,
        )
        yield CounterMetricFamily(
            "magnetar_publish_buffer_full",
            "Times the bytes of publishes in flight passed maxMessagePublishBufferSizeInMB",
            value=publish.full_times,
        )
        yield CounterMetricFamily(
            "magnetar_connections_refused",
            "Client connections refused over brokerMaxConnections(PerIp)",
            value=ctx.service.connection_limiter.refused_total,
        )
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        for bound, count in zip(LATENCY_BOUNDS_MS, total_latency.counts, strict=False):
            cumulative += count
            buckets.append((f"{bound:g}", cumulative))
        buckets.append(("+Inf", total_latency.count))
        yield HistogramMetricFamily(
            "magnetar_publish_latency_ms",
            "Time from receiving a SEND to its entry being stored (ms)",
            buckets=buckets,
            sum_value=total_latency.sum_ms,
        )


class JournalCollector(Collector):
    """The bookie journal's sync time, from ``journal()`` (``None`` while not started)."""

    def __init__(self, journal: Callable[[], Any]) -> None:
        self.journal = journal

    def collect(self) -> Iterator[Metric]:
        journal = self.journal()
        if journal is None:
            return
        yield SummaryMetricFamily(
            "bookie_journal_sync_latency_seconds",
            "Time to write and fdatasync a journal batch",
            count_value=journal.syncs,
            sum_value=journal.sync_seconds_total,
        )


def registry_for(ctx: AdminContext) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(ctx))
    registry.register(ReplicationCollector(ctx))
    registry.register(OffloadCollector(ctx))
    for collector in ctx.collectors:
        registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
