"""BookKeeper's disk usage lines: full at 0.95, room again only under 0.90."""

from __future__ import annotations

import pytest

from magnetar.bookie.disk_check import DiskSpace, DiskThresholds, default_check_every_bytes

GB = 1_000_000_000


def space(used_fraction: float, total: int = 100 * GB) -> DiskSpace:
    return DiskSpace(total, round(total * (1 - used_fraction)))


def test_full_at_the_usage_threshold_and_not_below() -> None:
    t = DiskThresholds()
    assert not t.is_full(space(0.949))
    assert t.is_full(space(0.95))
    assert t.is_full(space(1.0))


def test_room_again_only_under_the_low_water_mark() -> None:
    t = DiskThresholds()
    assert t.next_full(False, space(0.96))
    assert t.next_full(True, space(0.93)), "between the lines a full disk stays full"
    assert not t.next_full(False, space(0.93)), "and a disk with room keeps it"
    assert not t.next_full(True, space(0.899))


def test_a_small_disk_freed_to_sixty_megabytes_has_room() -> None:
    """The field defect: 150 MB, 60 MB free (60 % used) stayed read-only under a 64 MiB
    floor. No floor by default now."""
    assert not DiskThresholds().next_full(True, DiskSpace(150 * 1024 * 1024, 60_000_000))


def test_the_optional_floor_applies_on_top() -> None:
    t = DiskThresholds(free_min_bytes=10 * GB)
    assert t.is_full(space(0.91))  # 9 GB free
    assert not t.has_room(space(0.85, total=60 * GB))  # 9 GB free, usage fine
    assert t.has_room(space(0.80))


def test_the_full_line_and_the_check_interval_by_bytes() -> None:
    t = DiskThresholds()
    assert t.full_line_bytes(100 * GB) == 5 * GB
    assert default_check_every_bytes(t.full_line_bytes(100 * GB)) == 5 * GB // 4
    assert DiskThresholds(free_min_bytes=8 * GB).full_line_bytes(100 * GB) == 8 * GB


@pytest.mark.parametrize(
    ("threshold", "lwm", "floor"), [(0.0, 0.5, 0), (1.5, 0.9, 0), (0.9, 0.95, 0), (0.95, 0.9, -1)]
)
def test_settings_that_cannot_work_are_refused(threshold: float, lwm: float, floor: int) -> None:
    with pytest.raises(ValueError):
        DiskThresholds(threshold, lwm, floor)


def test_the_description_names_usage_and_lines() -> None:
    text = DiskThresholds().describe(space(0.97))
    assert "usage 97.0%" in text and "threshold 95%" in text and "under 90%" in text
