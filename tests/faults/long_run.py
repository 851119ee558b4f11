"""The long-mode acceptance run of issue 38: thousands of seeded faults over every scenario of
:mod:`tests.faults.fault_cluster`, with real processes, and the figures.

    PYTHONPATH=src python -m tests.faults.long_run --faults 1000 [--seed N] [--batch 50]

Starts its own ZooKeeper and one :class:`FaultCluster` (mounting a tmpfs: run as root),
then runs batches of ``--batch`` rounds (:func:`tests.faults.fault_rounds.run_rounds`), each
on a new topic checked as a whole when the batch ends (then deleted, so the bookies collect
its space), until ``--faults`` faults were
injected or ``--minutes`` passed. Prints each batch's figures and the totals; exits 1 if
any promise broke (lost, duplicated, regressed, two writers) or the service was not back
within the bound after a heal. The seed of each batch is printed: ``--seed`` of a batch
replays it.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from magnetar.metadata.zookeeper_server import ZooKeeperServer
from tests.faults.fault_cluster import SCENARIOS, FaultCluster
from tests.faults.fault_rounds import BACK_WITHIN_S, Figures, run_rounds


def add(total: Figures, batch: Figures) -> None:
    for name, n in batch.faults.items():
        total.faults[name] = total.faults.get(name, 0) + n
    total.acked += batch.acked
    total.failed_sends += batch.failed_sends
    total.lost += batch.lost
    total.duplicates += batch.duplicates
    total.redelivered += batch.redelivered
    total.dual_writers += batch.dual_writers
    total.problems += batch.problems
    total.recovery_s += batch.recovery_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--minutes", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    print(f"seed {seed}", flush=True)
    total = Figures()
    end = time.monotonic() + args.minutes * 60
    root = Path(tempfile.mkdtemp(prefix="magnetar-long-run-"))
    print(f"logs in {root} (kept)", flush=True)
    zookeeper = ZooKeeperServer(root / "zk", fsync=False)
    zookeeper.start()
    cluster = FaultCluster(zookeeper, root, "/long-run")
    try:
        cluster.start()
        n = 0
        while sum(total.faults.values()) < args.faults and time.monotonic() < end:
            batch_seed = rng.randrange(2**32)
            rounds = min(args.batch, args.faults - sum(total.faults.values()))
            print(f"batch {n}: seed {batch_seed}, {rounds} faults", flush=True)
            cluster.supervise()
            try:
                figures = run_rounds(
                    cluster, f"persistent://public/faults/long-{n}-{batch_seed}",
                    list(SCENARIOS), rounds, batch_seed,
                )  # fmt: skip
            except Exception as exc:
                figures = Figures(faults={"unfinished batch": 1})
                figures.problems = [f"batch seed {batch_seed} ended: {exc!r}"[:500]]
            try:
                # Checked: its data goes (the audit subscription acknowledges nothing, and
                # the disk bookie's small volume would fill up over a long run).
                cluster.delete_topic(f"persistent://public/faults/long-{n}-{batch_seed}")
            except OSError as exc:
                print(f"batch {n}: deleting its topic failed: {exc}", flush=True)
            print(f"batch {n}: {figures.line()}", flush=True)
            for line in figures.problems:
                print(f"batch {n}: PROBLEM {line}", flush=True)
            add(total, figures)
            n += 1
    finally:
        cluster.close()
        zookeeper.stop()
    slow = [s for s in total.recovery_s if s >= BACK_WITHIN_S]
    print(f"total: {total.line()}; {len(slow)} recoveries over {BACK_WITHIN_S:.0f} s", flush=True)
    return 1 if total.problems or slow else 0


if __name__ == "__main__":
    sys.exit(main())
