"""Client throughput: magnetar.client against the official pulsar-client wheel, same broker.

Starts ``magnetar standalone`` (free ports, temporary data dir, pinned to core 0), then runs
each measurement in its own process pinned to core 1 (``os.sched_setaffinity``):

* ``magnetar``: ``send_async`` of N x 100-byte messages (batched, one future each), then
  ``flush``; consume = ``receive`` + ``acknowledge`` of the same N;
* ``wheel_callback``: the wheel used the usual way, ``send_async(msg, callback)`` with a
  Python callback recording each result, then ``flush``;
* ``wheel_no_callback``: ``send_async(msg, None)`` (no Python callback per message).

Each wheel run also measures receive + acknowledge. Prints msg/s and the ratios against the
targets (producer >= 5x the wheel's batched publish rate with callbacks, consumer >= 1.0x),
and writes ``benchmarks/results/client.json``.

    .venv/bin/python benchmarks/client.py [--messages 200000] [--runs 3]
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
        t0 = time.perf_counter()
        send = producer.send_async
        for _ in range(n):
            send(PAYLOAD)
        await producer.flush()
        produce_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        receive, ack = consumer.receive, consumer.acknowledge
        for _ in range(n):
            await ack(await receive())
        consume_s = time.perf_counter() - t0
    return {"produce_msg_s": n / produce_s, "consume_msg_s": n / consume_s}


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

    t0 = time.perf_counter()
    if with_callback:
        for _ in range(n):
            producer.send_async(PAYLOAD, callback)
    else:
        for _ in range(n):
            producer.send_async(PAYLOAD, None)
    producer.flush()
    produce_s = time.perf_counter() - t0
    if with_callback:
        assert len(results) == n, f"{len(results)} callbacks for {n} messages"
    t0 = time.perf_counter()
    for _ in range(n):
        consumer.acknowledge(consumer.receive())
    consume_s = time.perf_counter() - t0
    client.close()
    return {"produce_msg_s": n / produce_s, "consume_msg_s": n / consume_s}


def child(role: str, url: str, n: int) -> None:
    pin(CLIENT_CORE)
    if role == "magnetar":
        try:
            import uvloop

            result = uvloop.run(run_magnetar(url, n))
        except ImportError:
            result = asyncio.run(run_magnetar(url, n))
    else:
        result = run_wheel(url, n, with_callback=role == "wheel_callback")
    print("RESULT " + json.dumps(result), flush=True)


def measure(role: str, url: str, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", role, "--url", url, "--messages", str(n)],
        capture_output=True, text=True, check=True, timeout=900,
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
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.messages)
        return

    from magnetar.testing import StandaloneProcess

    roles = ("magnetar", "wheel_callback", "wheel_no_callback")
    with tempfile.TemporaryDirectory() as tmp:
        node = StandaloneProcess(Path(tmp) / "data")
        node.start()
        try:
            assert node.proc is not None
            pin(BROKER_CORE, node.proc.pid)
            runs: dict[str, list[dict[str, float]]] = {r: [] for r in roles}
            for _ in range(args.runs):
                for role in roles:  # interleaved, so load changes hit every client alike
                    runs[role].append(measure(role, node.url, args.messages))
        finally:
            node.kill()
    best = {
        role: {k: max(r[k] for r in rs) for k in ("produce_msg_s", "consume_msg_s")}
        for role, rs in runs.items()
    }
    ours, wheel_cb = best["magnetar"], best["wheel_callback"]
    result = {
        "messages": args.messages,
        "payload_bytes": len(PAYLOAD),
        "runs": args.runs,
        "cores": {"client": CLIENT_CORE, "broker": BROKER_CORE},
        "best_of_runs": best,
        "all_runs": runs,
        "produce_ratio_vs_wheel_callback": ours["produce_msg_s"] / wheel_cb["produce_msg_s"],
        "produce_ratio_vs_wheel_no_callback": ours["produce_msg_s"]
        / best["wheel_no_callback"]["produce_msg_s"],
        "consume_ratio_vs_wheel": ours["consume_msg_s"]
        / max(best["wheel_callback"]["consume_msg_s"], best["wheel_no_callback"]["consume_msg_s"]),
        "targets": {"produce_ratio_vs_wheel_callback": 5.0, "consume_ratio_vs_wheel": 1.0},
    }
    for role in roles:
        r = best[role]
        print(
            f"{role:18s} produce {r['produce_msg_s']:>10,.0f} msg/s"
            f"   consume {r['consume_msg_s']:>10,.0f} msg/s"
        )
    print(
        f"producer: {result['produce_ratio_vs_wheel_callback']:.2f}x the wheel with callbacks"
        f" (target 5x), {result['produce_ratio_vs_wheel_no_callback']:.2f}x without;"
        f" consumer: {result['consume_ratio_vs_wheel']:.2f}x the wheel (target 1.0x)"
    )
    out = Path(__file__).parent / "results" / "client.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
