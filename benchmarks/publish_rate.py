"""Publish rate limits: accuracy over 10 s, and isolation of another tenant.

One ``magnetar standalone`` process; tenants ``noisy`` and ``quiet`` with a namespace each;
``noisy/ns`` gets a publish rate of ``--limit`` msg/s per topic. Measured with
``magnetar perf produce`` processes (each its own process and core share):

1. baseline: ``quiet`` publishes at ``--quiet-rate`` msg/s alone, its latency recorded;
2. contended: the same, while ``noisy`` publishes as fast as it can (asking ``--noisy-rate``)
   to one topic; ``noisy``'s accepted rate is read from the broker's topic stats
   (``msgInCounter`` over the run) and compared with the limit;
3. dispatch: ``noisy/ns`` gets a subscription dispatch rate of ``--dispatch-limit`` msg/s and
   ``magnetar perf consume`` reads the flood topic's backlog from the start; the dispatched
   rate is the subscription's ``msgOutCounter`` over the run, compared with the limit.

Usage::

    python benchmarks/publish_rate.py [--seconds 10] [--limit 2000] [--quiet-rate 200]
        [--dispatch-limit 1000]

Prints both runs and writes ``benchmarks/results/publish_rate.json``. Figures depend on the
machine's load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from magnetar.testing import StandaloneProcess


def rest(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def perf(
    node: StandaloneProcess, topic: str, rate: int, seconds: float, out: Path
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "magnetar.cli.main", "perf", "produce", topic,
        "--service-url", node.url, "-r", str(rate), "-time", str(seconds),
        "-i", "60", "--json-file", str(out), "--output", "json",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_consume(
    node: StandaloneProcess, topic: str, seconds: float, out: Path
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "magnetar.cli.main", "perf", "consume", topic,
        "--service-url", node.url, "-s", "bench", "-sp", "earliest", "-time", str(seconds),
        "-i", "60", "--json-file", str(out), "--output", "json",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--quiet-rate", type=int, default=200)
    parser.add_argument("--noisy-rate", type=int, default=50_000)
    parser.add_argument("--dispatch-limit", type=int, default=1000)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, StandaloneProcess(Path(tmp) / "data") as node:
        base = f"{node.http_url}/admin/v2"
        for tenant in ("noisy", "quiet"):
            rest("PUT", f"{base}/tenants/{tenant}", {"allowedClusters": ["standalone"]})
            rest("PUT", f"{base}/namespaces/{tenant}/ns", {})
        rate = {"publishThrottlingRateInMsg": opts.limit, "publishThrottlingRateInByte": -1}
        rest("POST", f"{base}/namespaces/noisy/ns/publishRate", rate)
        results: dict[str, Any] = {"limitMsgPerSecond": opts.limit, "seconds": opts.seconds}
        quiet_alone = Path(tmp) / "quiet-alone.json"
        perf(node, "quiet/ns/alone", opts.quiet_rate, opts.seconds, quiet_alone).wait()
        results["quietAlone"] = json.loads(quiet_alone.read_text())
        quiet_with, noisy = Path(tmp) / "quiet-with.json", Path(tmp) / "noisy.json"
        noisy_proc = perf(node, "noisy/ns/flood", opts.noisy_rate, opts.seconds, noisy)
        perf(node, "quiet/ns/contended", opts.quiet_rate, opts.seconds, quiet_with).wait()
        noisy_proc.wait()
        results["quietContended"] = json.loads(quiet_with.read_text())
        results["noisy"] = json.loads(noisy.read_text())
        stats = rest("GET", f"{base}/persistent/noisy/ns/flood/stats")
        results["noisyBroker"] = {
            "msgInCounter": stats["msgInCounter"],
            "publishRateLimitedTimes": stats["publishRateLimitedTimes"],
        }
        dispatch = {"dispatchThrottlingRateInMsg": opts.dispatch_limit}
        rest("POST", f"{base}/namespaces/noisy/ns/subscriptionDispatchRate", dispatch)
        consumed = Path(tmp) / "consume.json"
        perf_consume(node, "noisy/ns/flood", opts.seconds, consumed).wait()
        results["dispatch"] = json.loads(consumed.read_text())
        sub = rest("GET", f"{base}/persistent/noisy/ns/flood/stats")["subscriptions"]["bench"]
        results["dispatchBroker"] = {
            "msgOutCounter": sub["msgOutCounter"],
            "dispatchThrottledMsgEventsBySubscriptionLimit": sub[
                "dispatchThrottledMsgEventsBySubscriptionLimit"
            ],
        }
    results["loadAverage"] = os.getloadavg()
    a, c = results["quietAlone"]["latencyMs"], results["quietContended"]["latencyMs"]
    n = results["noisy"]
    accepted = results["noisyBroker"]["msgInCounter"] / n["elapsedSeconds"]
    results["noisyAcceptedMsgPerSecond"] = round(accepted, 1)
    print(f"limit {opts.limit} msg/s; noisy accepted {accepted:.1f} msg/s over "
          f"{n['elapsedSeconds']:.1f} s ({results['noisyBroker']['msgInCounter']} messages, "
          f"throttled {results['noisyBroker']['publishRateLimitedTimes']} times)")  # fmt: skip
    print(f"quiet p50/p99 ms alone {a['p50']:.2f}/{a['p99']:.2f}, "
          f"with noisy throttled {c['p50']:.2f}/{c['p99']:.2f}; "
          f"load average {results['loadAverage'][0]:.2f}")  # fmt: skip
    d = results["dispatch"]
    dispatched = results["dispatchBroker"]["msgOutCounter"] / d["elapsedSeconds"]
    results["dispatchLimitMsgPerSecond"] = opts.dispatch_limit
    results["dispatchedMsgPerSecond"] = round(dispatched, 1)
    print(f"dispatch limit {opts.dispatch_limit} msg/s; dispatched {dispatched:.1f} msg/s over "
          f"{d['elapsedSeconds']:.1f} s ({results['dispatchBroker']['msgOutCounter']} messages, "
          f"throttled {results['dispatchBroker']['dispatchThrottledMsgEventsBySubscriptionLimit']}"
          " times)")  # fmt: skip
    out = Path(__file__).parent / "results" / "publish_rate.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
