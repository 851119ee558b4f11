"""The OpenMessaging Benchmark's workloads and result keys, against Magnetar and any
Pulsar-protocol peer, in the same run.

Each workload keeps its OpenMessaging Benchmark (OMB) name and shape (topics, partitions
per topic, message size, subscriptions per topic, producer rate; ``producerRate`` 0 is OMB's
"max rate"). The load is ``broker.py``'s raw-protocol generator (``run_raw``: one producer
per topic, the producers spread over eight connections as OMB's Pulsar drivers'
``connectionsPerBroker: 8`` spreads them, each connection with a window of 500 SENDs in
flight, paced every millisecond when a rate is set; one exclusive consumer per subscription,
spread likewise over eight connections of their own), so the generator, not a client
library, is the cheap side. A one-topic workload has one producer, so one connection;
``--connections-per-broker 1`` puts every producer on one connection and every consumer on
another, as this script did before. Every SEND carries its send time
(``perf_counter_ns``, 8 bytes big-endian, at the start of the entry's first message payload,
the entry's CRC32C recomputed), and the consumer reads it back from each delivered MESSAGE:
end-to-end latency is delivery minus that stamp (one process, one clock). Publish latency
is SEND written to SEND_RECEIPT read.

``--sustainable-rate`` runs the max-rate workloads as OMB runs them: OMB does not publish as
fast as it can but controls the rate towards the fastest the consumers keep up with
(``omb_rate.py``), and the figures are those of the window after a warm-up. Without it, the
producers publish as fast as their windows allow, and a broker whose consumers fall behind
(a growing ``endToEndLatency``, ``excessDeliveries``) still shows its whole publish rate.

Workloads (``--workloads``, comma-separated; all by default):

- ``1-topic-1-partition-100b``: OMB's file, 50 000 msg/s, unbatched (OMB's Pulsar driver
  batches with a 1 ms delay; unbatched is the per-message cost this project tracks);
- ``max-rate-1-topic-1-partition-100b``: OMB's file, producer rate 0 (as fast as the
  window allows), unbatched;
- ``max-rate-1-topic-1-partition-100b-batched``: the same, the producer batching 100
  messages per entry (as OMB's Pulsar driver does; issue 39's batched target: at least the
  peer's rate);
- ``100-topics-1-partition-100b``: OMB's ``100-topics-1-partitions-1kb`` at 100 B with one
  subscription, max rate, unbatched: the aggregate rate over 100 topics (issue 39's target:
  at least 0.9 of the one-topic max rate);
- ``1-topic-1-partition-100b-100-subscriptions``: one topic, 100 subscriptions (fan-out),
  15 000 msg/s produced in batches of 100 (1.5 M deliveries/s offered): ``consumeRate``
  counts deliveries (issue 39's target: ≥ 1 M/s).

Consumers acknowledge cumulatively every ``--ack-every`` messages (100 unbatched, 1000
batched by default: a broker may redeliver what stays unacknowledged, which shows as
``excessDeliveries``). Durations are seconds (``--seconds``, 10 by default);
``--omb-durations`` runs each for its OMB ``testDurationMinutes`` instead. Each workload runs against a fresh broker (a new
``magnetar standalone``; a new ``pulsar-lite`` with ``--peer pulsar-lite``) or on new topics
of an external broker (``--peer pulsar://host:port``). With ``--peer`` both Magnetar and
the peer run, alternating for ``--rounds`` rounds (medians), and the table shows
Magnetar/peer ratios (rates: higher is better; latencies: lower is better). Usage::

    python benchmarks/omb.py [--workloads A,B] [--seconds S | --omb-durations]
        [--peer pulsar-lite|pulsar://host:port] [--peer-only] [--rounds N] [--ack-every N]

Writes ``benchmarks/results/omb.json``: one OMB ``TestResult`` per workload, driver and
round (OMB's keys: ``publishRate``, ``consumeRate``, ``backlog``, ``publishLatencyAvg`` …
``publishLatency9999pct``, ``publishLatencyMax``, ``endToEndLatency*``, their
``aggregated*`` forms; latencies in ms, rates per second; the per-period lists hold one
period, the whole run), plus ``brokerCpuUsPerMessage`` and the load average where the
broker is a local process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import crc32c
import uvloop
from broker import (  # this directory: the script's own
    cpu_s,
    median,
    process_tree,
    start_standalone,
)
from omb_rate import START_RATE, RateController  # this directory: the script's own
from peers import Broker, External, PulsarLite  # this directory: the script's own
from raw_generator import (  # this directory: the script's own
    SendFrames,
    entry_for,
    run_raw,
)

from magnetar.bookie.gc_tuning import tune_gc_for_serving
from magnetar.testing import StandaloneProcess

CONNECTIONS_PER_BROKER = 8
"""OMB's Pulsar drivers' ``connectionsPerBroker``: producers spread over this many
connections (each with its own window), and consumers over as many of their own."""
_STAMP = struct.Struct(">Q")
_CRC = struct.Struct(">I")
_CRC_AT = 2  # the entry's magic (2 bytes), then its CRC32C of everything after it
QUANTILES = (("50pct", 0.5), ("75pct", 0.75), ("95pct", 0.95), ("99pct", 0.99),
             ("999pct", 0.999), ("9999pct", 0.9999))  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """One OMB workload file's fields (those the raw generator honours)."""

    name: str
    topics: int
    message_size: int
    subscriptions_per_topic: int
    producer_rate: int  # messages per second in all; 0: maximum
    batched: bool
    test_duration_minutes: float
    partitions_per_topic: int = 1
    producers_per_topic: int = 1
    consumer_per_subscription: int = 1


WORKLOADS = {
    w.name: w
    for w in (
        Workload("1-topic-1-partition-100b", 1, 100, 1, 50_000, False, 15),
        Workload("max-rate-1-topic-1-partition-100b", 1, 100, 1, 0, False, 5),
        Workload("max-rate-1-topic-1-partition-100b-batched", 1, 100, 1, 0, True, 5),
        Workload("100-topics-1-partition-100b", 100, 100, 1, 0, False, 5),
        Workload("1-topic-1-partition-100b-100-subscriptions", 1, 100, 100, 15_000, True, 5),
    )
}


class StampedFrames:
    """``SendFrames`` whose every SEND carries its send time in the entry's first message
    payload (its first 8 bytes), with the entry's checksum recomputed; ``stamp_from_end``
    locates the stamp in a delivered MESSAGE frame, which ends with the stored entry."""

    def __init__(self, size: int, batched: bool) -> None:
        if size < _STAMP.size:
            raise SystemExit(f"message size {size}: the send time needs {_STAMP.size} bytes")
        entry, per_send = entry_for(size, batched)
        self._frames = SendFrames(entry, per_send)
        self.per_send = per_send
        self._stamp_at = entry.index(b"x" * size)  # the first message's payload
        self.stamp_from_end = len(entry) - self._stamp_at

    def frame(self, producer_id: int, sequence_id: int) -> tuple[bytes, bytes]:
        head, entry = self._frames.frame(producer_id, sequence_id)
        stamped = bytearray(entry)
        _STAMP.pack_into(stamped, self._stamp_at, time.perf_counter_ns())
        _CRC.pack_into(stamped, _CRC_AT, crc32c.crc32c(memoryview(stamped)[_CRC_AT + 4 :]))
        return head, stamped  # type: ignore[return-value]  # writelines takes a bytearray


class EndToEnd:
    """Collects delivery time minus the stamped send time of every delivered MESSAGE."""

    def __init__(self, stamp_from_end: int) -> None:
        self.stamp_from_end = stamp_from_end
        self.latencies_ns: list[int] = []

    def __call__(self, frame: memoryview) -> None:
        (sent,) = _STAMP.unpack_from(frame, len(frame) - self.stamp_from_end)
        self.latencies_ns.append(time.perf_counter_ns() - sent)


def latency_keys(prefix: str, seconds: list[float]) -> dict[str, float]:
    """OMB's ``<prefix>Avg``, ``<prefix>50pct`` … ``9999pct`` (nearest rank) and
    ``<prefix>Max``, in ms, of ``seconds``."""
    if not seconds:
        return {}
    ordered = sorted(seconds)
    n = len(ordered)
    out = {f"{prefix}Avg": sum(ordered) / n * 1000}
    for name, q in QUANTILES:
        out[f"{prefix}{name}"] = ordered[min(n - 1, max(0, math.ceil(n * q) - 1))] * 1000
    out[f"{prefix}Max"] = ordered[-1] * 1000
    return out


class MagnetarStandalone(Broker):
    """A fresh ``magnetar standalone`` (this tree's code) on a temporary data directory."""

    def __enter__(self) -> Broker:
        self._tmp = tempfile.TemporaryDirectory()
        self._node: StandaloneProcess = start_standalone(Path(self._tmp.name) / "data", None)
        assert self._node.proc is not None
        self.pid = self._node.proc.pid
        self.port = self._node.port
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._node.stop()
        self._tmp.cleanup()


def tree_cpu_s(pid: int) -> float:
    total = 0.0
    for p in process_tree(pid):
        try:
            total += cpu_s(p)
        except OSError:  # it ended meanwhile
            continue
    return total


def run_workload(
    w: Workload,
    broker: Broker,
    seconds: float,
    ack_every: int | None = None,
    connections: int = CONNECTIONS_PER_BROKER,
    consume: bool = True,
    sustainable_warmup_s: float | None = None,
) -> dict[str, object]:
    """One OMB ``TestResult`` of ``w`` against ``broker`` (already started); each consumer
    acknowledges cumulatively every ``ack_every`` messages (by default every 100 unbatched,
    every 10 entries batched: OMB's consumers acknowledge every message, and a broker may
    redeliver what stays unacknowledged; the raw consumer decodes only what it acknowledges).
    The producers are spread over ``connections`` connections (one topic: one), the
    consumers over as many of their own; with ``consume`` false there are no consumers
    (the producers' rate alone). With ``sustainable_warmup_s``, a workload of
    ``producerRate`` 0 runs as OMB runs it (:mod:`omb_rate`: the rate controlled towards
    the maximum the consumers keep up with, from 10,000 msg/s) and is measured for
    ``seconds`` after that warm-up; otherwise it publishes as fast as its windows allow."""
    frames = StampedFrames(w.message_size, w.batched)
    if ack_every is None:
        ack_every = max(100, 10 * frames.per_send)
    stamp = time.time_ns()
    topics = [f"persistent://public/default/omb-{w.name}-{stamp}-{i}" for i in range(w.topics)]
    publish: list[float] = []
    e2e = EndToEnd(frames.stamp_from_end)
    rate = w.producer_rate / frames.per_send if w.producer_rate else None
    controller = None
    warmup_s = 0.0
    if sustainable_warmup_s is not None and not w.producer_rate:
        controller = RateController()
        rate = START_RATE / frames.per_send
        warmup_s = sustainable_warmup_s
    cpu0 = tree_cpu_s(broker.pid) if broker.pid else 0.0
    r = uvloop.run(
        run_raw(broker.port, topics, frames, seconds, rate,  # type: ignore[arg-type]
                host=broker.host, subscriptions=w.subscriptions_per_topic,
                publish_latencies=publish, on_delivery=e2e, drain_s=max(60.0, seconds),
                undrained_ok=True, ack_every=ack_every, connections=connections,
                consume=consume, rate_controller=controller, warmup_s=warmup_s,
                on_warmup_end=e2e.latencies_ns.clear)
    )  # fmt: skip
    result: dict[str, object] = {
        "workload": w.name,
        "driver": broker.driver,
        "messageSize": w.message_size,
        "topics": w.topics,
        "partitions": w.partitions_per_topic,
        "producersPerTopic": w.producers_per_topic,
        "consumersPerTopic": w.subscriptions_per_topic * w.consumer_per_subscription,
        "producerRate": w.producer_rate,
        "batched": w.batched,
        "testDurationSeconds": seconds,
        "connectionsPerBroker": connections,
        "publishRate": [r["produce_msg_per_s"]],
        "consumeRate": [r["consume_msg_per_s"]],
        "backlog": [int(r.get("undrained_messages", 0))],
        "excessDeliveries": int(r.get("excess_deliveries", 0)),
    }
    if controller is not None:
        result["warmupDurationSeconds"] = warmup_s
        result["finalProducerRate"] = r["final_rate_msg_per_s"]
    for prefix, values in (
        ("publishLatency", publish),
        ("endToEndLatency", [ns / 1e9 for ns in e2e.latencies_ns]),
    ):
        for key, value in latency_keys(prefix, values).items():
            result[key] = [value]
            result["aggregated" + key[0].upper() + key[1:]] = value
    if broker.pid:
        result["brokerCpuUsPerMessage"] = (tree_cpu_s(broker.pid) - cpu0) / r["messages"] * 1e6
    result["loadAverage1m"] = os.getloadavg()[0]
    return result


def fresh(driver: str, peer: str | None) -> Broker:
    if driver == "magnetar":
        return MagnetarStandalone()
    assert peer is not None
    return PulsarLite() if peer == "pulsar-lite" else External(peer)


TABLE_KEYS = (
    "publishRate", "consumeRate", "backlog", "excessDeliveries", "publishLatency50pct", "publishLatency99pct",
    "publishLatency999pct", "publishLatency9999pct", "publishLatencyMax",
    "endToEndLatency50pct", "endToEndLatency99pct", "endToEndLatency999pct",
    "endToEndLatency9999pct", "brokerCpuUsPerMessage",
)  # fmt: skip


def figure(result: dict[str, object], key: str) -> float | None:
    value = result.get(key)
    if isinstance(value, list):
        value = value[0]
    return float(value) if isinstance(value, int | float) else None


def medians(runs: list[dict[str, object]], key: str) -> float | None:
    values = [v for r in runs if (v := figure(r, key)) is not None]
    return median(values) if values else None


def report(names: list[str], drivers: list[str], runs: list[dict[str, object]]) -> None:
    """The medians per workload and driver, with the first driver's over the second's."""
    cell = "{:>14}"
    print(f"{'figure (median of rounds)':34}" + "".join(cell.format(d[:14]) for d in drivers)
          + (cell.format("ratio") if len(drivers) == 2 else ""))  # fmt: skip
    by: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in runs:
        by.setdefault((str(r["workload"]), str(r["driver"])), []).append(r)
    for name in names:
        print(name)
        for key in TABLE_KEYS:
            values = [medians(by.get((name, d), []), key) for d in drivers]
            if all(v is None for v in values):
                continue
            line = f"  {key:32}" + "".join(
                cell.format(
                    "-" if v is None else f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:.3f}"
                )
                for v in values
            )
            a, b = values[0], values[-1]
            if len(drivers) == 2 and a is not None and b:
                line += cell.format(f"{a / b:.2f}")
            print(line)
    one, many = "max-rate-1-topic-1-partition-100b", "100-topics-1-partition-100b"
    fan = "1-topic-1-partition-100b-100-subscriptions"
    for d in drivers:
        single, aggregate = (
            medians(by.get((one, d), []), "publishRate"),
            medians(by.get((many, d), []), "publishRate"),
        )
        if single and aggregate:
            print(f"{d}: 100-topic aggregate / 1-topic max rate = {aggregate / single:.2f} "
                  "(target ≥ 0.9)")  # fmt: skip
        deliveries = medians(by.get((fan, d), []), "consumeRate")
        if deliveries:
            print(f"{d}: fan-out deliveries/s = {deliveries:,.0f} (target ≥ 1,000,000)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="comma-separated OMB workload names (default: all)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=10.0, help="each workload's duration")
    parser.add_argument("--omb-durations", action="store_true",
                        help="run each workload for its OMB testDurationMinutes instead")  # fmt: skip
    parser.add_argument("--peer", default=None, metavar="URL",
                        help="also run against this Pulsar-protocol broker: pulsar-lite (started "
                        "fresh per workload) or pulsar://host:port (already running)")  # fmt: skip
    parser.add_argument("--peer-only", action="store_true", help="run the peer only")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds (medians)")
    parser.add_argument("--connections-per-broker", type=int, default=CONNECTIONS_PER_BROKER,
                        metavar="N", help="producer connections, topics spread over them, and "
                        "as many consumer connections (default: OMB's Pulsar driver's 8; 1: "
                        "every producer on one, every consumer on another)")  # fmt: skip
    parser.add_argument("--ack-every", type=int, default=None, metavar="N",
                        help="each consumer acknowledges cumulatively every N messages "
                        "(default: 100 unbatched, 1000 batched)")  # fmt: skip
    parser.add_argument("--produce-only", action="store_true",
                        help="no subscriptions: the producers' rate alone (a peer whose "
                        "consumers fall behind then measures the same work)")  # fmt: skip
    parser.add_argument("--sustainable-rate", action="store_true",
                        help="run the max-rate workloads as OMB does: the publish rate "
                        "controlled towards the fastest the consumers keep up with, "
                        "measured after --warmup-seconds")  # fmt: skip
    parser.add_argument("--warmup-seconds", type=float, default=30.0,
                        help="with --sustainable-rate: the warm-up before the measured "
                        "window (the rate doubles every 3 s from 10,000 msg/s)")  # fmt: skip
    args = parser.parse_args()
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    if args.peer_only and args.peer is None:
        parser.error("--peer-only needs --peer")
    drivers = [] if args.peer_only else ["magnetar"]
    if args.peer is not None:
        if args.peer != "pulsar-lite":
            External(args.peer)  # a malformed URL fails before any run
        drivers.append("pulsar-lite" if args.peer == "pulsar-lite" else args.peer)
    tune_gc_for_serving()  # the generator's per-message objects too: off the collector
    runs: list[dict[str, object]] = []
    load_before = os.getloadavg()
    for round_no in range(1, args.rounds + 1):
        for name in names:
            w = WORKLOADS[name]
            seconds = w.test_duration_minutes * 60 if args.omb_durations else args.seconds
            for driver in drivers:
                print(f"round {round_no}/{args.rounds}: {name} on {driver}", file=sys.stderr,
                      flush=True)  # fmt: skip
                with fresh(driver, args.peer) as broker:
                    result = run_workload(
                        w, broker, seconds, args.ack_every, args.connections_per_broker,
                        consume=not args.produce_only,
                        sustainable_warmup_s=args.warmup_seconds if args.sustainable_rate
                        else None,
                    )  # fmt: skip
                result["driver"] = driver
                result["round"] = round_no
                runs.append(result)
    report(names, drivers, runs)
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} "
          f"({os.cpu_count()} cores)")  # fmt: skip
    out = Path(__file__).parent / "results" / "omb.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"loadAverageBefore": load_before, "loadAverageAfter": load_after,
                               "cpus": os.cpu_count(), "results": runs}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
