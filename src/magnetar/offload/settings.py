"""Where and when a topic's closed ledgers are offloaded: the values the broker's flags,
namespace policies and topic policies give, in one shape.

``OffloadDriverConfig`` names an object store (Pulsar's ``managedLedgerOffloadDriver``
with its bucket, region, endpoint, or a directory for ``filesystem``). The broker keeps one
offloader per distinct value. ``OffloadSettings`` adds the triggers and the read priority
(Pulsar's ``OffloadPolicies``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

DEFAULT_DELETION_LAG_MS = 4 * 3600 * 1000
"""Pulsar's ``managedLedgerOffloadDeletionLagMs``: a bookie copy is kept this long after the
offload completes."""

DRIVERS = ("filesystem", "aws-s3", "s3")
"""Drivers this broker can build (``s3`` is any S3-compatible endpoint)."""


class ReadPriority(enum.Enum):
    """Pulsar's ``managedLedgerOffloadedReadPriority``: which copy serves a read of an
    offloaded ledger while both exist."""

    TIERED_STORAGE_FIRST = "tiered-storage-first"
    BOOKKEEPER_FIRST = "bookkeeper-first"


@dataclass(frozen=True, slots=True)
class OffloadDriverConfig:
    """One object store. ``directory`` is the root of ``filesystem``; ``bucket``,
    ``region`` and ``endpoint`` are S3's (credentials never here: the standard environment
    variables and files). Raises :class:`ValueError` for settings that cannot work."""

    driver: str
    bucket: str | None = None
    region: str | None = None
    endpoint: str | None = None
    directory: str | None = None

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise ValueError(
                f"offload driver {self.driver!r}: expected one of {', '.join(DRIVERS)}"
            )
        if self.driver == "filesystem" and not self.directory:
            raise ValueError(
                "the filesystem offload driver needs a directory (--offload-directory)"
            )
        if self.driver != "filesystem" and not self.bucket:
            raise ValueError(f"the {self.driver} offload driver needs a bucket (--offload-bucket)")


@dataclass(frozen=True, slots=True)
class OffloadSettings:
    """What applies to one topic. ``driver`` None: offload not configured (a manual offload
    is refused, no automatic one runs). Thresholds of -1 are off; a size threshold of 0
    offloads every ledger as soon as it closes."""

    driver: OffloadDriverConfig | None = None
    threshold_bytes: int = -1
    """``offloadThresholdInBytes``: offload closed ledgers while the topic's storage on the
    bookies exceeds this."""
    threshold_ms: int = -1
    """``offloadThresholdInSeconds`` (in ms here): offload closed ledgers older than this."""
    deletion_lag_ms: int = DEFAULT_DELETION_LAG_MS
    read_priority: ReadPriority = ReadPriority.TIERED_STORAGE_FIRST


NO_OFFLOAD = OffloadSettings()
