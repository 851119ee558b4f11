"""Metadata store benchmark: operation rates on every backend, election fail-over time.

Run: .venv/bin/python benchmarks/metadata.py [--ops N] [--trials N]
Prints a table and writes benchmarks/results/metadata.json.

* get / CAS put / create+delete: ops per second, one task issuing ops back to back
  (latency-bound) and 16 concurrent tasks (throughput), on ``memory:``, ``sqlite`` (WAL,
  synchronous=FULL, the default) and a real local ZooKeeper (fsync on).
* fail-over: three candidate processes (tests/metadata/candidate.py) elect a leader with a
  2 s session timeout; the leader is SIGKILLed and we time until an observer sees a new
  leader in the store. Median and p99 over ``--trials`` trials (20 by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from magnetar.metadata import MetadataStore, NotFound, connect
from magnetar.metadata.zookeeper_server import ZooKeeperServer

ROOT = Path(__file__).resolve().parent.parent
CANDIDATE = ROOT / "tests" / "metadata" / "candidate.py"
RESULTS = ROOT / "benchmarks" / "results" / "metadata.json"
SESSION_TIMEOUT_S = 2.0


async def rate(ops: int, concurrency: int, one: Callable[[int], Awaitable[object]]) -> float:
    per_task = ops // concurrency

    async def worker(base: int) -> None:
        for i in range(per_task):
            await one(base + i)

    start = time.perf_counter()
    await asyncio.gather(*(worker(t * per_task) for t in range(concurrency)))
    return per_task * concurrency / (time.perf_counter() - start)


async def bench_store(url: str, ops: int) -> dict[str, float]:
    store = await connect(url, session_timeout_s=10.0)
    out: dict[str, float] = {}
    try:
        value = b"v" * 100
        await store.put("/bench/hot", value)
        for concurrency in (1, 16):
            for n in range(16):
                await store.put(f"/bench/cas-{n}", value)
            versions = {n: (await store.get(f"/bench/cas-{n}")).stat.version for n in range(16)}

            async def get(i: int) -> None:
                await store.get("/bench/hot")

            async def cas(i: int, c: int = concurrency, v: dict[int, int] = versions) -> None:
                slot = i // max(1, ops // c)  # each task owns one node: no CAS conflicts
                v[slot] = (await store.put(f"/bench/cas-{slot}", value, v[slot])).version

            async def create_delete(i: int) -> None:
                await store.create(f"/bench/n-{i}", value)
                await store.delete(f"/bench/n-{i}")

            out[f"get_c{concurrency}"] = await rate(ops, concurrency, get)
            out[f"cas_put_c{concurrency}"] = await rate(ops, concurrency, cas)
            out[f"create_delete_c{concurrency}"] = await rate(ops, concurrency, create_delete)
        await store.delete_recursive("/bench")
    finally:
        await store.close()
    return out


async def leader_of(store: MetadataStore) -> str | None:
    try:
        return (await store.get("/controller")).value.decode()
    except NotFound:
        return None


async def bench_failover(zk: ZooKeeperServer, trials: int, workdir: Path) -> dict[str, float]:
    url = zk.url("/failover")
    observer = await connect(url, session_timeout_s=10.0)
    await observer.put("/writes", b"")
    processes: dict[str, asyncio.subprocess.Process] = {}
    counter = 0

    async def spawn() -> None:
        nonlocal counter
        counter += 1
        cid = f"c{counter}"
        processes[cid] = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CANDIDATE),
            url,
            cid,
            str(workdir / f"{cid}.log"),
            str(SESSION_TIMEOUT_S),
            stdin=asyncio.subprocess.DEVNULL,
        )

    async def wait_leader(other_than: str | None, timeout_s: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = await leader_of(observer)
            if leader is not None and leader != other_than:
                return leader
            await asyncio.sleep(0.005)
        raise TimeoutError("no leader")

    times: list[float] = []
    try:
        for _ in range(3):
            await spawn()
        leader = await wait_leader(None)
        for _ in range(trials):
            # wait for the two followers to be registered as watchers (they log SESSION)
            await asyncio.sleep(0.5)
            start = time.monotonic()
            processes[leader].send_signal(signal.SIGKILL)
            await processes.pop(leader).wait()
            new = await wait_leader(leader)
            times.append(time.monotonic() - start)
            leader = new
            await spawn()
    finally:
        for process in processes.values():
            if process.returncode is None:
                process.kill()
                await process.wait()
        await observer.close()
    times.sort()
    return {
        "trials": len(times),
        "session_timeout_s": SESSION_TIMEOUT_S,
        "median_s": statistics.median(times),
        "p99_s": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))],
        "min_s": times[0],
        "max_s": times[-1],
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, object] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "ops_per_backend": args.ops,
    }
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rates: dict[str, dict[str, float]] = {}
        rates["memory"] = await bench_store("memory:", args.ops)
        rates["sqlite"] = await bench_store(f"sqlite://{workdir / 'bench.db'}", args.ops)
        async with ZooKeeperServer(workdir / "zk", fsync=True) as zk:
            rates["zookeeper"] = await bench_store(zk.url("/bench"), args.ops)
            results["failover"] = await bench_failover(zk, args.trials, workdir)
        results["ops_per_s"] = rates
    print(f"{'backend':<10} {'op':<18} {'c=1 ops/s':>12} {'c=16 ops/s':>12}")
    for backend, figures in rates.items():
        for op in ("get", "cas_put", "create_delete"):
            print(
                f"{backend:<10} {op:<18} {figures[op + '_c1']:>12.0f} {figures[op + '_c16']:>12.0f}"
            )
    print("election fail-over (SIGKILL leader -> new leader seen):", results["failover"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main())
