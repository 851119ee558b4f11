"""Workload process for ``test_crash_recovery``: append, consume with two cursors, log facts.

Run as ``python crash_worker.py <metadata-url> <name> <total> <log-file> <seed>
<persist-interval-ms>``. It (re)opens the managed ledger, continues appending sequence
numbers after the last entry in the log, and consumes with a fast and a slow cursor that
acknowledge individually in random order (about 10% of acknowledgements are held back and
given later). Before each acknowledgement it appends a line to the log file with ``os.write``
(a completed write survives SIGKILL of this process):

    O <next_seq>                         opened; appending resumes at next_seq
    A <seq>                              entries up to seq were acknowledged by storage
    K <cursor> <time_ms> <l:e> <l:e>...  about to acknowledge these positions
    D                                    everything appended and consumed; closed cleanly
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import sys
import time

from magnetar.ledger import LedgerClient
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.managed_cursor import ManagedCursor
from magnetar.managed_ledger.managed_ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata import connect

PAYLOAD_PAD = b"p" * 24
APPEND_BATCH = 500
LEDGER_ENTRIES_MAX = 5_000


def seq_of(data: bytes) -> int:
    return int(struct.unpack_from(">Q", data)[0])


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())


async def consume(
    ml: ManagedLedger,
    cursor: ManagedCursor,
    per_read: int,
    log: Log,
    rng: random.Random,
    appending_done: asyncio.Event,
) -> None:
    held: list[Position] = []
    while True:
        if appending_done.is_set() and cursor.backlog_entries == 0:
            break
        try:
            entries = await asyncio.wait_for(cursor.read_entries_or_wait(per_read), 0.5)
        except TimeoutError:
            entries = []
        now_ack: list[Position] = []
        for e in entries:
            (held if rng.random() < 0.1 else now_ack).append(e.position)
        rng.shuffle(now_ack)
        if len(held) > 40 or (not entries and held):
            rng.shuffle(held)
            release = max(len(held) // 2, 20)
            now_ack.extend(held[:release])
            del held[:release]
        if now_ack:
            log.write(
                f"K {cursor.name} {time.time_ns() // 1_000_000} "
                + " ".join(f"{p[0]}:{p[1]}" for p in now_ack)
            )
            cursor.ack_many(now_ack)
        await asyncio.sleep(0)  # let the producer and the other cursor run


async def main() -> None:
    url, name, total_s, log_path, seed_s, persist_s = sys.argv[1:7]
    total, persist_ms = int(total_s), int(persist_s)
    rng = random.Random(int(seed_s))
    log = Log(log_path)
    store = await connect(url, session_timeout_s=5.0)
    client = LedgerClient(store)
    config = ManagedLedgerConfig(
        ledger_entries_max=LEDGER_ENTRIES_MAX,
        cursor_persist_interval_ms=persist_ms,
        maintenance_interval_ms=persist_ms,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    ml = await ManagedLedger.open(
        name, storage=LedgerClientStorage(client), store=store, config=config
    )
    fast = await ml.open_cursor("fast", earliest=True)
    slow = await ml.open_cursor("slow", earliest=True)
    last = ml.last_confirmed
    next_seq = 0
    if ml.ledgers.exists(last):
        next_seq = seq_of((await ml.read_range(last[0], last[1], last[1]))[0]) + 1
    log.write(f"O {next_seq}")
    appending_done = asyncio.Event()

    async def produce() -> None:
        nonlocal next_seq
        while next_seq < total:
            seqs = range(next_seq, min(next_seq + APPEND_BATCH, total))
            await asyncio.gather(*(ml.add_entry(struct.pack(">Q", s) + PAYLOAD_PAD) for s in seqs))
            next_seq = seqs[-1] + 1
            log.write(f"A {seqs[-1]}")
        appending_done.set()

    await asyncio.gather(
        produce(),
        consume(ml, fast, 2_000, log, random.Random(rng.random()), appending_done),
        consume(ml, slow, 300, log, random.Random(rng.random()), appending_done),
    )
    await ml.close()
    await client.close()
    await store.close()
    log.write("D")


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(main())
