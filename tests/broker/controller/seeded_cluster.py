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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from magnetar.broker.controller import ControllerDeposed, StaleControllerEpoch

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


class FencedStore(Protocol):
    """The metadata store as a controller sees it: state written only under the current
    epoch."""

    epoch: int

    def fenced_apply(self, epoch: int, writes: Sequence[Any]) -> bool: ...


MachineT = TypeVar("MachineT", bound="Machine")


class Machine(Protocol):
    """What the cluster asks of a controller state machine."""

    def start(self, now_ms: int) -> Sequence[Any]: ...

    def tick(self, now_ms: int) -> Sequence[Any]: ...

    def epoch_changed(self, epoch: int) -> Sequence[Any]: ...


@dataclass
class Controller(Generic[MachineT]):
    machine: MachineT
    epoch: int
    alive: bool = True
    """False once crashed (it does nothing more) or fenced."""


class ControlledCluster(SeededCluster, Generic[MachineT]):
    """A seeded cluster with a controller running ``MachineT``: elections that read the
    state back at a new epoch, controllers that crash or stall and keep acting on their old
    epoch ("zombies"), and effects executed as the election shell does."""

    store: FencedStore
    ignored_errors: tuple[type[Exception], ...] = (StaleControllerEpoch,)
    """Errors an event may raise that leave the controller acting (a late answer, a request
    refused); :class:`ControllerDeposed` ends it."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.controller: Controller[MachineT] | None = None
        self.zombies: list[Controller[MachineT]] = []
        self.electing = False

    def new_machine(self, epoch: int) -> MachineT:
        """The machine of a controller that won ``epoch``, built from the store."""
        raise NotImplementedError

    def is_command(self, effect: object) -> bool:
        """An effect sent to a node rather than written to the store."""
        raise NotImplementedError

    def dispatch(self, ctl: Controller[MachineT], command: Any) -> None:
        """Check and send one command of ``ctl`` (its epoch is checked already)."""
        raise NotImplementedError

    def elect(self) -> None:
        """A new controller wins after a while: the epoch moves on, the state is read back."""
        self.electing = True

        def win() -> None:
            self.electing = False
            self.store.epoch += 1
            epoch = self.store.epoch
            ctl = Controller(self.new_machine(epoch), epoch)
            self.controller = ctl
            self.run_on(ctl, lambda m, now: m.start(now))

        self.at(self.rng.randint(50, SESSION_TIMEOUT_MS), win)

    def run_on(
        self, ctl: Controller[MachineT], event: Callable[[MachineT, int], Sequence[Any]]
    ) -> None:
        """Run an event on a controller and execute its effects as the shell does: writes
        (or the epoch check alone) first, fenced by the epoch, then commands."""
        if not ctl.alive:
            return
        try:
            effects = event(ctl.machine, self.now_ms)
        except self.ignored_errors:
            return
        except ControllerDeposed:
            ctl.alive = False
            return
        writes = [e for e in effects if not self.is_command(e)]
        if effects and not self.store.fenced_apply(ctl.epoch, writes):
            ctl.machine.epoch_changed(self.store.epoch)
            ctl.alive = False  # fenced: nothing of this call reaches a node
            return
        for effect in effects:
            if self.is_command(effect):
                assert effect.epoch == ctl.epoch, effect
                self.dispatch(ctl, effect)

    def tick(self) -> None:
        for ctl in [self.controller, *self.zombies]:
            if ctl is not None:
                self.run_on(ctl, lambda m, now: m.tick(now))
        self.at(TICK_MS, self.tick)


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
