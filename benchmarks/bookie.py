"""Bookie add throughput and latency, next to the raw limit of the disk.

Starts a real ZooKeeper and bookie processes (``magnetar bookie``) on loopback, then drives
them with one ``LedgerClient`` in this process (uvloop), keeping a window of adds in flight:

* 1 bookie (E=Qw=Qa=1) and 3 bookies (E=3, Qw=2, Qa=2), entries of 1 KiB and 64 KiB;
* the raw disk: a loop of write + fdatasync of the same sizes from one Python process, in
  the same directory the bookies use;
* a bookie in this process (as in ``magnetar standalone``), 150 B entries, reached over
  loopback TCP and through the in-process transport (``LedgerClient(local_bookies=...)``):
  adds/s and this process's CPU per entry;
* catch-up reads from the bookie processes: a closed ledger of ``READ_ENTRIES`` entries of
  1 KiB (E=Qw=Qa=1 on one bookie, E=3 Qw=Qa=2 on three) read back from the start in reads
  of ``READ_BATCH`` entries, as a cursor far behind does after its entries left the cache:
  entries/s and this process's CPU per entry.

Prints a table and writes ``benchmarks/results/bookie.json``. Run: ``python benchmarks/bookie.py``
(``--seconds`` per case, default 4; ``--reads-only`` for the catch-up reads alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from magnetar.bookie import Bookie, BookieConfig
from magnetar.ledger import LedgerClient
from magnetar.metadata import connect
from magnetar.metadata.zookeeper_server import ZooKeeperServer, free_port

SIZES = (1024, 64 * 1024)
READ_ENTRIES = 50_000
READ_BATCH = 1000
READ_SIZE = 1024
WINDOW = {150: 500, 1024: 2000, 64 * 1024: 64}
IN_PROCESS_SIZE = 150


def raw_disk(directory: Path, size: int, seconds: float) -> dict[str, float]:
    path = directory / f"raw-{size}.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    data = b"r" * size
    n = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, data)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        path.unlink()
    dt = time.perf_counter() - start
    return {"entries_per_s": n / dt, "mb_per_s": n * size / dt / 1e6}


def start_bookie(url: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = (data_dir.parent / f"{data_dir.name}.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "bookie",
            "--metadata-url",
            url,
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--disk-free-min-bytes",
            "0",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return proc, f"127.0.0.1:{port}"


async def wait_bookies(store: object, ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            have = set(await store.children("/ledgers/available"))  # type: ignore[attr-defined]
        except Exception:
            have = set()
        if set(ids) <= have:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("bookies did not register")


async def run_case(
    client: LedgerClient, e: int, qw: int, qa: int, size: int, seconds: float
) -> dict[str, float]:
    handle = await client.create(e, qw, qa)
    payload = os.urandom(size)
    window = WINDOW[size]
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(window)
    count = 0
    done_bytes = 0
    start = loop.time()
    end = start + seconds

    def finished(t0: float, fut: asyncio.Future[int]) -> None:
        sem.release()
        latencies.append(time.perf_counter() - t0)

    while loop.time() < end:
        await sem.acquire()
        fut = handle.add_nowait(payload)
        t0 = time.perf_counter()
        fut.add_done_callback(lambda f, t0=t0: finished(t0, f))
        count += 1
        done_bytes += size
    await handle.close()
    dt = loop.time() - start
    latencies.sort()
    return {
        "entries_per_s": count / dt,
        "mb_per_s": done_bytes / dt / 1e6,
        "latency_p50_ms": statistics.median(latencies) * 1000,
        "latency_p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "entries": count,
    }


async def catch_up_read(client: LedgerClient, e: int, qw: int, qa: int) -> dict[str, float]:
    """Write a ledger of READ_ENTRIES entries, close it, then time reading it back."""
    handle = await client.create(e, qw, qa)
    payload = os.urandom(READ_SIZE)
    window = WINDOW[READ_SIZE]
    for first in range(0, READ_ENTRIES, window):
        await asyncio.gather(
            *(handle.add_nowait(payload) for _ in range(min(window, READ_ENTRIES - first)))
        )
    await handle.close()
    reader = await client.open(handle.ledger_id)
    cpu0 = time.process_time()
    start = time.perf_counter()
    got = 0
    for first in range(0, READ_ENTRIES, READ_BATCH):
        got += len(await reader.read(first, min(first + READ_BATCH, READ_ENTRIES) - 1))
    dt = time.perf_counter() - start
    assert got == READ_ENTRIES
    await client.delete(handle.ledger_id)
    return {
        "entries_per_s": got / dt,
        "mb_per_s": got * READ_SIZE / dt / 1e6,
        "cpu_us_per_entry": (time.process_time() - cpu0) / got * 1e6,
    }


async def in_process(work: Path, seconds: float) -> dict[str, dict[str, float]]:
    """One in-process bookie, E=Qw=Qa=1: TCP vs the local transport."""
    out: dict[str, dict[str, float]] = {}
    store = await connect("memory:")
    bookie = Bookie(
        BookieConfig(data_dir=work / "in-process", port=0, disk_free_min_bytes=0), store
    )
    await bookie.start()
    try:
        for transport in ("tcp", "local"):
            client = LedgerClient(store, local_bookies=[bookie] if transport == "local" else ())
            cpu0 = time.process_time()
            r = await run_case(client, 1, 1, 1, IN_PROCESS_SIZE, seconds)
            r["cpu_us_per_entry"] = (time.process_time() - cpu0) / r["entries"] * 1e6
            await client.close()
            out[transport] = r
            print(
                f"in-process bookie over {transport}: {r['entries_per_s']:.0f} adds/s of "
                f"{IN_PROCESS_SIZE} B, {r['cpu_us_per_entry']:.1f} us CPU/entry, "
                f"p50 {r['latency_p50_ms']:.2f} ms p99 {r['latency_p99_ms']:.2f} ms",
                flush=True,
            )
    finally:
        await bookie.stop()
        await store.close()
    return out


async def main(seconds: float, reads_only: bool) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="magnetar-bench-", dir=os.environ.get("BENCH_DIR")))
    results: dict[str, object] = {"raw_disk": {}, "bookie": {}, "reads": {}}
    if not reads_only:
        for size in SIZES:
            results["raw_disk"][str(size)] = raw_disk(work, size, seconds)  # type: ignore[index]
        results["in_process"] = await in_process(work, seconds)
    zk = ZooKeeperServer(fsync=False)
    zk.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        url = zk.url("/bench")
        store = await connect(url)
        for bookies, (e, qw, qa) in ((1, (1, 1, 1)), (3, (3, 2, 2))):
            for p in procs:
                p.terminate()
                p.wait(30)
            procs.clear()
            ids = []
            for i in range(bookies):
                p, bid = start_bookie(url, work / f"b{bookies}-{i}")
                procs.append(p)
                ids.append(bid)
            await wait_bookies(store, ids)
            client = LedgerClient(store)
            for size in () if reads_only else SIZES:
                key = f"{bookies}_bookies_{size}"
                r = await run_case(client, e, qw, qa, size, seconds)
                r.update({"ensemble": e, "write_quorum": qw, "ack_quorum": qa, "entry_bytes": size})
                results["bookie"][key] = r  # type: ignore[index]
                print(
                    f"{key}: {r['entries_per_s']:.0f} entries/s {r['mb_per_s']:.1f} MB/s "
                    f"p50 {r['latency_p50_ms']:.2f} ms p99 {r['latency_p99_ms']:.2f} ms",
                    flush=True,
                )
            key = f"{bookies}_bookies_catch_up_read_{READ_SIZE}"
            r = await catch_up_read(client, e, qw, qa)
            results["reads"][key] = r  # type: ignore[index]
            print(
                f"{key}: {r['entries_per_s']:.0f} entries/s {r['mb_per_s']:.1f} MB/s "
                f"{r['cpu_us_per_entry']:.1f} us CPU/entry in this process",
                flush=True,
            )
            await client.close()
        await store.close()
    finally:
        for p in procs:
            p.kill()
        zk.stop()
    if reads_only:
        return results
    for size in SIZES:
        raw = results["raw_disk"][str(size)]  # type: ignore[index]
        print(
            f"raw disk {size} B: {raw['entries_per_s']:.0f} writes+fdatasync/s {raw['mb_per_s']:.1f} MB/s"
        )
    one64 = results["bookie"]["1_bookies_65536"]["mb_per_s"]  # type: ignore[index]
    raw64 = results["raw_disk"]["65536"]["mb_per_s"]  # type: ignore[index]
    results["ratio_64k_one_bookie_vs_raw"] = one64 / raw64
    print(f"64 KiB, 1 bookie vs raw fdatasync'ed appends: {one64 / raw64:.0%} (target >= 50%)")
    print(
        f"1 KiB, 1 bookie: {results['bookie']['1_bookies_1024']['entries_per_s']:.0f} adds/s (target >= 30000)"
    )  # type: ignore[index]
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument(
        "--reads-only",
        action="store_true",
        help="only the catch-up reads (results/bookie-reads.json)",
    )
    args = ap.parse_args()
    uvloop.install()
    res = asyncio.run(main(args.seconds, args.reads_only))
    name = "bookie-reads.json" if args.reads_only else "bookie.json"
    out = Path(__file__).parent / "results" / name
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
