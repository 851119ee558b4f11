"""A simulated network of named nodes, on a :class:`~magnetar.testing.simulation.loop.SimulatedLoop`.

A connection is two :class:`Link` objects, one per direction. A link delivers what is sent
on it in order (as TCP does), each message after a delay drawn from the network's seeded
generator, so messages on different connections overtake each other. A partition blocks a
direction between two nodes: messages sent across it wait (TCP retransmits) and go out, in
order, when it heals; new connections across it cannot be opened. A cut link
(:meth:`Link.cut`: a reset connection, a crashed peer) delivers nothing more, including what
was on the way.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

_ORDER_S = 1e-6
"""The least time between two deliveries on one link."""


class Link:
    """One direction of one connection, ``src`` to ``dst``."""

    __slots__ = ("_free_at_s", "_network", "dst", "held", "is_cut", "src")

    def __init__(self, network: SimulatedNetwork, src: str, dst: str) -> None:
        self._network = network
        self.src = src
        self.dst = dst
        self._free_at_s = 0.0
        self.held: list[Callable[[], None]] = []
        """Messages waiting for a partition to heal, in send order."""
        self.is_cut = False

    def send(self, action: Callable[[], None]) -> None:
        """Deliver ``action`` (call it on the destination's side) after a delay, after
        everything sent before on this link; never if the link is cut first."""
        if self.is_cut:
            return
        if self.held or not self._network.passes(self.src, self.dst):
            self.held.append(action)
            self._network.holding(self)
            return
        self._schedule(action)

    def _schedule(self, action: Callable[[], None]) -> None:
        net = self._network
        # Strictly after the previous message: asyncio's timer heap does not keep the order
        # of timers due at the same time.
        due = max(net.loop.time() + net.delay_s(), self._free_at_s + _ORDER_S)
        self._free_at_s = due
        net.loop.call_at(due, self._deliver, action)

    def _deliver(self, action: Callable[[], None]) -> None:
        if not self.is_cut:
            action()

    def release(self) -> None:
        """The partition healed: send what waited, in order."""
        held, self.held = self.held, []
        for action in held:
            self._schedule(action)

    def cut(self) -> None:
        self.is_cut = True
        self.held.clear()


class SimulatedNetwork:
    """Links between named nodes with seeded delays and partitions (see the module
    docstring). ``delay_ms_min``..``delay_ms_max`` is the usual one-way delay; with
    probability ``slow_probability`` a message takes up to ``slow_ms_max`` instead."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        *,
        delay_ms_min: float = 0.05,
        delay_ms_max: float = 1.0,
        slow_probability: float = 0.01,
        slow_ms_max: float = 200.0,
    ) -> None:
        self.loop = loop
        self.rng = rng
        self.delay_ms_min = delay_ms_min
        self.delay_ms_max = delay_ms_max
        self.slow_probability = slow_probability
        self.slow_ms_max = slow_ms_max
        self._blocked: set[tuple[str, str]] = set()
        self._holding: list[Link] = []

    def delay_s(self) -> float:
        rng = self.rng
        if rng.random() < self.slow_probability:
            return rng.uniform(self.delay_ms_max, self.slow_ms_max) / 1000
        return rng.uniform(self.delay_ms_min, self.delay_ms_max) / 1000

    def link(self, src: str, dst: str) -> Link:
        return Link(self, src, dst)

    def passes(self, src: str, dst: str) -> bool:
        """Whether messages from ``src`` reach ``dst`` now."""
        return (src, dst) not in self._blocked

    def connected(self, a: str, b: str) -> bool:
        """Whether a connection between ``a`` and ``b`` can be opened (both directions)."""
        return self.passes(a, b) and self.passes(b, a)

    def holding(self, link: Link) -> None:
        if link not in self._holding:
            self._holding.append(link)

    def partition(self, src: str, dst: str) -> None:
        """Block ``src`` → ``dst`` (one direction: call twice for both)."""
        self._blocked.add((src, dst))

    @property
    def partitions(self) -> list[tuple[str, str]]:
        """The blocked directions, sorted."""
        return sorted(self._blocked)

    def heal(self, src: str, dst: str) -> None:
        """Unblock ``src`` → ``dst``; what waited goes out."""
        self._blocked.discard((src, dst))
        waiting = []
        for link in self._holding:
            if (link.src, link.dst) == (src, dst):
                link.release()
            elif not link.is_cut and link.held:
                waiting.append(link)
        self._holding = waiting

    def heal_all(self) -> None:
        for src, dst in self.partitions:
            self.heal(src, dst)


__all__ = ["Link", "SimulatedNetwork"]
