"""A simulated disk file that tells written bytes from synced ones.

A write lands in the page cache (:attr:`SimulatedDisk.written`); :meth:`sync` makes it
durable. The bytes are a sequence of files written one after the other (:meth:`new_file`
starts the next; :meth:`files` returns them), as a journal that never appends to a file
it did not create. A crash (:meth:`crash`) keeps what was synced plus, at random, part of what was
not (a torn tail, as a real power loss may leave). A full disk refuses writes with
``ENOSPC`` and keeps refusing until :meth:`free` gives it room.

``sync_lies`` models a disk whose cache acknowledges a sync without making the data durable
(a volatile write cache): synced data becomes durable only at :meth:`write_back`, which the
owner calls on its own timer. Storage on such a disk can acknowledge what a crash then
loses: the simulation must catch that.
"""

from __future__ import annotations

import errno
import random


class SimulatedDisk:
    """One append-only file on a disk of ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int, *, sync_lies: bool = False) -> None:
        self.capacity_bytes = capacity_bytes
        self.sync_lies = sync_lies
        self.written = bytearray()
        self.durable_bytes = 0
        """The prefix of :attr:`written` that survives a crash."""
        self._synced_bytes = 0
        """What the last :meth:`sync` covered (durable unless the disk lies)."""
        self.filled = False
        """Filled by another tenant of the disk: every write fails until :meth:`free`."""
        self.syncs = 0
        self._file_starts = [0]

    def new_file(self) -> None:
        """Later writes go to a new file (nothing happens if the current one is empty)."""
        if len(self.written) > self._file_starts[-1]:
            self._file_starts.append(len(self.written))

    @property
    def file_id(self) -> int:
        """The id of the file writes go to: files are numbered from 1, as :meth:`files`."""
        return len(self._file_starts)

    def files(self) -> list[bytes]:
        """The content of every file, oldest first."""
        ends = [*self._file_starts[1:], len(self.written)]
        return [bytes(self.written[a:b]) for a, b in zip(self._file_starts, ends, strict=True)]

    @property
    def full(self) -> bool:
        return self.filled or len(self.written) >= self.capacity_bytes

    def write(self, data: bytes) -> None:
        """Append ``data`` to the page cache. Raises ``OSError(ENOSPC)`` (nothing written)
        when it does not fit."""
        if self.filled or len(self.written) + len(data) > self.capacity_bytes:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        self.written += data

    def sync(self) -> None:
        """fdatasync: everything written so far is durable (unless the disk lies)."""
        self.syncs += 1
        self._synced_bytes = len(self.written)
        if not self.sync_lies:
            self.durable_bytes = self._synced_bytes

    def write_back(self) -> None:
        """The lying disk's cache reaches the platter: what was synced is durable now."""
        self.durable_bytes = self._synced_bytes

    def fill(self) -> None:
        self.filled = True

    def free(self) -> None:
        self.filled = False

    def crash(self, rng: random.Random) -> bytes:
        """Power loss: the file keeps its durable prefix and a random part of the rest
        (possibly none, possibly torn mid-record). Returns what is left, also kept as the
        file's content."""
        lost_from = self.durable_bytes
        if len(self.written) > lost_from and rng.random() < 0.5:
            lost_from = rng.randint(lost_from, len(self.written))
        del self.written[lost_from:]
        self.durable_bytes = self._synced_bytes = len(self.written)
        self._file_starts = [start for start in self._file_starts if start < lost_from] or [0]
        return bytes(self.written)


__all__ = ["SimulatedDisk"]
