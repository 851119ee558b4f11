"""The cost of many idle topics on one ``magnetar standalone``: creation rate, resident
memory per topic and the CPU the broker spends while nothing is published.

Over one raw connection (``broker.py``'s protocol generator), ``--topics N`` topics are each
looked up (LOOKUP), then given a producer (PRODUCER) and an exclusive subscription
(SUBSCRIBE) at once; ``--in-flight`` topics are in progress at a time (the issue's 200), a
new one started as each completes. Figures:

* ``topics_per_s``: topics completed (lookup, producer and subscription answered) a second;
* ``rss_kb_per_topic``: the standalone's settled resident memory after creation, less the
  settled figure before, divided by N (its journal writer's memory included);
* ``idle_cpu_pct``: the standalone's process CPU time (user + system, its children
  included) over ``--idle-seconds`` with every producer and consumer still attached and
  nothing published, as a percentage of one core. CPU time, not wall time: a loaded shared
  machine stretches wall time but not the work done.

Usage::

    python benchmarks/topics.py [--topics N] [--in-flight K] [--idle-seconds S]
        [--compare-to TREE [--rounds R]] [--profile DIR]

With ``--compare-to`` (a checkout's directory, or a commit of this repository) the
standalone of that tree and this one's alternate (old, new, old, ...), ``--rounds`` each,
and the medians print side by side with their ratio. ``--profile DIR`` records the idle
standalone with py-spy (``--py-spy PATH``; not a project dependency) into collapsed stacks,
its creation phase as ``<label>-create.txt`` (threads apart) and its idle phase as
``<label>.txt``.
Writes ``benchmarks/results/topics.json`` (``topics-compare.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import uvloop
from broker import (  # this directory: the script's own
    cpu_s,
    median,
    process_tree,
    settled_rss_mb,
    source_tree,
    start_standalone,
    wait_quiet,
)
from raw_generator import (  # this directory: the script's own
    connect,
)

from magnetar.protocol import Producer, Subscribe, SubType, encode
from magnetar.protocol.command.lookup import LookupTopic, LookupTopicResponse
from magnetar.testing import StandaloneProcess


async def create_topics(port: int, count: int, in_flight: int, prefix: str) -> float:
    """Create ``count`` topics with a producer and a subscription each over one connection,
    ``in_flight`` at a time; returns the seconds it took. The connection stays open (its
    producers and consumers stay attached) until the event loop ends."""
    conn = await connect(port)
    assert conn.transport is not None
    write = conn.transport.write
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    pending: dict[int, tuple[int, str]] = {}  # request id -> (topic index, step)
    answers = [0] * count
    started = 0
    completed = 0

    def start_next() -> None:
        nonlocal started
        i = started
        started += 1
        pending[3 * i + 1] = (i, "lookup")
        write(encode(LookupTopic(topic=f"{prefix}-{i}", request_id=3 * i + 1)))

    def on_frame(frame: object) -> None:
        nonlocal completed
        command = frame.command  # type: ignore[attr-defined]
        request_id = getattr(command, "request_id", None)
        if request_id not in pending:
            raise SystemExit(f"unexpected answer {command}")
        i, step = pending.pop(request_id)
        if step == "lookup":
            if not isinstance(command, LookupTopicResponse) or command.error is not None:
                raise SystemExit(f"lookup of topic {i} failed: {command}")
            topic = f"{prefix}-{i}"
            pending[3 * i + 2] = (i, "producer")
            pending[3 * i + 3] = (i, "subscribe")
            write(encode(Producer(topic=topic, producer_id=i, request_id=3 * i + 2)))
            write(
                encode(Subscribe(topic=topic, subscription="idle", sub_type=SubType.Exclusive,
                                 consumer_id=i, request_id=3 * i + 3))
            )  # fmt: skip
            return
        if getattr(command, "error", None) is not None:
            raise SystemExit(f"{step} of topic {i} failed: {command}")
        answers[i] += 1
        if answers[i] < 2:
            return
        completed += 1
        if started < count:
            start_next()
        elif completed == count and not done.done():
            done.set_result(None)

    conn.on_frame = on_frame
    t0 = time.perf_counter()
    for _ in range(min(in_flight, count)):
        start_next()
    await done
    return time.perf_counter() - t0


def settle(node: StandaloneProcess) -> None:
    """Until the start-up's tail is done: the admin app, built after the ready line, is
    built by one admin request, then the process is left to go quiet. Without the request
    the baseline memory was taken before or after that tail (~15 MB) by chance."""
    assert node.proc is not None
    wait_quiet(node.proc.pid)
    with urllib.request.urlopen(f"{node.http_url}/admin/v2/clusters", timeout=60) as reply:
        reply.read()
    wait_quiet(node.proc.pid)


STOP_TIMEOUT_S = 300.0
"""A standalone with many topics closes each (cursors persisted) when stopped."""


def py_spy_start(spy: Path, pid: int, directory: Path, name: str) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` (every thread, with its id) until :func:`py_spy_stop`."""
    directory.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [str(spy), "record", "--pid", str(pid), "--format", "raw", "--nonblocking", "--threads",
         "--rate", "200", "-o", str(directory / f"{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)  # attached before the measured phase starts
    return process


def py_spy_stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    process.wait(timeout=60)


def py_spy_dump(spy: Path, pid: int, directory: Path, name: str, seconds: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(spy), "record", "--pid", str(pid), "--format", "raw", "--nonblocking",
         "--rate", "200", "--duration", str(int(seconds)), "-o", str(directory / f"{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
    )  # fmt: skip


def measure(args: argparse.Namespace, src: Path | None, label: str) -> dict[str, float]:
    """One standalone (of the tree ``src``; None: this one) through creation and idling."""
    with tempfile.TemporaryDirectory() as tmp:
        node = start_standalone(Path(tmp) / "data", src)
        assert node.proc is not None
        pid = node.proc.pid
        try:
            settle(node)
            rss0 = settled_rss_mb(pid)
            cpu0 = sum(cpu_s(p) for p in process_tree(pid))

            async def run() -> dict[str, float]:
                spy = None
                if args.profile is not None:
                    spy = py_spy_start(args.py_spy, pid, args.profile, f"{label}-create")
                create_s = await create_topics(node.port, args.topics, args.in_flight, "idle")
                if spy is not None:
                    await asyncio.to_thread(py_spy_stop, spy)
                create_cpu = sum(cpu_s(p) for p in process_tree(pid)) - cpu0
                await asyncio.to_thread(wait_quiet, pid)
                rss1 = await asyncio.to_thread(settled_rss_mb, pid)
                if args.profile is not None:
                    await asyncio.to_thread(
                        py_spy_dump, args.py_spy, pid, args.profile, label, args.idle_seconds
                    )
                idle0 = sum(cpu_s(p) for p in process_tree(pid))
                await asyncio.sleep(args.idle_seconds)
                idle_cpu = sum(cpu_s(p) for p in process_tree(pid)) - idle0
                return {
                    "topics": float(args.topics),
                    "topics_per_s": args.topics / create_s,
                    "create_cpu_ms_per_topic": create_cpu / args.topics * 1000,
                    "rss_mb_before": rss0,
                    "rss_mb_after": rss1,
                    "rss_kb_per_topic": (rss1 - rss0) * 1024 / args.topics,
                    "idle_cpu_pct": idle_cpu / args.idle_seconds * 100,
                }

            results = uvloop.run(run())
            print(label, json.dumps(results), file=sys.stderr, flush=True)
            return results
        finally:
            try:
                node.stop(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # closing many topics: not measured here
                assert node.proc is not None
                node.proc.kill()
                node.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--compare-to", default=None, metavar="TREE")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--py-spy", type=Path, default=Path(sys.executable).parent / "py-spy")
    args = parser.parse_args()
    if args.profile is not None and not args.py_spy.exists():
        parser.error(f"--profile needs py-spy ({args.py_spy}): pip install py-spy")
    out = Path(__file__).parent / "results" / "topics.json"
    out.parent.mkdir(exist_ok=True)
    if args.compare_to is None:
        results = measure(args, None, "after")
        for k, v in results.items():
            print(f"{k:28} {v:12.2f}")
        out.write_text(json.dumps(results, indent=2) + "\n")
        return
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        src = source_tree(args.compare_to, Path(tmp))
        for i in range(args.rounds):
            for label, tree in (("before", src), ("after", None)):
                print(f"round {i + 1}/{args.rounds}: {label}", file=sys.stderr, flush=True)
                runs[label].append(measure(args, tree, f"{label}-{i + 1}"))
    table: dict[str, object] = {"compare_to": args.compare_to, "rounds": args.rounds}
    print(f"{'figure (median)':28} {'before':>12} {'after':>12} {'after/before':>13}")
    for k in runs["after"][0]:
        b = median([r[k] for r in runs["before"]])
        a = median([r[k] for r in runs["after"]])
        print(f"{k:28} {b:12.2f} {a:12.2f} {a / b if b else float('nan'):13.2f}")
        table[k] = {"before": b, "after": a, "before_runs": [r[k] for r in runs["before"]],
                    "after_runs": [r[k] for r in runs["after"]]}  # fmt: skip
    out.with_name("topics-compare.json").write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
