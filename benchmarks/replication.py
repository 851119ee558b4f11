"""Geo-replication between two ``magnetar standalone`` processes on this machine (clusters
``east`` and ``west``, registered with each other, a namespace replicated to both with
deduplication on), with the official client (batched producers):

1. throughput, per message size (100 B and 1 KiB): a producer in ``east`` publishes as
   fast as it can for ``--seconds``; the source's publish rate is messages over the time
   until the last receipt; the replication rate is the same messages over the time until
   ``west``'s topic stats count them all in (``msgInCounter``, polled every 50 ms), both
   from the first send. Printed as msg/s and as the fraction replication / publish.
2. replication delay at half the lower of the two rates (so the backlog stays bounded):
   a producer in ``east`` paced at that rate, a consumer in ``west``; the delay of a
   message is the time ``west``'s consumer receives it minus its publish time in ``east``
   (the replicated metadata keeps it), both read from this machine's clock: p50 and p99.
3. the same delay at a low rate (``--floor-rate``, 500 msg/s): what a message waits when
   nothing queues, the floor under the figure of 2.

Usage::

    python benchmarks/replication.py [--seconds S] [--sizes 100,1024] [--delay-seconds S]
        [--floor-rate MSG_PER_S]

Writes ``benchmarks/results/replication.json``. Both standalones, the client and the
replicators share the machine's cores, so the figures are lower bounds for clusters on
separate machines.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar

from magnetar.testing import StandaloneProcess

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)
POLL_S = 0.05
DRAIN_TIMEOUT_S = 300.0


def rest(base: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def setup(east: StandaloneProcess, west: StandaloneProcess) -> str:
    """Register the clusters with each other; a replicated namespace on both."""
    for node, name, other in ((east, "west", west), (west, "east", east)):
        rest(node.http_url, "PUT", f"/admin/v2/clusters/{name}",
             {"serviceUrl": other.http_url, "brokerServiceUrl": other.url})  # fmt: skip
    ns = f"bench{uuid.uuid4().hex[:6]}/geo"
    for node in (east, west):
        rest(node.http_url, "PUT", f"/admin/v2/tenants/{ns.split('/')[0]}",
             {"adminRoles": [], "allowedClusters": ["east", "west"]})  # fmt: skip
        rest(node.http_url, "PUT", f"/admin/v2/namespaces/{ns}")
        rest(node.http_url, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
        rest(node.http_url, "POST", f"/admin/v2/namespaces/{ns}/replication", ["east", "west"])
    return ns


def msg_in(node: StandaloneProcess, topic: str) -> int:
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    try:
        return int(rest(node.http_url, "GET", path).get("msgInCounter", 0))
    except OSError:
        return 0  # not loaded there yet


def throughput(
    east: StandaloneProcess, west: StandaloneProcess, ns: str, size: int, seconds: float
) -> dict[str, float]:
    topic = f"persistent://{ns}/tput-{size}-{uuid.uuid4().hex[:6]}"
    payload = b"x" * size
    west_client = pulsar.Client(west.url, logger=_log)
    east_client = pulsar.Client(east.url, logger=_log)
    try:
        west_client.subscribe(topic, "keep").close()  # the topic exists in west
        producer = east_client.create_producer(
            topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=10_000
        )
        sent = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(1000):
                producer.send_async(payload, None)
            sent += 1000
        producer.flush()
        published_s = time.perf_counter() - t0
        deadline = t0 + DRAIN_TIMEOUT_S
        while msg_in(west, topic) < sent:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"west did not get {sent} messages in {DRAIN_TIMEOUT_S} s")
            time.sleep(POLL_S)
        replicated_s = time.perf_counter() - t0
    finally:
        east_client.close()
        west_client.close()
    publish_rate, replication_rate = sent / published_s, sent / replicated_s
    return {
        f"batched_{size}B_messages": float(sent),
        f"batched_{size}B_source_publish_msg_per_s": publish_rate,
        f"batched_{size}B_replication_msg_per_s": replication_rate,
        f"batched_{size}B_replication_fraction_of_publish": replication_rate / publish_rate,
    }


def delay(
    east: StandaloneProcess, west: StandaloneProcess, ns: str, size: int, rate: float,
    seconds: float, tag: str = "",
) -> dict[str, float]:  # fmt: skip
    topic = f"persistent://{ns}/delay-{size}-{uuid.uuid4().hex[:6]}"
    payload = b"x" * size
    total = int(rate * seconds)
    west_client = pulsar.Client(west.url, logger=_log)
    east_client = pulsar.Client(east.url, logger=_log)
    delays_ms: list[float] = []
    try:
        consumer = west_client.subscribe(topic, "delay", receiver_queue_size=5000)
        producer = east_client.create_producer(
            topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=10_000
        )
        failed: list[pulsar.Result] = []

        def sent(result: pulsar.Result, _: object) -> None:
            if result != pulsar.Result.Ok:
                failed.append(result)

        def consume() -> None:
            while len(delays_ms) < total:
                try:
                    msg = consumer.receive(timeout_millis=30_000)
                except pulsar.Timeout:
                    return
                delays_ms.append(time.time() * 1000 - msg.publish_timestamp())
                consumer.acknowledge(msg)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        t0 = time.perf_counter()
        for i in range(total):
            ahead_s = t0 + i / rate - time.perf_counter()
            if ahead_s > 0:
                time.sleep(ahead_s)
            producer.send_async(payload, sent)
        producer.flush()
        if failed:
            raise RuntimeError(f"{len(failed)} sends failed in east: {failed[0]}")
        reader.join(DRAIN_TIMEOUT_S)
    finally:
        east_client.close()
        west_client.close()
    if len(delays_ms) < total:
        raise RuntimeError(f"west received {len(delays_ms)} of {total} messages")
    quantiles = statistics.quantiles(delays_ms, n=100)
    return {
        f"batched_{size}B_delay_rate_msg_per_s{tag}": rate,
        f"batched_{size}B_replication_delay_p50_ms{tag}": quantiles[49],
        f"batched_{size}B_replication_delay_p99_ms{tag}": quantiles[98],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="publishing per size")
    parser.add_argument("--sizes", default="100,1024", help="message sizes in bytes")
    parser.add_argument("--delay-seconds", type=float, default=10.0, help="paced run per size")
    parser.add_argument("--floor-rate", type=float, default=500.0, help="0: skip the floor run")
    args = parser.parse_args()
    out = Path(__file__).parent / "results" / "replication.json"
    out.parent.mkdir(exist_ok=True)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="magnetar-repl-bench-") as tmp:
        base = Path(tmp)
        with (
            StandaloneProcess(base / "east", "--cluster-name", "east",
                              "--no-functions-worker") as east,
            StandaloneProcess(base / "west", "--cluster-name", "west",
                              "--no-functions-worker") as west,
        ):  # fmt: skip
            ns = setup(east, west)
            for size in (int(x) for x in args.sizes.split(",")):
                figures = throughput(east, west, ns, size, args.seconds)
                results.update(figures)
                rate = min(
                    figures[f"batched_{size}B_source_publish_msg_per_s"],
                    figures[f"batched_{size}B_replication_msg_per_s"],
                )
                results.update(delay(east, west, ns, size, rate / 2, args.delay_seconds))
                if args.floor_rate:
                    results.update(
                        delay(east, west, ns, size, args.floor_rate, args.delay_seconds, "_floor")
                    )
    for k, v in results.items():
        print(f"{k:52} {v:14.3f}")
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
