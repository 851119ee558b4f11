"""The broker's default tiered-storage settings as server flags (Pulsar's
``managedLedgerOffload*`` and ``s3ManagedLedgerOffload*``), part of the broker options both
``magnetar standalone`` and ``magnetar broker`` declare through
:mod:`magnetar.cli.broker_options`. Namespace and topic offload policies override them.

:func:`check` turns a combination that cannot work into one usage line (the driver's
settings are checked by :class:`~magnetar.offload.settings.OffloadDriverConfig`, which does
not load the object-store library).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

from magnetar.offload.settings import DEFAULT_DELETION_LAG_MS, DRIVERS, OffloadDriverConfig

READ_PRIORITIES = ("tiered-storage-first", "bookkeeper-first")

OPTIONS: tuple[tuple[str, str, Callable[..., Any]], ...] = (
    (
        "offload_driver",
        "offload_driver",
        click.option(
            "--offload-driver",
            default=None,
            type=click.Choice(DRIVERS),
            help="Object store closed ledgers are offloaded to (managedLedgerOffloadDriver): "
            "filesystem (--offload-directory) or aws-s3/s3 (--offload-bucket). Credentials "
            "come from AWS_* variables or ~/.aws/credentials, never from flags.",
        ),
    ),
    (
        "offload_bucket",
        "offload_bucket",
        click.option(
            "--offload-bucket",
            default=None,
            help="S3 bucket of the aws-s3/s3 driver (s3ManagedLedgerOffloadBucket).",
        ),
    ),
    (
        "offload_region",
        "offload_region",
        click.option(
            "--offload-region",
            default=None,
            help="S3 region (s3ManagedLedgerOffloadRegion).",
        ),
    ),
    (
        "offload_endpoint",
        "offload_endpoint",
        click.option(
            "--offload-endpoint",
            default=None,
            help="S3-compatible endpoint URL, e.g. MinIO's (s3ManagedLedgerOffloadServiceEndpoint).",
        ),
    ),
    (
        "offload_directory",
        "offload_directory",
        click.option(
            "--offload-directory",
            default=None,
            help="Root directory of the filesystem driver (fileSystemURI).",
        ),
    ),
    (
        "offload_threshold_bytes",
        "offload_threshold_bytes",
        click.option(
            "--offload-threshold-bytes",
            default=-1,
            show_default=True,
            type=click.IntRange(min=-1),
            help="Offload a topic's closed ledgers, oldest first, while its bytes on the "
            "bookies exceed this (managedLedgerOffloadThresholdInBytes; -1: off, 0: every "
            "ledger as it closes).",
        ),
    ),
    (
        "offload_deletion_lag_ms",
        "offload_deletion_lag_ms",
        click.option(
            "--offload-deletion-lag-ms",
            default=DEFAULT_DELETION_LAG_MS,
            show_default=True,
            type=click.IntRange(min=0),
            help="Delete a ledger's bookie copy this long after its offload completed "
            "(managedLedgerOffloadDeletionLagMs).",
        ),
    ),
    (
        "offload_read_priority",
        "offload_read_priority",
        click.option(
            "--offload-read-priority",
            default=READ_PRIORITIES[0],
            show_default=True,
            type=click.Choice(READ_PRIORITIES),
            help="Which copy serves reads of an offloaded ledger while both exist "
            "(managedLedgerDataReadPriority).",
        ),
    ),
)
"""(click parameter, ``BrokerConfig`` field, option)."""


def check(values: Mapping[str, Any]) -> None:
    """Raises :class:`click.UsageError` (one line) for settings that cannot work together."""
    driver = values["offload_driver"]
    if driver is None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in (
                "offload_bucket",
                "offload_region",
                "offload_endpoint",
                "offload_directory",
            )
            if values[name] is not None
        ]
        if given:
            raise click.UsageError(f"{given[0]} needs --offload-driver")
        return
    if driver == "filesystem" and values["offload_bucket"] is not None:
        raise click.UsageError("--offload-bucket is for the aws-s3/s3 drivers, not filesystem")
    if driver != "filesystem" and values["offload_directory"] is not None:
        raise click.UsageError(f"--offload-directory is for the filesystem driver, not {driver}")
    try:
        OffloadDriverConfig(
            driver,
            bucket=values["offload_bucket"],
            region=values["offload_region"],
            endpoint=values["offload_endpoint"],
            directory=values["offload_directory"],
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
