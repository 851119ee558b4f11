"""Tiered storage throughput: offload rate, cold reads from the object store against
catch-up reads from bookies, and the broker's CPU per offloaded MB.

Usage: ``.venv/bin/python benchmarks/offload.py [--mb 64] [--drivers aws-s3,filesystem]``

For each driver, a ``magnetar standalone`` (broker and bookie in one process) with that
driver (``aws-s3``: moto's S3 server as its own process on loopback; ``filesystem``: a
directory), ledgers of 500 entries, deletion lag 0. In one run, on one topic of 10 KB
messages (one entry each, produced by the official client):

* catch-up read from the bookies: a new subscription reads the whole topic before offload;
* offload: ``PUT …/offload`` of every closed ledger, timed until ``GET …/offload`` says
  SUCCESS, with the standalone's CPU time over that span (``/proc``; it includes the
  bookie's reads of the ledgers, part of what an offload costs);
* cold read from the object store: once the bookie copies are deleted, a new subscription
  reads the whole topic again (the offloader's block cache holds nothing of it yet).

Prints a table and writes ``benchmarks/results/offload.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar

from magnetar.admin_client import AdminClient
from magnetar.testing import StandaloneProcess
from magnetar.testing.s3_server import S3Server

RESULTS = Path(__file__).with_name("results") / "offload.json"
MESSAGE_BYTES = 10_000
TOPIC = "public/default/offload-bench"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _produce(url: str, count: int) -> None:
    client = pulsar.Client(url)
    try:
        client.subscribe(
            f"persistent://{TOPIC}", "hold", initial_position=pulsar.InitialPosition.Earliest
        ).close()
        producer = client.create_producer(
            f"persistent://{TOPIC}",
            batching_enabled=False,
            max_pending_messages=2000,
            block_if_queue_full=True,
        )
        payload = os.urandom(MESSAGE_BYTES)
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()
    finally:
        client.close()


def _read_mb_s(url: str, count: int) -> float:
    client = pulsar.Client(url)
    try:
        consumer = client.subscribe(
            f"persistent://{TOPIC}",
            f"read-{uuid.uuid4().hex[:6]}",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=2000,
        )
        started = time.perf_counter()
        for _ in range(count):
            consumer.acknowledge(consumer.receive(timeout_millis=60_000))
        elapsed = time.perf_counter() - started
        return count * MESSAGE_BYTES / 1e6 / elapsed
    finally:
        client.close()


def _wait(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


def bench_driver(driver: str, mb: int, work: Path, s3: S3Server | None) -> dict[str, float]:
    if driver == "filesystem":
        args = ["--offload-driver", "filesystem", "--offload-directory", str(work / "tier")]
    else:
        assert s3 is not None
        bucket = f"bench-{uuid.uuid4().hex[:6]}"
        s3.create_bucket(bucket)
        args = [
            "--offload-driver", "aws-s3", "--offload-bucket", bucket,
            "--offload-endpoint", s3.endpoint, "--offload-region", "us-east-1",
        ]  # fmt: skip
    count = mb * 1_000_000 // MESSAGE_BYTES
    with StandaloneProcess(
        work / f"data-{driver}",
        *args,
        "--offload-deletion-lag-ms", "0",
        "--managed-ledger-max-entries-per-ledger", "500",
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
    ) as node:  # fmt: skip
        assert node.proc is not None
        admin = AdminClient(node.http_url, timeout_s=60)
        base = f"/admin/v2/persistent/{TOPIC}"
        _produce(node.url, count)
        catch_up = _read_mb_s(node.url, count)
        ledgers = admin.get(f"{base}/internal-info")["ledgerInfo"]
        offloaded_mb = sum(x["size"] for x in ledgers[:-1]) / 1e6
        cpu_before = _cpu_s(node.proc.pid)
        started = time.perf_counter()
        admin.put(f"{base}/offload", {"ledgerId": ledgers[-1]["ledgerId"], "entryId": 0})
        status = _wait(
            lambda: (s := admin.get(f"{base}/offload"))["status"] in ("SUCCESS", "ERROR") and s,
            600,
            "offload",
        )
        elapsed = time.perf_counter() - started
        cpu = _cpu_s(node.proc.pid) - cpu_before
        if status["status"] != "SUCCESS":
            raise SystemExit(f"offload failed: {status['lastError']}")
        _wait(
            lambda: all(
                x.get("offloadContext", {}).get("bookkeeperDeleted")
                for x in admin.get(f"{base}/internal-info")["ledgerInfo"][:-1]
            ),
            60,
            "bookie copies deleted",
        )
        cold = _read_mb_s(node.url, count)
    return {
        f"{driver}_offload_mb_per_s": offloaded_mb / elapsed,
        f"{driver}_broker_cpu_s_per_offloaded_mb": cpu / offloaded_mb,
        f"{driver}_catch_up_read_from_bookies_mb_per_s": catch_up,
        f"{driver}_cold_read_from_object_store_mb_per_s": cold,
        f"{driver}_offloaded_mb": offloaded_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64, help="MB produced per driver")
    parser.add_argument("--drivers", default="aws-s3,filesystem")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write JSON")
    args = parser.parse_args()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        drivers = args.drivers.split(",")
        s3 = S3Server(work / "moto.log") if "aws-s3" in drivers else None
        if s3 is not None:
            s3.start()
            os.environ.update(S3Server.env())
        try:
            for driver in drivers:
                results |= bench_driver(driver, args.mb, work, s3)
        finally:
            if s3 is not None:
                s3.stop()
    for key, value in results.items():
        print(f"{key:55s} {value:10.3f}")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
