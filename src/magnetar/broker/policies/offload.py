"""Offload policies: Pulsar's ``OffloadPolicies`` JSON, and how the topic, namespace and
broker levels combine into the :class:`~magnetar.offload.settings.OffloadSettings` a topic
runs with. Pure: no I/O.

The JSON fields read (Pulsar's ``OffloadPoliciesImpl`` names; every other field is kept as
given in ``extra``)::

    managedLedgerOffloadDriver               filesystem | aws-s3 | S3 (case-insensitive)
    managedLedgerOffloadThresholdInBytes     offload while the bookies hold more (-1: off)
    managedLedgerOffloadThresholdInSeconds   offload ledgers older than this (-1: off)
    managedLedgerOffloadDeletionLagInMillis  keep the bookie copy this long after offload
    managedLedgerOffloadedReadPriority       TIERED_STORAGE_FIRST | BOOKKEEPER_FIRST
    managedLedgerOffloadBucket, s3ManagedLedgerOffloadBucket           (either)
    managedLedgerOffloadRegion, s3ManagedLedgerOffloadRegion           (either)
    managedLedgerOffloadServiceEndpoint, s3ManagedLedgerOffloadServiceEndpoint
    fileSystemURI                            the filesystem driver's root (file:///… or a path)

Precedence, as Pulsar's ``OffloadPoliciesImpl.mergeConfiguration``: field by field, the
topic's ``offloadPolicies``, else the namespace level, else the broker's flags. The
namespace level is its ``offload_policies`` with the older single-value policies
(``offload_threshold``, ``offload_threshold_in_seconds``, ``offload_deletion_lag_ms``)
filling the fields it leaves unset (Pulsar's ``oldPoliciesCompatible``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Self

from magnetar.broker.policies.json_fields import PolicyError, json_int, json_object
from magnetar.common.frozen_struct import frozen_struct
from magnetar.offload.settings import (
    DEFAULT_DELETION_LAG_MS,
    NO_OFFLOAD,
    OffloadDriverConfig,
    OffloadSettings,
    ReadPriority,
)

SUPPORTED_DRIVERS = ("filesystem", "aws-s3", "S3")
"""Driver names this broker accepts, as Pulsar spells them (compared case-insensitively)."""

_S3_DRIVERS = ("aws-s3", "s3")

# (attribute, JSON names read in order; the first is the one written)
_STRINGS = (
    ("driver", ("managedLedgerOffloadDriver",)),
    ("bucket", ("managedLedgerOffloadBucket", "s3ManagedLedgerOffloadBucket")),
    ("region", ("managedLedgerOffloadRegion", "s3ManagedLedgerOffloadRegion")),
    (
        "endpoint",
        ("managedLedgerOffloadServiceEndpoint", "s3ManagedLedgerOffloadServiceEndpoint"),
    ),
    ("directory", ("fileSystemURI",)),
)
_NUMBERS = (
    ("threshold_bytes", "managedLedgerOffloadThresholdInBytes"),
    ("threshold_s", "managedLedgerOffloadThresholdInSeconds"),
    ("deletion_lag_ms", "managedLedgerOffloadDeletionLagInMillis"),
)
_READ_PRIORITY = "managedLedgerOffloadedReadPriority"
_KNOWN = frozenset(
    [name for _, names in _STRINGS for name in names]
    + [name for _, name in _NUMBERS]
    + [_READ_PRIORITY]
)


def read_priority_of(value: str) -> ReadPriority:
    """``tiered-storage-first`` / ``TIERED_STORAGE_FIRST`` (and the same for
    ``bookkeeper-first``). Raises :class:`PolicyError` naming the accepted values."""
    text = value.strip().lower().replace("_", "-")
    for priority in ReadPriority:
        if priority.value == text:
            return priority
    raise PolicyError(
        f"{_READ_PRIORITY} must be one of tiered-storage-first, bookkeeper-first, got {value!r}"
    )


@frozen_struct(kw_only=False)
class OffloadPolicies:
    """One level's offload settings; ``None`` is "not set at this level"."""

    driver: str | None = None
    threshold_bytes: int | None = None
    threshold_s: int | None = None
    deletion_lag_ms: int | None = None
    read_priority: ReadPriority | None = None
    bucket: str | None = None
    region: str | None = None
    endpoint: str | None = None
    directory: str | None = None
    """``fileSystemURI``: the filesystem driver's root."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Pulsar fields not modelled (``offloadersDirectory``, block sizes, ...), kept."""

    def with_(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def is_s3(self) -> bool:
        return self.driver is not None and self.driver.lower() in _S3_DRIVERS

    def is_filesystem(self) -> bool:
        return self.driver is not None and self.driver.lower() == "filesystem"

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON: unset fields left out; an S3 driver's bucket, region and endpoint
        under both the generic and the ``s3…`` names, as ``OffloadPoliciesImpl.create``."""
        body = dict(self.extra)
        for attribute, names in _STRINGS:
            value = getattr(self, attribute)
            if value is None:
                continue
            body[names[0]] = value
            if len(names) > 1 and self.is_s3():
                body[names[1]] = value
        for attribute, name in _NUMBERS:
            value = getattr(self, attribute)
            if value is not None:
                body[name] = value
        if self.read_priority is not None:
            body[_READ_PRIORITY] = self.read_priority.name
        return body

    @classmethod
    def from_json(cls, value: Any) -> OffloadPolicies:
        """Raises :class:`PolicyError` for a malformed value (a field of the wrong type,
        an unknown read priority)."""
        body = json_object(value, "offload policies")
        fields: dict[str, Any] = {}
        for attribute, names in _STRINGS:
            found = None
            for name in names:
                item = body.get(name)
                if item is None:
                    continue
                if not isinstance(item, str):
                    raise PolicyError(f"{name} must be a string")
                if item:
                    found = item
                    break
            fields[attribute] = found
        for attribute, name in _NUMBERS:
            item = body.get(name)
            fields[attribute] = None if item is None else json_int(item, name)
        priority = body.get(_READ_PRIORITY)
        if priority is not None and not isinstance(priority, str):
            raise PolicyError(f"{_READ_PRIORITY} must be a string")
        return cls(
            read_priority=None if priority is None else read_priority_of(priority),
            extra={k: v for k, v in body.items() if k not in _KNOWN},
            **fields,
        )


def problem(policies: OffloadPolicies) -> str | None:
    """Why ``policies`` cannot be stored, or None: Pulsar's checks (a supported driver, a
    bucket for S3) and ours (no negative deletion lag, a ``file://`` or plain path for
    ``fileSystemURI``). Thresholds below 0 are allowed: they turn a trigger off."""
    if policies.driver is None:
        return "The offload driver (managedLedgerOffloadDriver) must be specified"
    if policies.driver.lower() not in (d.lower() for d in SUPPORTED_DRIVERS):
        return f"The driver {policies.driver} is not supported, supported values: " + ", ".join(
            SUPPORTED_DRIVERS
        )
    if policies.is_s3() and not policies.bucket:
        return "The bucket must be specified for the S3 offload driver"
    if policies.deletion_lag_ms is not None and policies.deletion_lag_ms < 0:
        return "The offload deletion lag must be 0 or more"
    if policies.directory is not None and _directory_of(policies.directory) is None:
        return f"fileSystemURI must be a file:// URI or a local path, got {policies.directory}"
    return None


def _directory_of(uri: str) -> str | None:
    if uri.startswith("file://"):
        return uri.removeprefix("file://") or None
    return None if "://" in uri else uri


def namespace_level(
    offload_policies: OffloadPolicies | None,
    offload_threshold: int,
    offload_threshold_in_seconds: int,
    offload_deletion_lag_ms: int | None,
) -> OffloadPolicies | None:
    """Pulsar's ``oldPoliciesCompatible``: the namespace's ``offload_policies`` with the
    single-value policies filling what it leaves unset (-1 and None are "unset")."""
    unset = offload_threshold == -1 and offload_threshold_in_seconds == -1
    if unset and offload_deletion_lag_ms is None:
        return offload_policies
    level = offload_policies or OffloadPolicies()
    if level.threshold_bytes is None and offload_threshold != -1:
        level = level.with_(threshold_bytes=offload_threshold)
    if level.threshold_s is None and offload_threshold_in_seconds != -1:
        level = level.with_(threshold_s=offload_threshold_in_seconds)
    if level.deletion_lag_ms is None and offload_deletion_lag_ms is not None:
        level = level.with_(deletion_lag_ms=offload_deletion_lag_ms)
    return level


def merge(*levels: OffloadPolicies | None) -> OffloadPolicies:
    """Pulsar's ``mergeConfiguration``: per field, the first level that sets it (give the
    levels topic first, broker last)."""
    merged: dict[str, Any] = {}
    for f in dataclasses.fields(OffloadPolicies):
        if f.name == "extra":
            continue
        for level in levels:
            value = None if level is None else getattr(level, f.name)
            if value is not None:
                merged[f.name] = value
                break
    extra: dict[str, Any] = {}
    for level in reversed(levels):
        if level is not None:
            extra.update(level.extra)
    return OffloadPolicies(extra=extra, **merged)


def settings_of(policies: OffloadPolicies) -> OffloadSettings:
    """What the managed ledger runs with. A driver that cannot work (unsupported, no
    bucket, no directory) is no driver: nothing is offloaded automatically, and a manual
    offload is refused with the offloader's reason."""
    if policies == OffloadPolicies():
        return NO_OFFLOAD
    driver: OffloadDriverConfig | None = None
    if policies.driver is not None:
        # only the driver's own fields: a level below may name another store's
        s3, directory = policies.is_s3(), policies.directory
        try:
            driver = OffloadDriverConfig(
                driver=policies.driver.lower(),
                bucket=policies.bucket if s3 else None,
                region=policies.region if s3 else None,
                endpoint=policies.endpoint if s3 else None,
                directory=None if s3 or directory is None else _directory_of(directory),
            )
        except ValueError:
            driver = None
    seconds = _or(policies.threshold_s, -1)
    return OffloadSettings(
        driver=driver,
        threshold_bytes=_or(policies.threshold_bytes, -1),
        threshold_ms=-1 if seconds < 0 else seconds * 1000,
        deletion_lag_ms=max(0, _or(policies.deletion_lag_ms, DEFAULT_DELETION_LAG_MS)),
        read_priority=policies.read_priority or ReadPriority.TIERED_STORAGE_FIRST,
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def broker_level(
    driver: str | None,
    bucket: str | None = None,
    region: str | None = None,
    endpoint: str | None = None,
    directory: str | None = None,
    threshold_bytes: int = -1,
    deletion_lag_ms: int = DEFAULT_DELETION_LAG_MS,
    read_priority: str = ReadPriority.TIERED_STORAGE_FIRST.value,
) -> OffloadPolicies:
    """The broker's ``--offload-*`` flags as the last level of :func:`merge` (Pulsar's
    ``managedLedgerOffload*`` in broker.conf). Raises :class:`PolicyError` for an unknown
    read priority."""
    return OffloadPolicies(
        driver=driver,
        bucket=bucket,
        region=region,
        endpoint=endpoint,
        directory=directory,
        threshold_bytes=threshold_bytes,
        deletion_lag_ms=deletion_lag_ms,
        read_priority=read_priority_of(read_priority),
    )
