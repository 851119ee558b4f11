"""Seeded scenario runs of the bundle state machine over the in-process cluster of
``simulation.py``. A failure names its seed; ``MAGNETAR_TEST_SEED=<seed>`` replays it."""

from __future__ import annotations

from .seeded_cluster import fingerprints_across_processes, run_seed, seeds_to_run
from .simulation import Simulation


def test_seeded_scenarios_keep_the_invariants() -> None:
    seeds = seeds_to_run()
    print(f"scenario seeds: {seeds[0]}..{seeds[-1]}")
    for seed in seeds:
        sim = run_seed(Simulation, seed, "scenario")
        # each run must have exercised the machinery it claims to test
        assert sim.store.epoch >= 1 and sim.events > 500, (seed, sim.store.epoch, sim.events)


def test_a_seed_replays_exactly_in_another_process() -> None:
    assert len(fingerprints_across_processes("broker.controller.simulation", "Simulation")) == 1
