"""Seeded scenario runs of the ledger replica state machine over the in-process cluster of
``replica_simulation.py``. A failure names its seed; ``MAGNETAR_TEST_SEED=<seed>`` replays
it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .replica_simulation import ReplicaSimulation

SEEDS = 100


def run_seed(seed: int) -> ReplicaSimulation:
    sim = ReplicaSimulation(seed)
    try:
        sim.run()
    except AssertionError as exc:
        raise AssertionError(
            f"replica scenario seed {seed} failed at t={sim.now_ms}ms: {exc}\n"
            f"replay with MAGNETAR_TEST_SEED={seed}"
        ) from exc
    return sim


def test_seeded_scenarios_heal_every_ledger_and_keep_the_invariants() -> None:
    pinned = os.environ.get("MAGNETAR_TEST_SEED")
    seeds = [int(pinned)] if pinned else list(range(SEEDS))
    print(f"replica scenario seeds: {seeds[0]}..{seeds[-1]}")
    replicated = 0
    for seed in seeds:
        sim = run_seed(seed)
        assert sim.store.epoch >= 1 and sim.events > 500, (seed, sim.store.epoch, sim.events)
        replicated += sim.replicated
    # the runs must have exercised what they claim to test
    assert replicated >= len(seeds), replicated


def test_a_replica_seed_replays_exactly_in_another_process() -> None:
    tests_dir = Path(__file__).parents[2]
    script = (
        "from broker.controller.replica_simulation import ReplicaSimulation\n"
        "s = ReplicaSimulation(3)\n"
        "s.run()\n"
        "print(s.fingerprint())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=tests_dir,
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for hash_seed in (1, 2)
    }
    assert len(outputs) == 1
