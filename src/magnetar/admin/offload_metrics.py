"""Tiered storage in ``/metrics``, per topic (labels ``cluster``, ``namespace``, ``topic``),
Pulsar's names where it has them (its ``brk_ledgeroffloader_*`` families and
``pulsar_storage_offloaded_size``):

* ``pulsar_storage_offloaded_size`` — bytes of the topic's ledgers held in the object store;
* ``brk_ledgeroffloader_offload_bytes_total`` / ``…_offload_ledgers_total`` — what this
  broker offloaded; ``…_offload_time_seconds_total`` — the time its uploads took (bytes over
  time: the offload rate); ``…_offload_rate`` — that ratio in bytes/s (0 before any);
* ``brk_ledgeroffloader_offload_error_total`` — failed offload attempts;
* ``brk_ledgeroffloader_offload_running`` — 1 while an offload runs;
* ``brk_ledgeroffloader_read_bytes_total`` / ``…_read_entries_total`` /
  ``…_read_error_total`` — reads served by the object store;
* ``brk_ledgeroffloader_read_latency_ms`` — a histogram of those reads' latency.

Topics without offload activity or offloaded data add nothing."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from magnetar.admin.context import AdminContext
from magnetar.common.latency import LATENCY_BOUNDS_MS

_LABELS = ["cluster", "namespace", "topic"]
P = "brk_ledgeroffloader_"


class OffloadCollector(Collector):
    """The tiered-storage families of ``ctx``'s broker, collected at scrape time."""

    def __init__(self, ctx: AdminContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "pulsar_storage_offloaded_size", "Bytes held in tiered storage", labels=_LABELS
        )
        counters = {
            name: CounterMetricFamily(P + name, doc, labels=_LABELS)
            for name, doc in (
                ("offload_bytes", "Bytes offloaded to tiered storage"),
                ("offload_ledgers", "Ledgers offloaded to tiered storage"),
                ("offload_time_seconds", "Time the offloads took"),
                ("offload_error", "Failed offload attempts"),
                ("read_bytes", "Bytes read from tiered storage"),
                ("read_entries", "Entries read from tiered storage"),
                ("read_error", "Failed reads from tiered storage"),
            )
        }
        rate = GaugeMetricFamily(P + "offload_rate", "Bytes/s of the offloads", labels=_LABELS)
        running = GaugeMetricFamily(
            P + "offload_running", "1 while an offload runs", labels=_LABELS
        )
        latency = HistogramMetricFamily(
            P + "read_latency_ms", "Latency of reads from tiered storage (ms)", labels=_LABELS
        )
        cluster = self.ctx.cluster
        for topic in self.ctx.service.loaded_topics():
            ml = topic.ml
            made = ml.offloads_if_made
            offloaded = sum(s.size_bytes for s in ml.ledgers if s.offloaded)
            if not offloaded and (
                made is None or (made.status.value == "NOT_RUN" and not made.read_entries_total)
            ):
                continue
            o = ml.offloads
            labels = [cluster, f"{topic.name.tenant}/{topic.name.namespace}", topic.full_name]
            size.add_metric(labels, offloaded)
            for name, value in (
                ("offload_bytes", o.offloaded_bytes_total),
                ("offload_ledgers", o.offloaded_ledgers_total),
                ("offload_time_seconds", o.offload_seconds_total),
                ("offload_error", o.offload_errors_total),
                ("read_bytes", o.read_bytes_total),
                ("read_entries", o.read_entries_total),
                ("read_error", o.read_errors_total),
            ):
                counters[name].add_metric(labels, value)
            seconds = o.offload_seconds_total
            rate.add_metric(labels, o.offloaded_bytes_total / seconds if seconds > 0 else 0.0)
            running.add_metric(labels, 1 if o.running else 0)
            hist = o.read_latency
            buckets: list[tuple[str, float]] = []
            cumulative = 0
            for bound, count in zip(LATENCY_BOUNDS_MS, hist.counts, strict=False):
                cumulative += count
                buckets.append((f"{bound:g}", cumulative))
            buckets.append(("+Inf", hist.count))
            latency.add_metric(labels, buckets, hist.sum_ms)
        yield size
        yield from counters.values()
        yield rate
        yield running
        yield latency
