"""Load shedding with real processes: two ``magnetar broker`` processes with the overload
threshold at 20 % of a core (``--overload-threshold-cpu-percent``; an idle broker uses
2-4 %), their bundles evened out (4 each, so count rebalancing moves nothing); the official
client then produces as fast as it can to a topic of one broker, and ``magnetar perf
produce`` to another topic of the same bundle. That broker's load reports pass the threshold
(``admin broker-stats load-report`` shows it), the controller unloads its busiest bundle —
the busy topic's — onto the other broker, and the producer follows: every acknowledged
message is read back, in order."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.broker.controller import NamespaceBundles
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess

from .bundle_topics import topic_per_bundle
from .test_cluster_processes import cluster_procs, owner_of, start_bookies

__all__ = ["cluster_procs"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(300)

THRESHOLD_PERCENT = 20.0
PENDING_MAX = 500


def metric(broker: BrokerProcess, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def settled(brokers: list[BrokerProcess]) -> bool:
    """Every bundle Owned and 4 of public/default's and public/functions' 8 on each."""
    owned = [metric(b, "magnetar_bundles_owned").get((), 0.0) for b in brokers]
    states: dict[str, float] = {}
    for b in brokers:
        if metric(b, "magnetar_controller_is_leader").get((), 0.0) == 1:
            states = {
                labels[0][1]: v for labels, v in metric(b, "magnetar_controller_bundles").items()
            }
    busy = any(v for state, v in states.items() if state != "Owned")
    return bool(states) and not busy and owned == [4.0, 4.0]


def load_report(broker: BrokerProcess) -> dict[str, Any]:
    """``GET /admin/v2/broker-stats/load-report`` (``{}`` before the first report)."""
    try:
        with urllib.request.urlopen(
            f"{broker.http_url}/admin/v2/broker-stats/load-report", timeout=30
        ) as response:
            report = json.load(response)
    except urllib.error.HTTPError as exc:
        assert exc.code == 404, exc  # not reported yet
        return {}
    assert isinstance(report, dict)
    return report


def cli_load_report(broker: BrokerProcess) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", broker.http_url,
         "broker-stats", "load-report"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert isinstance(report, dict)
    return report


def same_bundle_topic(topic: str) -> str:
    """Another topic of ``topic``'s bundle (of the default 4 of public/default)."""
    bundles = NamespaceBundles.default("public/default")
    wanted = bundles.bundle_for_topic(topic)
    return next(
        name
        for i in range(10_000)
        if (name := f"persistent://public/default/perf-{i}") != topic
        and bundles.bundle_for_topic(name) == wanted
    )


class BusyProducer(threading.Thread):
    """Sends as fast as the broker takes it, at most ``PENDING_MAX`` unacknowledged."""

    def __init__(self, producer: Any) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.stop = threading.Event()
        self.pending = threading.Semaphore(PENDING_MAX)
        self.lock = threading.Lock()
        self.acked: list[int] = []
        self.failed = 0

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            if not self.pending.acquire(timeout=1):
                continue
            self.producer.send_async(b"%010d" % i + b"x" * 90, self._done(i))
            i += 1

    def _done(self, i: int) -> Any:
        def callback(result: Any, _msg_id: Any) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.acked.append(i)
                else:
                    self.failed += 1
            self.pending.release()

        return callback


def test_an_overloaded_broker_sheds_its_busy_bundle(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 2)
    brokers = []
    for i in range(2):
        broker = BrokerProcess(
            zookeeper_url,
            tmp_path / f"broker{i}.log",
            "--overload-threshold-cpu-percent", str(THRESHOLD_PERCENT),
            "--ensemble-size", "2", "--write-quorum", "2", "--ack-quorum", "2",
        )  # fmt: skip
        cluster_procs.append(broker)
        broker.start()
        brokers.append(broker)
    wait_until(lambda: settled(brokers), timeout_s=120, what="4 bundles on each broker")
    config = json.loads(
        urllib.request.urlopen(
            f"{brokers[0].http_url}/admin/v2/brokers/configuration/runtime", timeout=30
        ).read()
    )
    assert config["loadBalancerBrokerOverloadedThresholdPercentage"] == str(THRESHOLD_PERCENT)

    topic = topic_per_bundle("shed")[0]
    busy = owner_of(brokers[0], topic, brokers)
    other = next(b for b in brokers if b is not busy)
    perf = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "perf", "produce", "-u", other.url,
         "-r", "0", "-s", "100", "--disable-batching", "-i", "60", same_bundle_topic(topic)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = pulsar.Client(other.url, operation_timeout_seconds=60)
    try:
        # a subscription keeps what is written (no retention is set) until it is read
        consumer = client.subscribe(topic, "keep", receiver_queue_size=100)
        producer = client.create_producer(
            topic, batching_enabled=False, max_pending_messages=PENDING_MAX, send_timeout_millis=0
        )
        sender = BusyProducer(producer)
        sender.start()
        cpu_seen: list[float] = []
        reports: list[tuple[float, float]] = []

        def moved() -> bool:
            cpu = [float(load_report(b).get("cpu", {}).get("usage", 0.0)) for b in (busy, other)]
            cpu_seen.append(cpu[0])
            if not reports or reports[-1] != tuple(cpu):
                reports.append((cpu[0], cpu[1]))
            return owner_of(brokers[0], topic, brokers) is other

        try:
            wait_until(
                moved, timeout_s=120, interval_s=0.5, what=f"{topic} moved off the busy broker"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; CPU % reported (busy, other): {reports}") from None
        finally:
            sender.stop.set()
            sender.join(timeout=30)
            perf.terminate()
            perf.wait(timeout=30)
        producer.flush()
        assert max(cpu_seen) >= THRESHOLD_PERCENT, cpu_seen
        # the CLI shows the reports the controller went by
        shown = cli_load_report(busy)
        assert shown["brokerId"] == busy.broker_id and shown["cpu"]["limit"] == 100.0
        assert sender.failed == 0
        with sender.lock:
            acked = sorted(sender.acked)
        assert len(acked) > 1_000, "the producer did not get going"
        # the producer followed the bundle: it sends through the new owner
        producer.send(b"after the move")
        stats = json.loads(
            urllib.request.urlopen(
                f"{other.http_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats",
                timeout=30,
            ).read()
        )
        assert stats["publishers"], stats
        # every acknowledged message is there, in order
        seen = []
        while True:
            message = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(message)
            if message.data() == b"after the move":
                break
            seen.append(int(message.data()[:10]))
        first_seen = list(dict.fromkeys(seen))
        assert set(acked) <= set(first_seen), "acknowledged messages lost"
        assert first_seen == sorted(first_seen), "the producer's order was not kept"
    finally:
        client.close()
        if perf.poll() is None:
            perf.kill()
            perf.wait(timeout=30)
