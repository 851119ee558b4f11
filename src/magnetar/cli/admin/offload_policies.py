"""Offload policies, as ``pulsar-admin`` spells them (REST: docs/tiered-storage.md,
"Policies"):

* ``namespaces set-offload-threshold T/N --size 10M [--time 1h]``,
  ``get-offload-threshold``;
* ``namespaces set-offload-deletion-lag T/N --lag 1h``, ``get-offload-deletion-lag``,
  ``clear-offload-deletion-lag``;
* ``namespaces set-offload-policies T/N -d DRIVER [-b BUCKET -r REGION -e ENDPOINT]
  [-oat SIZE] [-oats TIME] [-oae LAG] [-orp tiered-storage-first|bookkeeper-first]``,
  ``get-offload-policies``, ``remove-offload-policies``;
* ``topics set-offload-policies TOPIC -d DRIVER [-b -r -e] [-t SIZE] [-ts TIME] [-dl LAG]
  [-orp …]``, ``get-offload-policies [--applied]``, ``remove-offload-policies``.

``--directory`` (both ``set-offload-policies``) is the filesystem driver's root, Pulsar's
``fileSystemURI``, which ``pulsar-admin`` leaves to broker.conf. No credential options:
credentials come from the standard environment variables and files of the broker.

Importing this module adds the commands to the ``namespaces`` and ``topics`` groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic, namespace_path
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.topics import topics
from magnetar.cli.admin.units import duration_ms, duration_s, size_bytes
from magnetar.cli.output import output_option, printer

_NAMESPACE = click.argument("namespace", metavar="TENANT/NAMESPACE")
_TOPIC = click.argument("topic", type=TOPIC, metavar="TOPIC")
_PRIORITIES = click.Choice(["tiered-storage-first", "bookkeeper-first"], case_sensitive=False)


@namespaces.command("set-offload-threshold")
@_NAMESPACE
@click.option(
    "--size",
    "-s",
    required=True,
    help="Bytes a topic keeps on the bookies before its closed ledgers are offloaded "
    "(10M, 16G, 100; 0: offload each ledger once closed; -1: the broker's default).",
)
@click.option(
    "--time",
    "-t",
    "time_",
    default="-1",
    show_default=True,
    help="Age of a closed ledger before it is offloaded (10m, 5h, 3d; -1: unset).",
)
@output_option
def set_offload_threshold(namespace: str, size: str, time_: str) -> None:
    """Set the namespace's offload thresholds (offloadThreshold, offloadThresholdInSeconds)."""
    path = namespace_path(namespace)
    threshold, seconds = size_bytes(size), duration_s(time_)
    rest().put(f"{path}/offloadThreshold", threshold)
    rest().put(f"{path}/offloadThresholdInSeconds", seconds)
    printer().done(
        f"offload threshold of {namespace} set",
        namespace=namespace,
        offloadThresholdInBytes=threshold,
        offloadThresholdInSeconds=seconds,
    )  # fmt: skip


@namespaces.command("get-offload-threshold")
@_NAMESPACE
@output_option
def get_offload_threshold(namespace: str) -> None:
    """Show the namespace's offload thresholds (-1: unset)."""
    path = namespace_path(namespace)
    threshold = rest().get(f"{path}/offloadThreshold")
    seconds = rest().get(f"{path}/offloadThresholdInSeconds")
    if printer().json:
        printer().result(
            {"offloadThresholdInBytes": threshold, "offloadThresholdInSeconds": seconds}
        )
    else:
        click.echo(f"offloadThresholdInBytes: {threshold}")
        click.echo(f"offloadThresholdInSeconds: {seconds}")


@namespaces.command("set-offload-deletion-lag")
@_NAMESPACE
@click.option(
    "--lag", "-l", required=True,
    help="How long a ledger's bookie copy is kept after its offload (10m, 5h, 3d, 2w).",
)  # fmt: skip
@output_option
def set_offload_deletion_lag(namespace: str, lag: str) -> None:
    """Set the namespace's offload deletion lag."""
    seconds = duration_s(lag)
    lag_ms = seconds * 1000 if seconds >= 0 else seconds
    rest().put(f"{namespace_path(namespace)}/offloadDeletionLagMs", lag_ms)
    printer().done(f"offload deletion lag of {namespace} set", namespace=namespace, lagMs=lag_ms)


@namespaces.command("get-offload-deletion-lag")
@_NAMESPACE
@output_option
def get_offload_deletion_lag(namespace: str) -> None:
    """Show the namespace's offload deletion lag, in minutes (JSON: milliseconds)."""
    lag_ms = rest().get(f"{namespace_path(namespace)}/offloadDeletionLagMs")
    if printer().json:
        printer().result(lag_ms)
    elif lag_ms is None:
        click.echo("Unset for namespace. Defaulting to broker setting.")
    else:
        click.echo(f"{lag_ms // 60_000} minute(s)")


@namespaces.command("clear-offload-deletion-lag")
@_NAMESPACE
@output_option
def clear_offload_deletion_lag(namespace: str) -> None:
    """Clear the namespace's offload deletion lag (the broker's default applies)."""
    rest().delete(f"{namespace_path(namespace)}/offloadDeletionLagMs")
    printer().done(f"offload deletion lag of {namespace} cleared", namespace=namespace)


_STORE_OPTIONS = (
    click.option(
        "--driver", "-d", required=True,
        help="filesystem, aws-s3 or S3 (any S3-compatible endpoint).",
    ),
    click.option("--region", "-r", default=None, help="The S3 region."),
    click.option("--bucket", "-b", default=None, help="The S3 bucket (required for S3)."),
    click.option("--endpoint", "-e", default=None, help="The S3 endpoint (MinIO, Ceph, ...)."),
    click.option(
        "--directory", "directory", default=None,
        help="The filesystem driver's root: a path or file:// URI (Pulsar's fileSystemURI).",
    ),
    click.option(
        "--offloadedReadPriority", "-orp", "read_priority", type=_PRIORITIES, default=None,
        help="Which copy serves an offloaded ledger while both exist.",
    ),
)  # fmt: skip
_NAMESPACE_TRIGGERS = (
    click.option(
        "--maxBlockSize", "-mbs", "max_block", default=None,
        help="Accepted for pulsar-admin's sake; blocks are sized by the offloader.",
    ),
    click.option(
        "--readBufferSize", "-rbs", "read_buffer", default=None,
        help="Accepted for pulsar-admin's sake; reads are sized by the offloader.",
    ),
    click.option(
        "--offloadAfterElapsed", "-oae", "lag", default=None,
        help="Deletion lag: how long the bookie copy is kept (ms, or 10s, 3h, 2d).",
    ),
    click.option(
        "--offloadAfterThreshold", "-oat", "size", default=None,
        help="Offload while the bookies hold more than this (1M, 5G).",
    ),
    click.option(
        "--offloadAfterThresholdInSeconds", "-oats", "time_", default=None,
        help="Offload closed ledgers older than this (100m, 3h, 2d).",
    ),
)  # fmt: skip
_TOPIC_TRIGGERS = (
    click.option(
        "--maxBlockSizeInBytes", "-m", "max_block", default=None,
        help="Accepted for pulsar-admin's sake; blocks are sized by the offloader.",
    ),
    click.option(
        "--readBufferSizeInBytes", "-rb", "read_buffer", default=None,
        help="Accepted for pulsar-admin's sake; reads are sized by the offloader.",
    ),
    click.option(
        "--offloadThresholdInBytes", "-t", "size", default=None,
        help="Offload while the bookies hold more than this (bytes, or 1M, 5G).",
    ),
    click.option(
        "--offloadThresholdInSeconds", "-ts", "time_", default=None,
        help="Offload closed ledgers older than this (seconds, or 100m, 3h).",
    ),
    click.option(
        "--offloadDeletionLagInMillis", "-dl", "lag", default=None,
        help="How long the bookie copy is kept after offload (ms, or 10s, 3h).",
    ),
)  # fmt: skip


def policies_body(
    driver: str,
    region: str | None,
    bucket: str | None,
    endpoint: str | None,
    directory: str | None,
    read_priority: str | None,
    size: str | None,
    time_: str | None,
    lag: str | None,
    **_ignored: Any,
) -> dict[str, Any]:
    """Pulsar's ``OffloadPolicies`` JSON for the options given (unset ones left out)."""
    if driver.lower() in ("s3", "aws-s3") and not region and not endpoint:
        raise click.UsageError(
            "Either s3ManagedLedgerOffloadRegion or s3ManagedLedgerOffloadServiceEndpoint "
            "must be set if s3 offload enabled (--region or --endpoint)"
        )
    values: dict[str, Any] = {
        "managedLedgerOffloadDriver": driver,
        "managedLedgerOffloadRegion": region,
        "managedLedgerOffloadBucket": bucket,
        "managedLedgerOffloadServiceEndpoint": endpoint,
        "fileSystemURI": directory,
        "managedLedgerOffloadThresholdInBytes": None if size is None else size_bytes(size),
        "managedLedgerOffloadThresholdInSeconds": None if time_ is None else duration_s(time_),
        "managedLedgerOffloadDeletionLagInMillis": None if lag is None else duration_ms(lag),
        "managedLedgerOffloadedReadPriority": None
        if read_priority is None
        else read_priority.upper().replace("-", "_"),
    }
    return {key: value for key, value in values.items() if value is not None}


def _with(options: tuple[Any, ...], command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        command = option(command)
    return command


def _set_namespace_policies(namespace: str, **options: Any) -> None:
    """Set the namespace's offload policies (object store, thresholds, deletion lag)."""
    body = policies_body(**options)
    rest().post(f"{namespace_path(namespace)}/offloadPolicies", body)
    printer().done(f"offload policies of {namespace} set", namespace=namespace, **body)


namespaces.command("set-offload-policies")(
    _NAMESPACE(output_option(_with(_STORE_OPTIONS + _NAMESPACE_TRIGGERS, _set_namespace_policies)))
)


@namespaces.command("get-offload-policies")
@_NAMESPACE
@output_option
def get_namespace_offload_policies(namespace: str) -> None:
    """Show the namespace's offload policies (nothing when none is set)."""
    printer().result(rest().get(f"{namespace_path(namespace)}/offloadPolicies"))


@namespaces.command("remove-offload-policies")
@_NAMESPACE
@output_option
def remove_namespace_offload_policies(namespace: str) -> None:
    """Remove the namespace's offload policies."""
    rest().delete(f"{namespace_path(namespace)}/removeOffloadPolicies")
    printer().done(f"offload policies of {namespace} removed", namespace=namespace)


def _set_topic_policies(topic: Topic, **options: Any) -> None:
    """Set the topic's offload policies (they win over the namespace's, field by field)."""
    body = policies_body(**options)
    rest().post(f"{topic.path}/offloadPolicies", body)
    printer().done(f"offload policies of {topic.full} set", topic=topic.full, **body)


topics.command("set-offload-policies")(
    _TOPIC(output_option(_with(_STORE_OPTIONS + _TOPIC_TRIGGERS, _set_topic_policies)))
)


@topics.command("get-offload-policies")
@_TOPIC
@click.option(
    "--applied", "-ap", is_flag=True, default=False,
    help="The policies in force: the topic's, else the namespace's, else the broker's.",
)  # fmt: skip
@output_option
def get_topic_offload_policies(topic: Topic, applied: bool) -> None:
    """Show the topic's offload policies (nothing when none is set)."""
    query = "?applied=true" if applied else ""
    printer().result(rest().get(f"{topic.path}/offloadPolicies{query}"))


@topics.command("remove-offload-policies")
@_TOPIC
@output_option
def remove_topic_offload_policies(topic: Topic) -> None:
    """Remove the topic's offload policies (the namespace's apply)."""
    rest().delete(f"{topic.path}/offloadPolicies")
    printer().done(f"offload policies of {topic.full} removed", topic=topic.full)
