"""Client throughput: magnetar.client against the official pulsar-client wheel, same broker.

Starts ``magnetar standalone`` (free ports, temporary data dir, pinned to core 0), then runs
each measurement in its own process pinned to core 1 (``os.sched_setaffinity``):

* ``magnetar``: ``send_async`` of N x 100-byte messages (batched, one future each), then
  ``flush``; consume = ``receive`` + ``acknowledge`` of the same N;
* ``magnetar_base`` (with ``--baseline-src DIR``): the same, importing ``magnetar`` from
  another source tree (for example a worktree of an older commit) against the same broker,
  for a before/after comparison in one run;
* ``wheel_callback``: the wheel used the usual way, ``send_async(msg, callback)`` with a
  Python callback recording each result, then ``flush``;
* ``wheel_no_callback``: ``send_async(msg, None)`` (no Python callback per message).

Each wheel run also measures receive + acknowledge. Runs are interleaved (each round runs
every role once, in an order rotated from round to round) and the best of the rounds
counts, so load from other processes hits every client alike; only ratios measured in the
same run mean anything on a shared machine. Each child also reports its own CPU time per
message (process time, the wheel's C++ threads included), which moves less with machine
load than the rates do.

Prints msg/s with the ratio to the wheel beside each row, and the targets (producer >= 5x
the wheel's batched publish rate with callbacks, consumer >= 1.5x the wheel's best), and
writes ``benchmarks/results/client.json``.

    .venv/bin/python benchmarks/client.py [--messages 200000] [--runs 3] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PAYLOAD = b"x" * 100
CLIENT_CORE = 1
BROKER_CORE = 0


def pin(core: int, pid: int = 0) -> None:
    """Pin process ``pid`` (0: this one) to ``core`` (ignored on a one-core machine)."""
    if core < (os.cpu_count() or 1):
        os.sched_setaffinity(pid, {core})


async def run_magnetar(url: str, n: int) -> dict[str, float]:
    from magnetar.client import Client, InitialPosition

    topic = f"persistent://public/default/bench-ours-{uuid.uuid4().hex[:8]}"
    async with Client(url) as client:
        consumer = await client.subscribe(
            topic, "bench", initial_position=InitialPosition.Earliest, receiver_queue_size=5000
        )
        producer = await client.create_producer(
            topic, max_pending_messages=n, batching_max_messages=1000
        )
        t0, c0 = time.perf_counter(), time.process_time()
        send = producer.send_async
        for _ in range(n):
            send(PAYLOAD)
        await producer.flush()
        t1, c1 = time.perf_counter(), time.process_time()
        receive, ack = consumer.receive, consumer.acknowledge
        for _ in range(n):
            await ack(await receive())
        t2, c2 = time.perf_counter(), time.process_time()
    return _figures(n, t0, c0, t1, c1, t2, c2)


def _figures(
    n: int, t0: float, c0: float, t1: float, c1: float, t2: float, c2: float
) -> dict[str, float]:
    return {
        "produce_msg_s": n / (t1 - t0),
        "consume_msg_s": n / (t2 - t1),
        "produce_cpu_us_per_msg": (c1 - c0) * 1e6 / n,
        "consume_cpu_us_per_msg": (c2 - c1) * 1e6 / n,
    }


def run_wheel(url: str, n: int, with_callback: bool) -> dict[str, float]:
    import pulsar

    topic = f"persistent://public/default/bench-wheel-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(
        topic, "bench", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=5000
    )
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        max_pending_messages=n,
        block_if_queue_full=True,
    )
    results: list[object] = []
    record = results.append

    def callback(res: object, msg_id: object) -> None:
        record(res)

    t0, c0 = time.perf_counter(), time.process_time()
    if with_callback:
        for _ in range(n):
            producer.send_async(PAYLOAD, callback)
    else:
        for _ in range(n):
            producer.send_async(PAYLOAD, None)
    producer.flush()
    t1, c1 = time.perf_counter(), time.process_time()
    if with_callback:
        assert len(results) == n, f"{len(results)} callbacks for {n} messages"
    for _ in range(n):
        consumer.acknowledge(consumer.receive())
    t2, c2 = time.perf_counter(), time.process_time()
    client.close()
    return _figures(n, t0, c0, t1, c1, t2, c2)


def child(role: str, url: str, n: int) -> None:
    pin(CLIENT_CORE)
    if role in ("magnetar", "magnetar_base"):
        try:
            import uvloop

            result = uvloop.run(run_magnetar(url, n))
        except ImportError:
            result = asyncio.run(run_magnetar(url, n))
    else:
        result = run_wheel(url, n, with_callback=role == "wheel_callback")
    print("RESULT " + json.dumps(result), flush=True)


def measure(role: str, url: str, n: int, baseline_src: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if role == "magnetar_base":
        assert baseline_src is not None
        env["PYTHONPATH"] = baseline_src  # ahead of this tree's editable install
    out = subprocess.run(
        [sys.executable, __file__, "--child", role, "--url", url, "--messages", str(n)],
        capture_output=True, text=True, check=True, timeout=900, env=env,
    )  # fmt: skip
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    result: dict[str, float] = json.loads(line[len("RESULT ") :])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child")
    parser.add_argument("--url")
    parser.add_argument(
        "--baseline-src",
        help="also measure magnetar.client imported from this source directory "
        "(e.g. the src/ of a worktree of an older commit), as magnetar_base",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.messages)
        return

    from magnetar.testing import StandaloneProcess

    baseline_src = args.baseline_src
    if baseline_src is not None:
        baseline_src = str(Path(baseline_src).resolve())
        if not (Path(baseline_src) / "magnetar" / "client").is_dir():
            sys.exit(f"--baseline-src {baseline_src}: no magnetar/client package there")
    roles: tuple[str, ...] = ("magnetar", "wheel_callback", "wheel_no_callback")
    if baseline_src is not None:
        roles = ("magnetar_base", *roles)
    with tempfile.TemporaryDirectory() as tmp:
        node = StandaloneProcess(Path(tmp) / "data")
        node.start()
        try:
            assert node.proc is not None
            pin(BROKER_CORE, node.proc.pid)
            runs: dict[str, list[dict[str, float]]] = {r: [] for r in roles}
            for round_index in range(args.runs):
                # Interleaved, so load changes hit every client alike, and rotated, so no
                # client always follows the same one (the broker's after-effects of a run,
                # such as its own garbage collection, land on whoever comes next).
                shift = round_index % len(roles)
                for role in roles[shift:] + roles[:shift]:
                    runs[role].append(measure(role, node.url, args.messages, baseline_src))
        finally:
            node.kill()
    best = {
        role: {
            "produce_msg_s": max(r["produce_msg_s"] for r in rs),
            "consume_msg_s": max(r["consume_msg_s"] for r in rs),
            "produce_cpu_us_per_msg": min(r["produce_cpu_us_per_msg"] for r in rs),
            "consume_cpu_us_per_msg": min(r["consume_cpu_us_per_msg"] for r in rs),
        }
        for role, rs in runs.items()
    }
    wheel_produce = best["wheel_callback"]["produce_msg_s"]
    wheel_consume = max(
        best["wheel_callback"]["consume_msg_s"], best["wheel_no_callback"]["consume_msg_s"]
    )
    ratios = {
        role: {
            "produce_vs_wheel_callback": r["produce_msg_s"] / wheel_produce,
            "consume_vs_wheel": r["consume_msg_s"] / wheel_consume,
        }
        for role, r in best.items()
    }
    ours = ratios["magnetar"]
    result = {
        "messages": args.messages,
        "payload_bytes": len(PAYLOAD),
        "runs": args.runs,
        "cores": {"client": CLIENT_CORE, "broker": BROKER_CORE},
        "baseline_src": baseline_src,
        "best_of_runs": best,
        "ratios_vs_wheel": ratios,
        "all_runs": runs,
        "produce_ratio_vs_wheel_callback": ours["produce_vs_wheel_callback"],
        "produce_ratio_vs_wheel_no_callback": best["magnetar"]["produce_msg_s"]
        / best["wheel_no_callback"]["produce_msg_s"],
        "consume_ratio_vs_wheel": ours["consume_vs_wheel"],
        "targets": {"produce_ratio_vs_wheel_callback": 5.0, "consume_ratio_vs_wheel": 1.5},
    }
    print(
        f"{'':18s} {'produce msg/s':>14s} {'x wheel':>8s} {'cpu us':>7s}"
        f"   {'consume msg/s':>14s} {'x wheel':>8s} {'cpu us':>7s}"
    )
    for role in roles:
        r, q = best[role], ratios[role]
        print(
            f"{role:18s} {r['produce_msg_s']:>14,.0f} {q['produce_vs_wheel_callback']:>7.2f}x"
            f" {r['produce_cpu_us_per_msg']:>7.2f}"
            f"   {r['consume_msg_s']:>14,.0f} {q['consume_vs_wheel']:>7.2f}x"
            f" {r['consume_cpu_us_per_msg']:>7.2f}"
        )
    print(
        f"magnetar producer: {result['produce_ratio_vs_wheel_callback']:.2f}x the wheel with"
        f" callbacks (target 5x), {result['produce_ratio_vs_wheel_no_callback']:.2f}x without;"
        f" consumer: {result['consume_ratio_vs_wheel']:.2f}x the wheel (target 1.5x)"
    )
    if baseline_src is not None:
        base = best["magnetar_base"]
        print(
            f"magnetar vs magnetar_base ({baseline_src}): produce"
            f" {best['magnetar']['produce_msg_s'] / base['produce_msg_s']:.2f}x,"
            f" consume {best['magnetar']['consume_msg_s'] / base['consume_msg_s']:.2f}x"
        )
    out = Path(__file__).parent / "results" / "client.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
