"""``magnetar standalone``: the whole system in one process (see :mod:`magnetar.standalone`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from magnetar.cli.broker_options import broker_options, run_server
from magnetar.cli.journal_options import journal_options
from magnetar.cli.server_config_file import SERVER_CONTEXT, config_file_option
from magnetar.cli.server_setup import (
    LOG_LEVELS,
    configure_logging,
    log_level_option,
)

if TYPE_CHECKING:
    from magnetar.broker_server import BrokerServerConfig

__all__ = ["LOG_LEVELS", "standalone"]


@click.command(context_settings=SERVER_CONTEXT)
@config_file_option
@click.option(
    "--data-dir", default=Path("data"), show_default=True, type=click.Path(path_type=Path)
)
@broker_options(quorum_default=1)
@click.option(
    "--metadata-url",
    default=None,
    help="zk://host:port[,host:port]/chroot: keep metadata in ZooKeeper instead of the "
    "embedded store, where bookies of other processes register too (see --ensemble-size). "
    "No `magnetar broker` may share it: the standalone owns every topic.",
)
@click.option(
    "--session-timeout-s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="ZooKeeper session timeout (with --metadata-url).",
)
@click.option(
    "--bookie-port",
    default=None,
    type=click.IntRange(min=0, max=65535),
    help="The in-process bookie's port (default: a free one on the first start, then the "
    "same one; the bookie's id, host:port, is in every ledger it holds).",
)
@click.option(
    "--bookie-write-cache-size-mb",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="MiB of written entries the bookie buffers before writing them to its entry logs "
    "(dbStorage_writeCacheMaxSizeMb; they are also written every second).",
)
@click.option(
    "--bookie-gc-interval-ms",
    default=60_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="How often the bookie garbage-collects deleted ledgers (gcWaitTime): their "
    "entries leave its index and entry logs.",
)
@journal_options
@click.option(
    "--functions-worker/--no-functions-worker",
    default=True,
    show_default=True,
    help="Run one Functions Worker in the process (REST /admin/v3/functions on the HTTP port).",
)
@click.option(
    "--functions-runtime",
    default="thread",
    show_default=True,
    type=click.Choice(["thread", "process"]),
    help="How the worker runs function instances: threads of this process, or subprocesses.",
)
@log_level_option
def standalone(
    data_dir: Path,
    broker_server: BrokerServerConfig,
    metadata_url: str | None,
    session_timeout_s: float,
    bookie_port: int | None,
    bookie_write_cache_size_mb: int,
    bookie_gc_interval_ms: int,
    journal_skip_invalid_records: bool,
    journal_reuse_files: bool,
    functions_worker: bool,
    functions_runtime: str,
    log_level: str,
) -> None:
    """One process: embedded metadata store, a bookie, a broker and a Functions Worker."""
    started = time.perf_counter()
    if metadata_url is not None and not metadata_url.startswith("zk://"):
        raise click.UsageError(
            f"--metadata-url {metadata_url!r}: not a ZooKeeper URL (zk://host:port/chroot)"
        )
    ensemble_size = broker_server.broker.ensemble_size
    if ensemble_size > 1 and metadata_url is None:
        raise click.UsageError(
            f"--ensemble-size {ensemble_size} needs other bookies: with the embedded store "
            "the standalone has one; give --metadata-url"
        )
    import dataclasses
    import sys

    if functions_worker:
        from magnetar.auth.server_options import ServerAuthError, own_client_credentials

        try:
            worker_credentials = own_client_credentials(
                broker_server.broker.auth, broker_server.broker_client_auth
            )
        except ServerAuthError as exc:
            click.echo(f"magnetar standalone: {exc}", err=True)
            sys.exit(2)
        broker_server = dataclasses.replace(broker_server, broker_client_auth=worker_credentials)
    from magnetar.standalone import StandaloneConfig, run

    configure_logging(log_level)
    config = StandaloneConfig(
        data_dir=data_dir,
        server=broker_server,
        bookie_port=bookie_port,
        bookie_write_cache_size_mb=bookie_write_cache_size_mb,
        bookie_gc_interval_ms=bookie_gc_interval_ms,
        bookie_journal_skip_invalid_records=journal_skip_invalid_records,
        bookie_journal_reuse_files=journal_reuse_files,
        functions_worker=functions_worker,
        functions_runtime=functions_runtime,
        metadata_url=metadata_url,
        metadata_session_timeout_s=session_timeout_s,
    )
    from magnetar.bookie.errors import CookieMismatch, IndexCorrupt, JournalCorrupt

    try:
        run_server(run(config, started), broker_server, {"--bookie-port": bookie_port})
    except (CookieMismatch, IndexCorrupt, JournalCorrupt) as exc:
        click.echo(f"magnetar standalone: {exc}", err=True)
        sys.exit(3)
