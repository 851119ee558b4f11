"""``magnetar bookie``: run one storage node until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
from pathlib import Path

import click

from magnetar.bookie import Bookie, BookieConfig
from magnetar.bookie.errors import CookieMismatch, IndexCorrupt, JournalCorrupt
from magnetar.bookie.gc_tuning import (
    fix_mmap_threshold,
    start_heap_trimmer,
    tune_gc_for_serving,
)
from magnetar.cli.journal_options import journal_options
from magnetar.cli.server_config_file import SERVER_CONTEXT, config_file_option
from magnetar.cli.server_setup import configure_logging, install_uvloop
from magnetar.common.gil import tune_gil_for_serving
from magnetar.common.shutdown import StopRequested, stop_requested, unless_stopped

log = logging.getLogger("magnetar.bookie")

METADATA_URL_SCHEMES = ("zk://", "sqlite://", "memory:")


def _metadata_url(url: str) -> str:
    if not url.startswith(METADATA_URL_SCHEMES):
        raise click.BadParameter(f"{url!r} is not zk://..., sqlite://... or memory:...")
    return url


def _rack(rack: str | None) -> str | None:
    from magnetar.ledger.racks import InvalidRackConfiguration, normalized_rack

    if rack is None:
        return None
    try:
        return normalized_rack(rack)
    except InvalidRackConfiguration as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(context_settings=SERVER_CONTEXT)
@config_file_option
@click.option(
    "--metadata-url",
    required=True,
    callback=lambda _ctx, _param, url: _metadata_url(url),
    help="zk://host:port[,host:port]/chroot, sqlite:///path or memory:name",
)
@click.option("--data-dir", required=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=3181, show_default=True, type=int)
@click.option("--advertised-host", default=None)
@click.option(
    "--rack",
    default=None,
    callback=lambda _ctx, _param, rack: _rack(rack),
    help="Where this bookie stands, /region/rack (e.g. /east/rack-1), kept in its "
    "registration: ensembles spread over racks and, with the brokers' region-aware policy, "
    "regions. 'admin bookies set-bookie-rack' overrides it.",
)
@click.option(
    "--disk-usage-threshold",
    default=0.95,  # BookieConfig.disk_usage_threshold
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="turn read-only once the disk's usage reaches this fraction",
)
@click.option(
    "--disk-usage-lwm-threshold",
    default=0.90,  # BookieConfig.disk_usage_lwm_threshold
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="turn writable again once the disk's usage is below this fraction",
)
@click.option(
    "--disk-free-min-bytes",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="also read-only while free space is under this many bytes (0: no floor)",
)
@click.option("--gc-interval-ms", default=60_000, show_default=True, type=int)
@click.option(
    "--checkpoint-interval-ms",
    default=1_000,  # BookieConfig.checkpoint_interval_ms
    show_default=True,
    type=int,
)
@click.option("--entry-log-size-max-bytes", default=512 * 1024**2, show_default=True, type=int)
@click.option(
    "--journal-group-wait-ms",
    default=1.0,  # BookieConfig.journal_group_wait_ms
    show_default=True,
    type=float,
    help="pace a loaded journal's syncs: one no sooner than this after the previous (0 = at once)",
)
@click.option("--session-timeout-s", default=10.0, show_default=True, type=float)
@journal_options
@click.option(
    "--autorecovery/--no-autorecovery",
    default=True,
    show_default=True,
    help="Run the replication worker: copy lost replicas onto this bookie when the "
    "controller asks (autorecovery).",
)
@click.option(
    "--autorecovery-tasks-max",
    default=2,  # replication_worker.DEFAULT_TASKS_IN_FLIGHT_MAX
    show_default=True,
    type=click.IntRange(min=1),
    help="re-replication tasks this bookie's worker runs at once",
)
def bookie(
    metadata_url: str,
    data_dir: Path,
    host: str,
    port: int,
    advertised_host: str | None,
    rack: str | None,
    disk_usage_threshold: float,
    disk_usage_lwm_threshold: float,
    disk_free_min_bytes: int,
    gc_interval_ms: int,
    checkpoint_interval_ms: int,
    entry_log_size_max_bytes: int,
    journal_group_wait_ms: float,
    session_timeout_s: float,
    journal_skip_invalid_records: bool,
    journal_reuse_files: bool,
    autorecovery: bool,
    autorecovery_tasks_max: int,
) -> None:
    """A storage node holding replicated ledger entries."""
    configure_logging("INFO")
    if disk_usage_lwm_threshold > disk_usage_threshold:
        raise click.UsageError(
            f"--disk-usage-lwm-threshold {disk_usage_lwm_threshold} is above "
            f"--disk-usage-threshold {disk_usage_threshold}"
        )
    config = BookieConfig(
        data_dir=data_dir,
        host=host,
        port=port,
        advertised_host=advertised_host,
        rack=rack,
        disk_usage_threshold=disk_usage_threshold,
        disk_usage_lwm_threshold=disk_usage_lwm_threshold,
        disk_free_min_bytes=disk_free_min_bytes,
        gc_interval_ms=gc_interval_ms,
        checkpoint_interval_ms=checkpoint_interval_ms,
        entry_log_size_max_bytes=entry_log_size_max_bytes,
        journal_group_wait_ms=journal_group_wait_ms,
        journal_skip_invalid_records=journal_skip_invalid_records,
        journal_reuse_files=journal_reuse_files,
    )
    install_uvloop()
    tune_gc_for_serving()
    tune_gil_for_serving()
    fix_mmap_threshold()
    start_heap_trimmer()
    try:
        asyncio.run(
            _run(
                config,
                metadata_url,
                session_timeout_s,
                autorecovery_tasks_max if autorecovery else 0,
            )
        )
    except (CookieMismatch, IndexCorrupt, JournalCorrupt) as exc:
        click.echo(f"magnetar bookie: {exc}", err=True)
        sys.exit(3)


async def _run(
    config: BookieConfig, metadata_url: str, session_timeout_s: float, autorecovery_tasks_max: int
) -> None:
    """Serve until SIGTERM/SIGINT; ``autorecovery_tasks_max`` 0 runs no replication worker.

    A metadata session that expires (ZooKeeper paused or cut off past the session timeout)
    takes the bookie's registration with it, and a store whose session is lost stays lost:
    the bookie is stopped and started again on a new session, over the same data directory
    and address, as BookKeeper's bookies re-register. Without it a bookie stayed up but
    unseen by brokers ("need 2 bookies, 0 available") until someone restarted it."""
    stop = stop_requested()
    announced = False
    while not stop.is_set():
        serving = await _serve_one_session(
            config, metadata_url, session_timeout_s, autorecovery_tasks_max, stop, announced
        )
        if serving is None:
            return
        announced = True
        config = dataclasses.replace(config, port=serving)  # same id on the next session


async def _serve_one_session(
    config: BookieConfig,
    metadata_url: str,
    session_timeout_s: float,
    autorecovery_tasks_max: int,
    stop: asyncio.Event,
    announced: bool,
) -> int | None:
    """Serve on one metadata session until ``stop`` (None) or the session is lost (the port
    served, for the next session)."""
    from magnetar.common.clock import SystemClock
    from magnetar.ledger.client import LedgerClient
    from magnetar.ledger.replication_worker import ReplicationWorker
    from magnetar.metadata import connect, wait_session_lost

    try:
        store = await unless_stopped(
            connect(metadata_url, session_timeout_s=session_timeout_s), stop
        )
    except StopRequested:
        return None
    node = Bookie(config, store)
    client: LedgerClient | None = None
    worker: ReplicationWorker | None = None
    lost = asyncio.Event()

    async def watch_session() -> None:
        await wait_session_lost(store)
        lost.set()

    watcher = asyncio.create_task(watch_session())
    try:
        await node.start()
        if autorecovery_tasks_max:
            clock = SystemClock()
            client = LedgerClient(store, clock=clock)
            worker = ReplicationWorker(
                store,
                node.bookie_id,
                client,
                clock=clock,
                tasks_in_flight_max=autorecovery_tasks_max,
            )
            worker.start()
        if announced:
            log.warning("bookie %s: serving again on a new metadata session", node.bookie_id)
        else:
            print(f"bookie {node.bookie_id} ready", flush=True)
        waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if stop.is_set():
            return None
        log.warning(
            "bookie %s: metadata session lost (its registration is gone); restarting on a "
            "new session",
            node.bookie_id,
        )
        return node.port
    finally:
        watcher.cancel()
        if worker is not None:
            await worker.close()
        if client is not None:
            await client.close()
        with contextlib.suppress(Exception):
            await node.stop()
        await store.close()
