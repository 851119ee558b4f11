"""The Functions Worker: throughput and added latency of an identity function, instance start
time, and leader failover time. Everything runs as real processes on this machine: one
``magnetar standalone`` (without its own worker) and ``magnetar functions-worker`` processes
with the process runtime (one subprocess per instance, their default); the official
``pulsar`` client produces and consumes.

* throughput: ``--messages`` inputs (batched, sent as fast as the client goes) through an
  identity function with one instance, from the first send to the last output received,
  at-least-once and effectively-once;
* added latency: ``--latency-messages`` inputs sent one at a time; per message, output
  receive time minus input send time, against the same measured straight through a topic
  (produce → consume, no function): p50 and p99 of both and their difference;
* instance start: from the create request to the status showing the instance running
  (package fetched, subprocess started, client connected, subscribed), ``--starts`` times;
* leader failover: two workers; the leader is killed with SIGKILL; the time until the next
  leader's marker record is read from the ``assignments`` topic (it writes that before it
  changes any assignment), and until the dead worker's instances are assigned to the
  survivor (this one includes ``--reschedule-grace-ms``).

Usage: ``python benchmarks/functions.py [--messages N] [--latency-messages N] [--starts N]``.
Prints the figures and writes ``benchmarks/results/functions.json``. Never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pulsar

from magnetar.testing import StandaloneProcess, wait_until

IDENTITY = b"def process(input):\n    return input\n"
STEP_TIMEOUT_S = 120.0


class Worker:
    def __init__(self, node: StandaloneProcess, work: Path, worker_id: str, *args: str) -> None:
        self.worker_id = worker_id
        cmd = [
            sys.executable, "-m", "magnetar.functions", "--worker-id", worker_id, "--port", "0",
            "--work-dir", str(work / worker_id), "--service-url", node.url,
            "--admin-url", node.http_url, *args,
        ]  # fmt: skip
        self.log = open(work / f"{worker_id}.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "joined workerId:host:port"
        if not line.startswith("joined "):
            raise RuntimeError(f"worker {worker_id} did not join: {line!r}")
        _, host, port = line.split()[1].rsplit(":", 2)
        self.url = f"http://{host}:{port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.log.close()


def admin(url: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", url,
         "--output", "json", *args],
        capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"admin {' '.join(args)}: {done.stderr.strip()}")
    return json.loads(done.stdout) if done.stdout.strip() else None


def create_identity(
    url: str, package: Path, name: str, guarantee: str, parallelism: int = 1
) -> None:
    admin(
        url, "functions", "create", "--name", name, "--py", str(package),
        "--classname", "identity.process", "--inputs", f"{name}-in", "--output", f"{name}-out",
        "--processing-guarantees", guarantee, "--parallelism", str(parallelism),
    )  # fmt: skip


def wait_running(url: str, name: str, instances: int = 1) -> None:
    def running() -> bool:
        try:
            return bool(
                admin(url, "functions", "status", "--name", name)["numRunning"] == instances
            )
        except RuntimeError:
            return False

    wait_until(running, STEP_TIMEOUT_S, interval_s=0.05, what=f"{name} running")


def leads(worker: Worker) -> bool:
    try:
        return bool(admin(worker.url, "functions-worker", "get-cluster-leader"))
    except RuntimeError:
        return False


def percentiles(values_ms: list[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
    }


def throughput(client: pulsar.Client, name: str, count: int) -> float:
    consumer = client.subscribe(f"{name}-out", "bench")
    producer = client.create_producer(
        f"{name}-in", batching_enabled=True, batching_max_publish_delay_ms=5,
        max_pending_messages=10_000, block_if_queue_full=True,
    )  # fmt: skip
    payload = b"x" * 100
    t0 = time.perf_counter()
    for _ in range(count):
        producer.send_async(payload, None)
    producer.flush()
    for _ in range(count):
        consumer.acknowledge(consumer.receive(60_000))
    elapsed_s = time.perf_counter() - t0
    producer.close()
    consumer.close()
    return round(count / elapsed_s)


def latencies(client: pulsar.Client, topic_in: str, topic_out: str, count: int) -> list[float]:
    consumer = client.subscribe(topic_out, "bench-latency")
    producer = client.create_producer(topic_in, batching_enabled=False)
    out = []
    for i in range(count):
        t0 = time.perf_counter()
        producer.send(str(i).encode())
        msg = consumer.receive(60_000)
        out.append((time.perf_counter() - t0) * 1000)
        consumer.acknowledge(msg)
    producer.close()
    consumer.close()
    return out


def failover(node: StandaloneProcess, work: Path, package: Path) -> dict[str, float]:
    base = f"persistent://public/functions/bench-{uuid.uuid4().hex[:8]}"
    topics = [
        "--coordination-topic", f"{base}-coordinate", "--assignments-topic", f"{base}-assignments",
        "--metadata-topic", f"{base}-metadata", "--packages-topic", f"{base}-packages",
        "--reschedule-grace-ms", "1000",
    ]  # fmt: skip
    workers = [Worker(node, work, f"f{i}", *topics) for i in range(2)]
    try:

        def leader() -> Worker | None:
            try:
                got = admin(workers[0].url, "functions-worker", "get-cluster-leader")
            except RuntimeError:  # no leader yet
                return None
            return next((w for w in workers if w.worker_id == got.get("workerId")), None)

        first = wait_until(leader, STEP_TIMEOUT_S, what="a leader")
        create_identity(first.url, package, "spread", "ATLEAST_ONCE", parallelism=4)
        survivor = next(w for w in workers if w is not first)
        wait_running(survivor.url, "spread", 4)
        status = admin(survivor.url, "functions", "status", "--name", "spread")
        pending = {
            f"public/default/spread:{i['instanceId']}"
            for i in status["instances"]
            if i["status"]["workerId"] == first.worker_id
        }
        marker_ms = reassigned_ms = -1.0
        with closing(pulsar.Client(node.url)) as client:
            reader = client.create_reader(f"{base}-assignments", pulsar.MessageId.latest)
            t0 = time.perf_counter()
            first.proc.send_signal(signal.SIGKILL)
            while pending:
                msg = reader.read_next(int(STEP_TIMEOUT_S * 1000))
                now_ms = (time.perf_counter() - t0) * 1000
                key = msg.partition_key()
                if key == "__leader__":
                    marker_ms = now_ms if marker_ms < 0 else marker_ms
                elif msg.data() and json.loads(msg.data()).get("workerId") == survivor.worker_id:
                    pending.discard(key)
            reassigned_ms = (time.perf_counter() - t0) * 1000
            reader.close()
        return {
            "new_leader_marker_ms": round(marker_ms),
            "instances_reassigned_ms": round(reassigned_ms),
            "reschedule_grace_ms": 1000,
        }
    finally:
        for w in workers:
            w.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--latency-messages", type=int, default=300)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--work-dir", default=None, help="kept (default: a temporary one)")
    args = parser.parse_args()
    results: dict[str, Any] = {"load_average_1m_before": os.getloadavg()[0],
                               "cpus": os.cpu_count() or 0, "runtime": "process"}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        package = work / "identity.py"
        package.write_bytes(IDENTITY)
        with StandaloneProcess(work / "data", "--no-functions-worker") as node:
            worker = Worker(node, work, "w1")
            try:
                wait_until(lambda: leads(worker), STEP_TIMEOUT_S, what="the worker leads")
                starts = []
                for i in range(args.starts):
                    t0 = time.perf_counter()
                    create_identity(worker.url, package, f"start{i}", "ATLEAST_ONCE")
                    wait_running(worker.url, f"start{i}")
                    starts.append((time.perf_counter() - t0) * 1000)
                    admin(worker.url, "functions", "delete", "--name", f"start{i}")
                results["instance_start_ms"] = {
                    "median": round(statistics.median(starts)),
                    "min": round(min(starts)),
                    "max": round(max(starts)),
                }
                with closing(pulsar.Client(node.url)) as client:
                    for guarantee, name in (("ATLEAST_ONCE", "alo"), ("EFFECTIVELY_ONCE", "eo")):
                        create_identity(worker.url, package, name, guarantee)
                        wait_running(worker.url, name)
                        results[f"throughput_{name}_msgs_per_s"] = throughput(
                            client, name, args.messages
                        )
                    through = latencies(client, "alo-in", "alo-out", args.latency_messages)
                    direct = latencies(client, "direct", "direct", args.latency_messages)
                    results["latency_through_function_ms"] = percentiles(through)
                    results["latency_direct_ms"] = percentiles(direct)
                    results["latency_added_ms"] = {
                        k: round(results["latency_through_function_ms"][k] - v, 2)
                        for k, v in results["latency_direct_ms"].items()
                    }
            finally:
                worker.stop()
            results["failover"] = failover(node, work, package)
    results["load_average_1m_after"] = os.getloadavg()[0]
    results["messages"] = args.messages
    results["latency_messages"] = args.latency_messages
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results" / "functions.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
