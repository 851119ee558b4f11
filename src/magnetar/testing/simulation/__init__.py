"""Deterministic simulation of time, network and disk, for seeded tests of real code.

FoundationDB's way: the code under test runs unchanged on an event loop whose clock only
moves when nothing is ready (:class:`~magnetar.testing.simulation.loop.SimulatedLoop`),
talks over links that a seeded generator delays, cuts and partitions
(:class:`~magnetar.testing.simulation.network.SimulatedNetwork`), and writes to disks that
tell written bytes from synced ones and lose the unsynced tail in a crash
(:class:`~magnetar.testing.simulation.disk.SimulatedDisk`). One seed gives one schedule: no
wall clock, no sockets, no threads racing, no unordered iteration.
"""

from magnetar.testing.simulation.disk import SimulatedDisk
from magnetar.testing.simulation.loop import LoopClock, SimulatedLoop, SimulationStuck
from magnetar.testing.simulation.network import SimulatedNetwork

__all__ = ["LoopClock", "SimulatedDisk", "SimulatedLoop", "SimulatedNetwork", "SimulationStuck"]
