"""Managed ledger throughput: appends, tailing reads, catch-up reads, cursor acks.

Usage: ``.venv/bin/python benchmarks/managed_ledger.py [--entries N] [--quick]``

Runs a real ZooKeeper and three bookie processes on loopback (ensemble 3, quorums 2/2), and
the managed ledger in this process. Measures:

* append throughput of 1 KiB entries, pipelined (``--window`` adds in flight, the way the
  broker batches producers' sends), with a tailing cursor reading concurrently from the
  cache — tailing must keep up with appends;
* append throughput through ``add_run`` (the broker's publish path: runs of 100 entries,
  outcomes through a callback, ``--window`` entries in flight), on its own topic;
* the append path's own CPU cost: ``add_run`` and ``add_entry_nowait`` over an in-memory
  storage whose writes complete on the next loop iteration (no bookies, so only the
  managed ledger's work per entry is measured; also with ``--quick``);
* catch-up read throughput from bookies (cache disabled, reading the whole log);
* cursor individual-ack throughput with 10% holes, through ``ManagedCursor.ack`` and for the
  sans-IO :class:`CursorState` alone (in order, and shuffled within windows of 1 000).

Prints a table and writes ``benchmarks/results/managed_ledger.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage, StoredEntry
from magnetar.metadata import MetadataStore, connect
from magnetar.metadata.zookeeper_server import ZooKeeperServer, free_port

RUN_ENTRIES = 100
RESULTS = Path(__file__).with_name("results") / "managed_ledger.json"
MAGNETAR = Path(sys.executable).with_name("magnetar")


def ack_positions(n: int, ledger_id: int, shuffle: bool) -> list[Position]:
    """Every entry except each 10th (the holes), optionally shuffled within windows."""
    positions = [Position(ledger_id, e) for e in range(n) if e % 10 != 9]
    if shuffle:
        rng = random.Random(7)
        for i in range(0, len(positions), 1000):
            window = positions[i : i + 1000]
            rng.shuffle(window)
            positions[i : i + 1000] = window
    return positions


def bench_cursor_state(n: int, shuffle: bool) -> float:
    ledgers = LedgerList([LedgerSegment(1, entries=n, messages=n, closed_ms=1)])
    state = CursorState("bench", ledgers, Position(1, -1))
    positions = ack_positions(n, 1, shuffle)
    t0 = time.perf_counter()
    ack = state.ack
    for p in positions:
        ack(p)
    elapsed = time.perf_counter() - t0
    assert state.backlog_entries == n // 10
    assert len(state.acked) == n // 10 - 1
    return len(positions) / elapsed


async def start_cluster(tmp: Path) -> tuple[ZooKeeperServer, list[subprocess.Popen[bytes]], str]:
    zk = ZooKeeperServer(tmp / "zk")
    await zk.start_async()
    url = zk.url("/bench")
    bookies = []
    for i in range(3):
        bookies.append(
            subprocess.Popen(
                [
                    str(MAGNETAR),
                    "bookie",
                    "--metadata-url",
                    url,
                    "--data-dir",
                    str(tmp / f"bookie{i}"),
                    "--port",
                    str(free_port()),
                    "--disk-free-min-bytes",
                    "0",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    store = await connect(url)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            names = await store.children("/ledgers/available")
        except Exception:
            names = []
        if len([n for n in names if n != "readonly"]) >= 3:
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("bookies did not register")
    await store.close()
    return zk, bookies, url


async def bench_storage(url: str, entries: int, window: int) -> dict[str, float]:
    store = await connect(url)
    client = LedgerClient(store)
    storage = LedgerClientStorage(client)
    out: dict[str, float] = {}
    ml = await ManagedLedger.open(
        "bench/ns/persistent/t",
        storage=storage,
        store=store,
        config=ManagedLedgerConfig(
            ledger_entries_max=50_000, retention_time_ms=-1, retention_size_bytes=-1
        ),
    )
    tail = await ml.open_cursor("tail")
    payload = b"x" * 1024
    tailed = 0

    async def tailing() -> None:
        nonlocal tailed
        while tailed < entries:
            got = await tail.read_entries_or_wait(1000)
            tailed += len(got)
            tail.ack_cumulative(got[-1].position)

    reader = asyncio.create_task(tailing())
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(window)

    async def one() -> None:
        async with sem:
            await ml.add_entry(payload)

    await asyncio.gather(*(one() for _ in range(entries)))
    append_s = time.perf_counter() - t0
    await asyncio.wait_for(reader, 60)
    tail_s = time.perf_counter() - t0
    out["append_entries_per_s"] = entries / append_s
    out["append_mib_per_s"] = entries * 1024 / append_s / 2**20
    out["tailing_entries_per_s"] = entries / tail_s
    out["tailing_cache_hit_ratio"] = ml.cache.hits / max(ml.cache.hits + ml.cache.misses, 1)
    await ml.close()

    out["add_run_entries_per_s"] = await bench_add_run(storage, store, entries, window)

    # catch-up: cache disabled, read the whole log back from bookies
    ml = await ManagedLedger.open(
        "bench/ns/persistent/t",
        storage=storage,
        store=store,
        config=ManagedLedgerConfig(
            cache_size_max_bytes=0, retention_time_ms=-1, retention_size_bytes=-1
        ),
    )
    catchup = await ml.open_cursor("catchup", earliest=True)
    t0 = time.perf_counter()
    n = 0
    while True:
        got = await catchup.read_entries(1000)
        if not got:
            break
        n += len(got)
    out["catchup_entries_per_s"] = n / (time.perf_counter() - t0)
    assert n == entries, n

    # acks through the managed cursor, 10% holes
    positions = [Position(s.ledger_id, e) for s in ml.ledgers for e in range(s.entries)]
    acks = [p for i, p in enumerate(positions) if i % 10 != 9]
    t0 = time.perf_counter()
    ack = catchup.ack
    catchup.rewind()
    for p in acks:
        ack(p)
    out["managed_cursor_acks_per_s"] = len(acks) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    await catchup.persist()
    out["persist_with_holes_ms"] = (time.perf_counter() - t0) * 1000
    out["holes"] = len(catchup.state.acked)
    await ml.close()
    await client.close()
    await store.close()
    return out


async def bench_add_run(
    storage: LedgerClientStorage, store: MetadataStore, entries: int, window: int
) -> float:
    """Appends through ``add_run`` in runs of ``RUN_ENTRIES``, at most ``window`` entries in
    flight; entries per second until the last is stored."""
    ml = await ManagedLedger.open(
        "bench/ns/persistent/runs",
        storage=storage,
        store=store,
        config=ManagedLedgerConfig(
            ledger_entries_max=50_000, retention_time_ms=-1, retention_size_bytes=-1
        ),
    )
    datas = [b"x" * 1024] * RUN_ENTRIES
    counts = [1] * RUN_ENTRIES
    stored = inflight = 0
    room = asyncio.Event()
    done = asyncio.Event()

    def callback(
        _offset: int, count: int, _pos: Position | None, error: BaseException | None
    ) -> None:
        nonlocal stored, inflight
        assert error is None, error
        stored += count
        inflight -= count
        if inflight + RUN_ENTRIES <= window:
            room.set()
        if stored >= entries:
            done.set()

    t0 = time.perf_counter()
    sent = 0
    while sent < entries:
        while inflight + RUN_ENTRIES > window:
            room.clear()
            await room.wait()
        inflight += RUN_ENTRIES
        sent += RUN_ENTRIES
        ml.add_run(datas, counts, callback)
    await done.wait()
    elapsed = time.perf_counter() - t0
    await ml.close()
    return sent / elapsed


class _MemoryWriter:
    """A ledger kept in a list; writes complete on the next loop iteration."""

    def __init__(self, ledger_id: int) -> None:
        self.ledger_id = ledger_id
        self.entries: list[bytes] = []
        self.length = 0

    @property
    def last_add_confirmed(self) -> int:
        return len(self.entries) - 1

    def add_run(
        self,
        datas: Sequence[bytes],
        callback: Callable[[int, int, int, BaseException | None], None],
    ) -> None:
        first = len(self.entries)
        self.entries.extend(datas)
        self.length += sum(map(len, datas))
        asyncio.get_running_loop().call_soon(callback, 0, len(datas), first, None)

    def add_nowait(self, data: bytes) -> asyncio.Future[int]:
        raise NotImplementedError

    async def read(self, first: int, last: int | None = None) -> list[StoredEntry]:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class _MemoryStorage:
    def __init__(self) -> None:
        self.next_id = 0

    async def create_ledger(self, properties: dict[str, str]) -> _MemoryWriter:
        self.next_id += 1
        return _MemoryWriter(self.next_id)

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> _MemoryWriter:
        raise NotImplementedError

    async def delete_ledger(self, ledger_id: int) -> None:
        return None


async def bench_append_cpu(entries: int, window: int) -> dict[str, float]:
    """Entries per second through ``add_run`` (runs of ``RUN_ENTRIES``) and through
    ``add_entry_nowait``, over :class:`_MemoryStorage`: the managed ledger's own cost."""
    store = await connect("memory:")
    out: dict[str, float] = {}
    ml = await ManagedLedger.open(
        "bench/ns/persistent/cpu",
        storage=_MemoryStorage(),
        store=store,
        config=ManagedLedgerConfig(
            ledger_entries_max=10**9, retention_time_ms=-1, retention_size_bytes=-1
        ),
        background=False,
    )
    await ml.open_cursor("tail")
    datas = [b"x" * 100] * RUN_ENTRIES
    counts = [1] * RUN_ENTRIES
    stored = 0
    done = asyncio.Event()

    def callback(_o: int, count: int, _p: Position | None, error: BaseException | None) -> None:
        nonlocal stored
        assert error is None, error
        stored += count
        if stored >= entries:
            done.set()

    t0 = time.perf_counter()
    for sent in range(0, entries, RUN_ENTRIES):
        ml.add_run(datas, counts, callback)
        if sent % window == 0:
            await asyncio.sleep(0)  # let completions in, as a connection's reads would
    await done.wait()
    out["append_cpu_add_run_entries_per_s"] = entries / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    futures = []
    for i in range(entries):
        futures.append(ml.add_entry_nowait(datas[0]))
        if i % window == 0:
            await asyncio.sleep(0)
    await asyncio.gather(*futures)
    out["append_cpu_nowait_entries_per_s"] = entries / (time.perf_counter() - t0)
    await ml.close()
    await store.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="sans-IO cursor only")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write JSON")
    args = parser.parse_args()
    results: dict[str, float] = {}
    results["cursor_state_acks_per_s_in_order"] = bench_cursor_state(1_000_000, False)
    results["cursor_state_acks_per_s_shuffled"] = bench_cursor_state(1_000_000, True)
    results |= await bench_append_cpu(200_000, args.window)
    if not args.quick:
        with tempfile.TemporaryDirectory(prefix="magnetar-bench-") as tmp:
            zk, bookies, url = await start_cluster(Path(tmp))
            try:
                results |= await bench_storage(url, args.entries, args.window)
            finally:
                for b in bookies:
                    b.kill()
                    b.wait()
                await zk.stop_async()
    for k, v in results.items():
        print(f"{k:40s} {v:14,.1f}")
    args.results.parent.mkdir(exist_ok=True)
    args.results.write_text(json.dumps({"entries": args.entries, **results}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
