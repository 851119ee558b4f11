"""Seeded simulation of the data path (:mod:`.data_path`): thousands of seeds, each a whole
run of producing, consuming, ownership moves and faults, with the invariants checked after
every step.

1 000 seeds by default, 10 000 longer ones with ``MAGNETAR_LONG_TESTS=1``. A failure names its seed
and the command that replays it bit for bit (``MAGNETAR_TEST_SEED=<seed> pytest …``); a
replay of one seed keeps the product's logs on, so the run can be read.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from traceback import format_exception

import pytest
from broker.controller.seeded_cluster import fingerprints_across_processes

from .data_path import DataPathSimulation, InvariantBroken

SEED_ENV = "MAGNETAR_TEST_SEED"
LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
SEEDS = 10_000 if LONG else 1_000
LONG_OPTIONS: dict[str, float] = {
    "chaos_s": 0.5,
    "fault_interval_s_max": 0.05,
    "produce_rate_hz": 150.0,
}
OPTIONS: dict[str, float] = LONG_OPTIONS if LONG else {}
"""Long mode: longer runs (about 0.1 s each), more entries and faults per seed."""
BUGGY_SEEDS_MAX = 300
"""Seeds tried to catch a deliberate bug (one seed in ten catches a lying disk, one in
three bookies that ignore fences)."""

ROOT = Path(__file__).parents[2]
TESTS = Path(__file__).parents[1]

pytestmark = pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")


def seeds_to_run() -> list[int]:
    """``MAGNETAR_TEST_SEED`` alone when set (a replay), else ``0..SEEDS-1``."""
    pinned = os.environ.get(SEED_ENV)
    return [int(pinned)] if pinned else list(range(SEEDS))


def replay_command(seed: int, test: str) -> str:
    path = Path(__file__).relative_to(ROOT)
    long = "MAGNETAR_LONG_TESTS=1 " if LONG else ""
    return f"{long}{SEED_ENV}={seed} pytest {path}::{test}"


@contextlib.contextmanager
def quiet(enabled: bool) -> Iterator[None]:
    """The product's logs off while many seeds run (a replay keeps them)."""
    if not enabled:
        yield
        return
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def run_seed(seed: int, test: str, **options: object) -> DataPathSimulation:
    """Run one seed; anything that escapes (a broken invariant, an exception from the code
    under test, a deadlock) fails naming the seed and the command that replays it."""
    sim = DataPathSimulation(seed, **options)  # type: ignore[arg-type]
    try:
        sim.run()
    except Exception as exc:
        # The cause's traceback goes into the message, not the chain: pytest's rendering of
        # a chain this deep (inside the simulated loop) has crashed in ``ast.parse``.
        cause = "" if isinstance(exc, InvariantBroken) else "".join(format_exception(exc))
        raise AssertionError(
            f"data path seed {seed} failed at t={sim.now_s:.3f}s (simulated): "
            f"{type(exc).__name__}: {exc}\n{cause}replay: {replay_command(seed, test)}"
        ) from None
    return sim


def test_seeded_data_path_keeps_the_invariants() -> None:
    seeds = seeds_to_run()
    print(f"data path seeds: {seeds[0]}..{seeds[-1]}")
    acked = crashes = takeovers = faults = through_broker = receipted = reconnects = 0
    metadata_faults = 0
    with quiet(len(seeds) > 1):
        for seed in seeds:
            sim = run_seed(seed, "test_seeded_data_path_keeps_the_invariants", **OPTIONS)
            acked += len(sim.acked)
            crashes += sum(b.crashes for b in sim.bookies.values())
            takeovers += len(sim.owners) - 1
            faults += len(sim.faults)
            metadata_faults += sum(o.store.losses > 0 for o in sim.owners)
            if sim.through_broker:
                through_broker += 1
                receipted += len(sim.receipted)
                reconnects += sum(c.connections - 1 for c in sim.clients)
    print(
        f"acknowledged {acked}, bookie crashes {crashes}, take-overs {takeovers}, owners "
        f"that lost the metadata store {metadata_faults}; through the brokers' protocol: "
        f"{through_broker} seeds, {receipted} receipted, {reconnects} client reconnections"
    )
    if len(seeds) > 1:  # the runs must have exercised what they claim to test
        assert acked >= 5 * len(seeds), acked
        assert takeovers >= len(seeds), takeovers
        assert crashes >= len(seeds) // 2, crashes
        assert metadata_faults >= len(seeds) // 10, metadata_faults
        assert len(seeds) // 3 <= through_broker <= 2 * len(seeds) // 3, through_broker
        assert receipted >= 3 * through_broker, receipted
        assert reconnects >= through_broker, reconnects


@pytest.mark.parametrize("seed", [6075, 8505, 8615])
def test_long_seeds_that_found_a_defect(seed: int) -> None:
    """Long-mode seeds that broke the take-over invariant, run in every mode. An entry
    completed during an ensemble change on the ack of the bookie being replaced (received
    before the new fragment's start was fixed, or while its metadata was written); the
    metadata then placed the entry on the replacement, which never got it, and a later
    owner's recovery closed the ledger before it."""
    with quiet(True):
        run_seed(seed, f"test_long_seeds_that_found_a_defect[{seed}]", **LONG_OPTIONS)


def first_failing_seed(bug: str) -> tuple[int, str]:
    for seed in range(BUGGY_SEEDS_MAX):
        sim = DataPathSimulation(seed, **{bug: True})  # type: ignore[arg-type]
        try:
            sim.run()
        except InvariantBroken as exc:
            return seed, str(exc)
    raise AssertionError(f"no seed of {BUGGY_SEEDS_MAX} caught the deliberate bug {bug}")


@pytest.mark.parametrize(
    ("bug", "caught_as"),
    [
        ("sync_lies", "acknowledged entry"),
        ("ignore_fences", "acknowledged entry"),
        ("no_deduplication", "stored twice"),
    ],
)
def test_a_deliberate_bug_is_caught_by_a_seed_that_replays_it(bug: str, caught_as: str) -> None:
    """Deliberate bugs, through parameters of the simulated parts (the product code is
    unchanged): ``sync_lies``, disks whose syncs return before the data is durable, so a
    crash loses entries the bookies acknowledged; ``ignore_fences``, bookies that take the
    old writer's adds to a fenced ledger; ``no_deduplication``, brokers with deduplication
    off, which store a producer's resends of what they had stored already. Some seed must
    catch each, and replaying that seed must fail the same way."""
    with quiet(True):
        seed, failure = first_failing_seed(bug)
        print(f"{bug} caught by seed {seed}: {failure.splitlines()[0]}")
        assert caught_as in failure, failure
        with pytest.raises(InvariantBroken) as again:
            DataPathSimulation(seed, **{bug: True}).run()  # type: ignore[arg-type]
    assert str(again.value) == failure


@pytest.mark.parametrize(("seed", "through_broker"), [(7, False), (8, True)])
def test_a_seed_replays_exactly_in_another_process(seed: int, through_broker: bool) -> None:
    """One seed, two processes with different string hashing: the same run (a seed whose
    clients call the managed ledger, and one whose clients go through the brokers)."""
    outputs = fingerprints_across_processes("simulation.data_path", "DataPathSimulation", seed=seed)
    assert len(outputs) == 1, outputs
    fingerprint = next(iter(outputs))
    assert "owns the topic" in fingerprint
    assert ("producer-0" in fingerprint) == through_broker, fingerprint
