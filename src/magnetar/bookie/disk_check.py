"""When a bookie looks at its free disk space.

A bookie turns read-only once free space falls below ``disk_free_min_bytes``. Looking only on
a timer (every ``disk_check_interval_ms``) is not enough: a writer that fills the disk within
one interval meets ``ENOSPC`` before the threshold is ever seen, and the error, not the
threshold, stops it. So the bookie also looks after every ``check_every_bytes`` written
(by default a quarter of the threshold). Between two looks the disk takes at most about twice
that (the journal record now, the entry-log copy at the next checkpoint) plus the journal's
zero-filled allowance, so free space is seen under the threshold before it runs out.

:class:`WrittenBytesTrigger` only counts: one addition per add on the add path, and the
comparison where adds are batched (once per read batch or journal sync group), so the
``statvfs`` behind :func:`free_bytes` runs once per ``check_every_bytes``, not per entry.

:class:`~magnetar.bookie.disk_monitor.DiskMonitor` is the timer side: the bookie's
background service that looks every ``disk_check_interval_ms``.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def free_bytes(path: Path) -> int:
    """Bytes free for unprivileged writers on the file system holding ``path``."""
    return shutil.disk_usage(path).free


def default_check_every_bytes(disk_free_min_bytes: int) -> int:
    """A quarter of the threshold; 0 (no check by bytes) when there is no threshold."""
    return max(disk_free_min_bytes // 4, 0)


class WrittenBytesTrigger:
    """Says when enough has been written since the last look at free space."""

    __slots__ = ("check_every_bytes", "written_bytes")

    def __init__(self, check_every_bytes: int) -> None:
        self.check_every_bytes = check_every_bytes
        """0: never due (free space is then only looked at on the timer)."""
        self.written_bytes = 0
        """Written since the last look; the add path adds to it directly."""

    @property
    def due(self) -> bool:
        return 0 < self.check_every_bytes <= self.written_bytes

    def looked(self) -> None:
        """Free space was just read: count from zero again."""
        self.written_bytes = 0
