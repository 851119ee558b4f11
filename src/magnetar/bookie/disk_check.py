"""When a bookie's disk is full, and when it looks at its free space.

As BookKeeper's bookies: the disk is full once its usage (``1 - free/total``) reaches
``disk_usage_threshold`` (0.95), and has room again only once usage is below the lower
``disk_usage_lwm_threshold`` (0.90), so a bookie near the line does not flap between
read-only and writable. ``disk_free_min_bytes`` is an optional absolute floor on top (0: none;
free space under it is full as well, and room needs at least that much free): a small disk
whose 5 % is less than what one check interval can write. The rules are
:class:`DiskThresholds`, pure.

Looking only on
a timer (every ``disk_check_interval_ms``) is not enough: a writer that fills the disk within
one interval meets ``ENOSPC`` before the threshold is ever seen, and the error, not the
threshold, stops it. So the bookie also looks after every ``check_every_bytes`` written
(by default a quarter of the free space the full line leaves). Between two looks the disk takes at most about twice
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
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple


class DiskSpace(NamedTuple):
    total_bytes: int
    free_bytes: int
    """Free for unprivileged writers (reserved blocks count as used, as BookKeeper's
    ``getUsableSpace``)."""


def disk_space(path: Path) -> DiskSpace:
    """Size and free space of the file system holding ``path``."""
    usage = shutil.disk_usage(path)
    return DiskSpace(usage.total, usage.free)


@dataclass(frozen=True, slots=True)
class DiskThresholds:
    """When a disk is full and when it has room again (see the module docstring)."""

    usage_threshold: float = 0.95
    """BookKeeper's ``diskUsageThreshold``: full at this usage or above."""
    usage_lwm_threshold: float = 0.90
    """BookKeeper's ``diskUsageLwmThreshold``: room again below this usage."""
    free_min_bytes: int = 0
    """An absolute floor on top (0: none)."""

    def __post_init__(self) -> None:
        if not 0 < self.usage_threshold <= 1:
            raise ValueError(f"disk usage threshold {self.usage_threshold}: expected 0 < t <= 1")
        if not 0 < self.usage_lwm_threshold <= self.usage_threshold:
            raise ValueError(
                f"disk usage low-water mark {self.usage_lwm_threshold}: expected 0 < lwm <= "
                f"the threshold ({self.usage_threshold})"
            )
        if self.free_min_bytes < 0:
            raise ValueError(f"disk free minimum {self.free_min_bytes}: expected >= 0")

    def is_full(self, space: DiskSpace) -> bool:
        return space.free_bytes < self.free_min_bytes or _usage(space) >= self.usage_threshold

    def has_room(self, space: DiskSpace) -> bool:
        return space.free_bytes >= self.free_min_bytes and _usage(space) < self.usage_lwm_threshold

    def next_full(self, was_full: bool, space: DiskSpace) -> bool:
        """Whether the disk counts as full now, given whether it did (the hysteresis)."""
        return not self.has_room(space) if was_full else self.is_full(space)

    def full_line_bytes(self, total_bytes: int) -> int:
        """Free bytes at which a disk of ``total_bytes`` turns full."""
        return max(self.free_min_bytes, round(total_bytes * (1 - self.usage_threshold)))

    def describe(self, space: DiskSpace) -> str:
        """Free space against the lines, for logs and health answers (one line)."""
        floor = f", floor {self.free_min_bytes} bytes" if self.free_min_bytes else ""
        return (
            f"free disk {space.free_bytes} of {space.total_bytes} bytes, usage "
            f"{_usage(space):.1%}, threshold {self.usage_threshold:.0%} (writable again under "
            f"{self.usage_lwm_threshold:.0%}{floor})"
        )


def _usage(space: DiskSpace) -> float:
    if space.total_bytes <= 0:
        return 1.0
    return 1 - space.free_bytes / space.total_bytes


def default_check_every_bytes(full_line_bytes: int) -> int:
    """A quarter of the free space the full line leaves; 0 (no check by bytes) when the line
    is at 0 bytes."""
    return max(full_line_bytes // 4, 0)


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
