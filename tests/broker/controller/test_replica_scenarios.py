"""Seeded scenario runs of the ledger replica state machine over the in-process cluster of
``replica_simulation.py``. A failure names its seed; ``MAGNETAR_TEST_SEED=<seed>`` replays
it."""

from __future__ import annotations

from .replica_simulation import ReplicaSimulation
from .seeded_cluster import fingerprints_across_processes, run_seed, seeds_to_run


def test_seeded_scenarios_heal_every_ledger_and_keep_the_invariants() -> None:
    seeds = seeds_to_run()
    print(f"replica scenario seeds: {seeds[0]}..{seeds[-1]}")
    replicated = 0
    for seed in seeds:
        sim = run_seed(ReplicaSimulation, seed, "replica scenario")
        assert sim.store.epoch >= 1 and sim.events > 500, (seed, sim.store.epoch, sim.events)
        replicated += sim.replicated
    # the runs must have exercised what they claim to test
    assert replicated >= len(seeds), replicated


def test_a_replica_seed_replays_exactly_in_another_process() -> None:
    fingerprints = fingerprints_across_processes(
        "broker.controller.replica_simulation", "ReplicaSimulation"
    )
    assert len(fingerprints) == 1
