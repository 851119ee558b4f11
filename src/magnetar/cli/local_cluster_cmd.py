"""``magnetar local-cluster``: ZooKeeper, bookies and brokers on loopback until Ctrl+C
(see :mod:`magnetar.local_cluster`)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType

import click

from magnetar.cli.standalone_cmd import LOG_LEVELS
from magnetar.local_cluster import LocalCluster, LocalClusterConfig

CHILD_CHECK_INTERVAL_S = 0.5


@click.command("local-cluster")
@click.option("--brokers", default=1, show_default=True, type=click.IntRange(1, 16))
@click.option("--bookies", default=3, show_default=True, type=click.IntRange(1, 16))
@click.option(
    "--data-dir",
    default=Path("local-cluster"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="ZooKeeper's and the bookies' data, one log per process, the ports picked.",
)
@click.option("--zookeeper-port", default=2181, show_default=True, type=int)
@click.option(
    "--broker-port",
    default=6650,
    show_default=True,
    type=int,
    help="First broker's binary port; the next brokers take the next ports. 0 = free ports "
    "(as for every port option; the ports picked are kept in DATA_DIR/ports.json).",
)
@click.option("--http-port", default=8080, show_default=True, type=int)
@click.option("--bookie-port", default=3181, show_default=True, type=int)
@click.option("--ensemble-size", default=2, show_default=True, type=click.IntRange(1))
@click.option("--write-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--log-level", default="INFO", show_default=True, type=click.Choice(LOG_LEVELS))
def local_cluster(
    brokers: int,
    bookies: int,
    data_dir: Path,
    zookeeper_port: int,
    broker_port: int,
    http_port: int,
    bookie_port: int,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    log_level: str,
) -> None:
    """A real ZooKeeper plus N brokers and M bookies on 127.0.0.1, each its own process,
    until Ctrl+C or SIGTERM (then all stop: brokers, bookies, ZooKeeper)."""
    t0 = time.perf_counter()
    try:
        config = LocalClusterConfig(
            data_dir=data_dir,
            brokers=brokers,
            bookies=bookies,
            zookeeper_port=zookeeper_port,
            broker_port=broker_port,
            http_port=http_port,
            bookie_port=bookie_port,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            log_level=log_level,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    cluster = LocalCluster(config)
    try:
        cluster.start()  # raises LocalClusterError (one line, via CliGroup) and stops all
        elapsed_s = time.perf_counter() - t0
        for p in cluster.processes():
            click.echo(f"  {p.name:<10} pid {p.pid:<8} log {p.log_path}")
        click.echo(
            f"magnetar local-cluster ready: service {cluster.service_url} "
            f"admin {cluster.admin_service_url} metadata {cluster.metadata_url} "
            f"data {cluster.data_dir} ({elapsed_s:.1f} s)"
        )
        reported: set[str] = set()
        while not stop.wait(CHILD_CHECK_INTERVAL_S):
            for p in cluster.exited():
                if p.name not in reported:
                    reported.add(p.name)
                    assert p.proc is not None
                    click.echo(
                        f"{p.name} exited with status {p.proc.returncode} (see {p.log_path}); "
                        "the other processes keep running",
                        err=True,
                    )
        click.echo("stopping the local cluster", err=True)
    finally:
        cluster.stop()
