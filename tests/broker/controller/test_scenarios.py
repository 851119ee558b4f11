"""Seeded scenario runs of the bundle state machine over the in-process cluster of
``simulation.py``. A failure names its seed; ``MAGNETAR_TEST_SEED=<seed>`` replays it."""

from __future__ import annotations

import os

from .simulation import Simulation

SEEDS = 100


def run_seed(seed: int) -> Simulation:
    sim = Simulation(seed)
    try:
        sim.run()
    except AssertionError as exc:
        raise AssertionError(
            f"scenario seed {seed} failed at t={sim.now_ms}ms: {exc}\n"
            f"replay with MAGNETAR_TEST_SEED={seed}"
        ) from exc
    return sim


def test_seeded_scenarios_keep_the_invariants() -> None:
    pinned = os.environ.get("MAGNETAR_TEST_SEED")
    seeds = [int(pinned)] if pinned else list(range(SEEDS))
    print(f"scenario seeds: {seeds[0]}..{seeds[-1]}")
    for seed in seeds:
        sim = run_seed(seed)
        # each run must have exercised the machinery it claims to test
        assert sim.store.epoch >= 1 and sim.events > 500, (seed, sim.store.epoch, sim.events)
