"""What the controller's seeded simulations share: logical time, a queue of due actions,
links that deliver in order after a random delay (as TCP does) and sometimes lose a message
or stall during chaos, the run loop (chaos, then calm until settled), and the scenario
tests' seed handling.

A run depends only on its seed: every random draw comes from ``rng`` in event order, and
nothing iterates a set unsorted (string hashing differs between processes).
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

TICK_MS = 500
SESSION_TIMEOUT_MS = 3_000
CHAOS_MS = 60_000
LINK_DELAY_MS_MAX = 400
LINK_DROP_PROBABILITY = 0.03
"""A message lost with its connection (during chaos only): commands and acks are retried."""
STALL_PROBABILITY = 0.05
STALL_MS_MAX = 2 * SESSION_TIMEOUT_MS
SEEDS = 100
SEED_ENV = "MAGNETAR_TEST_SEED"


class SeededCluster:
    """Base of the simulations: subclasses add the cluster and its invariants."""

    settle_ms = 40_000
    """How long the run goes on after chaos ends, for everything to settle."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._link_free_ms: dict[tuple[str, str], int] = {}
        self.chaos = True
        self.events = 0
        self.dropped = 0

    # --- scheduling ------------------------------------------------------------------------

    def at(self, delay_ms: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now_ms + delay_ms, next(self._seq), action))

    def stall_link(self, link: tuple[str, str]) -> None:
        """During chaos, sometimes hold ``link`` back long: its sender paused (GC, SIGSTOP)
        between its epoch check and the send, so what it sends arrives late."""
        if self.chaos and self.rng.random() < STALL_PROBABILITY:
            stalled_ms = self.now_ms + self.rng.randint(1_000, STALL_MS_MAX)
            self._link_free_ms[link] = max(self._link_free_ms.get(link, 0), stalled_ms)

    def send(self, link: tuple[str, str], action: Callable[[], None], stall: bool = False) -> None:
        """In order on ``link`` after a random delay; sometimes lost during chaos; with
        ``stall``, sometimes held back long (:meth:`stall_link`)."""
        if self.chaos and self.rng.random() < LINK_DROP_PROBABILITY:
            self.dropped += 1
            return
        if stall:
            self.stall_link(link)
        due = max(
            self.now_ms + self.rng.randint(1, LINK_DELAY_MS_MAX), self._link_free_ms.get(link, 0)
        )
        self._link_free_ms[link] = due
        heapq.heappush(self._queue, (due, next(self._seq), action))

    def run(self) -> None:
        """Populate, elect, then run chaos for ``CHAOS_MS`` and calm for ``settle_ms``,
        checking safety after every event and the settled state at the end."""
        self.populate()
        self.elect()
        self.at(0, self.tick)
        self.at(100, self.chaos_step)
        end_ms = CHAOS_MS + self.settle_ms
        while self._queue:
            due, _, action = heapq.heappop(self._queue)
            if due > end_ms:
                break
            self.now_ms = due
            if self.chaos and due >= CHAOS_MS:
                self.calm()
            action()
            self.events += 1
            self.check_safety()
        self.check_settled()

    # --- what a simulation provides --------------------------------------------------------

    def populate(self) -> None:
        raise NotImplementedError

    def elect(self) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def chaos_step(self) -> None:
        raise NotImplementedError

    def calm(self) -> None:
        raise NotImplementedError

    def check_safety(self) -> None:
        raise NotImplementedError

    def check_settled(self) -> None:
        raise NotImplementedError

    def fingerprint(self) -> str:
        """The end state, to compare runs of one seed."""
        raise NotImplementedError


# --- the scenario tests' seed handling ---------------------------------------------------

SimulationT = TypeVar("SimulationT", bound=SeededCluster)


def seeds_to_run() -> list[int]:
    """``MAGNETAR_TEST_SEED`` alone when set (a replay), else ``0..SEEDS-1``."""
    pinned = os.environ.get(SEED_ENV)
    return [int(pinned)] if pinned else list(range(SEEDS))


def run_seed(make: Callable[[int], SimulationT], seed: int, what: str) -> SimulationT:
    """Run ``make(seed)``; a broken invariant fails naming the seed and how to replay it."""
    sim = make(seed)
    try:
        sim.run()
    except AssertionError as exc:
        raise AssertionError(
            f"{what} seed {seed} failed at t={sim.now_ms}ms: {exc}\nreplay with {SEED_ENV}={seed}"
        ) from exc
    return sim


def fingerprints_across_processes(module: str, class_name: str, seed: int = 3) -> set[str]:
    """The fingerprints of one seed run in two processes with different string hashing."""
    tests_dir = Path(__file__).parents[2]
    script = (
        f"from {module} import {class_name}\n"
        f"s = {class_name}({seed})\n"
        "s.run()\n"
        "print(s.fingerprint())\n"
    )
    return {
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
