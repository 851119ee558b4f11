"""``magnetar local-cluster``: ZooKeeper, bookies, brokers and a Functions Worker on loopback
until Ctrl+C (see :mod:`magnetar.local_cluster`).

The servers' security options (one declaration:
:data:`magnetar.auth.server_options.SERVER_AUTH_OPTIONS`) and the brokers' connection limits
are passed on to every broker (:mod:`magnetar.local_cluster_security`), as are the
tiered-storage flags (:mod:`magnetar.cli.offload_options`) and the managed-ledger flags
(:data:`MANAGED_LEDGER_FLAGS`: ledger rollover, entry cache) that are given; settings that cannot
work end the command before anything starts, in one line with exit status 2.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import click

from magnetar.auth.server_options import ServerAuthError
from magnetar.cli import offload_options
from magnetar.cli.placement_options import forwarded_args as placement_args
from magnetar.cli.placement_options import placement_options
from magnetar.cli.server_auth import server_auth_option_values
from magnetar.cli.standalone_cmd import LOG_LEVELS
from magnetar.local_cluster import FUNCTIONS_RUNTIMES, LocalCluster, LocalClusterConfig
from magnetar.local_cluster_security import ClusterTokens, forwarded_args, plan_security

CHILD_CHECK_INTERVAL_S = 0.5

MANAGED_LEDGER_FLAGS: tuple[tuple[str, int, str], ...] = (
    (
        "--managed-ledger-max-entries-per-ledger",
        1,
        "a topic's ledger rolls over after this many entries (managedLedgerMaxEntriesPerLedger)",
    ),
    (
        "--managed-ledger-min-ledger-rollover-time-ms",
        0,
        "a ledger rolls over for its entry count no sooner than this after it was created "
        "(managedLedgerMinLedgerRolloverTimeMinutes; 0: at the count)",
    ),
    (
        "--managed-ledger-cache-size-mb",
        0,
        "MiB of recent entries all topics keep in memory together (managedLedgerCacheSizeMB)",
    ),
)
"""The broker's managed-ledger flags (``magnetar broker``'s, same names): flag, least value,
help. Each is passed on to every broker when given; unset, the broker's default holds."""


def managed_ledger_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds :data:`MANAGED_LEDGER_FLAGS` to a command, each defaulting to None (unset)."""
    for flag, least, text in reversed(MANAGED_LEDGER_FLAGS):
        f = click.option(
            flag,
            default=None,
            type=click.IntRange(min=least),
            help=f"Passed on to every broker: {text}; unset: the broker's default.",
        )(f)
    return f


def managed_ledger_args(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The broker arguments for the :data:`MANAGED_LEDGER_FLAGS` given in ``values`` (keyed
    by click parameter name; None: not given)."""
    args: tuple[str, ...] = ()
    for flag, _, _ in MANAGED_LEDGER_FLAGS:
        value = values.get(_param(flag))
        if value is not None:
            args += (flag, str(value))
    return args


@click.command("local-cluster")
@click.option(
    "--cluster-name",
    default="standalone",
    show_default=True,
    help="The cluster's name, given to every broker (clusterName): other clusters register "
    "it under this name to replicate with it.",
)
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
@click.option(
    "--broker-max-connections",
    default=None,
    type=click.IntRange(min=0),
    help="Passed on to every broker: refuse client connections beyond this many "
    "(brokerMaxConnections; 0: no limit; unset: the broker's default).",
)
@click.option(
    "--broker-max-connections-per-ip",
    default=None,
    type=click.IntRange(min=0),
    help="Passed on to every broker: refuse a client IP's connections beyond this many "
    "(brokerMaxConnectionsPerIp).",
)
@click.option(
    "--bookie-racks",
    default=None,
    help="Comma-separated /region/rack of each bookie, in order (e.g. "
    "/east/r1,/east/r2,/west/r1,/west/r2: two regions on one machine), given to each as "
    "'magnetar bookie --rack'.",
)
@click.option(
    "--functions-worker/--no-functions-worker",
    default=True,
    show_default=True,
    help="Run one Functions Worker beside the brokers (magnetar functions-worker, REST "
    "/admin/v3/functions on its own port); it starts after the ready line.",
)
@click.option(
    "--functions-worker-port",
    default=6750,
    show_default=True,
    type=int,
    help="The Functions Worker's HTTP port (workerPort).",
)
@click.option(
    "--functions-runtime",
    default="process",
    show_default=True,
    type=click.Choice(FUNCTIONS_RUNTIMES),
    help="How the worker runs function instances: subprocesses, or threads of the worker.",
)
@placement_options(forwarded=True)
@offload_options.offload_options
@managed_ledger_options
@server_auth_option_values
def local_cluster(
    cluster_name: str,
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
    broker_max_connections: int | None,
    broker_max_connections_per_ip: int | None,
    bookie_racks: str | None,
    functions_worker: bool,
    functions_worker_port: int,
    functions_runtime: str,
    server_auth_values: dict[str, Any],
    **placement_values: Any,
) -> None:
    """A real ZooKeeper plus N brokers, M bookies and a Functions Worker on 127.0.0.1, each
    its own process, until Ctrl+C or SIGTERM (then all stop: the worker, brokers, bookies,
    ZooKeeper). They stop too if this command is killed. The security options are passed on to every broker; with
    --authentication-enabled --authentication-providers token and no key, the cluster makes
    its own key and a super user's token (docs/cluster.md)."""
    t0 = time.perf_counter()
    offload_values = {param: placement_values.pop(param) for param in offload_options.PARAMS}
    ledger_values = {
        _param(flag): placement_values.pop(_param(flag)) for flag, _, _ in MANAGED_LEDGER_FLAGS
    }
    offload_options.check(offload_values)
    try:
        settings, tokens = plan_security(server_auth_values)
    except ServerAuthError as exc:
        click.echo(f"magnetar local-cluster: {exc}", err=True)
        sys.exit(2)
    try:
        config = LocalClusterConfig(
            data_dir=data_dir,
            cluster_name=cluster_name,
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
            broker_args=broker_args(settings, broker_max_connections, broker_max_connections_per_ip)
            + placement_args(placement_values)
            + offload_options.forwarded_args(offload_values)
            + managed_ledger_args(ledger_values),
            bookie_racks=_racks(bookie_racks),
            tokens=tokens,
            functions_worker=functions_worker,
            functions_worker_port=functions_worker_port,
            functions_runtime=functions_runtime,
            functions_worker_args=forwarded_args(settings),
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
        for name, pid, log_path in cluster.process_table():
            click.echo(f"  {name:<16} pid {pid!s:<8} log {log_path}")
        if tokens is not None:
            _echo_super_user(cluster, tokens)
        if cluster.functions_worker_url is not None:
            click.echo(
                f"  functions worker {cluster.functions_worker_url} (joins after the ready "
                f"line): magnetar admin --admin-url {cluster.functions_worker_url} "
                "functions list"
            )
        click.echo(
            f"magnetar local-cluster ready: service {cluster.service_url} "
            f"admin {cluster.web_service_url} metadata {cluster.metadata_url} "
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


def broker_args(
    security: dict[str, Any],
    broker_max_connections: int | None,
    broker_max_connections_per_ip: int | None,
) -> tuple[str, ...]:
    """The options every broker gets: the security settings that differ from their
    defaults, and the connection limits that were given."""
    args = forwarded_args(security)
    for flag, value in (
        ("--broker-max-connections", broker_max_connections),
        ("--broker-max-connections-per-ip", broker_max_connections_per_ip),
    ):
        if value is not None:
            args += (flag, str(value))
    return args


def _param(flag: str) -> str:
    """The click parameter name of ``flag``."""
    return flag.removeprefix("--").replace("-", "_")


def _racks(value: str | None) -> tuple[str, ...]:
    """``--bookie-racks``, each checked as ``magnetar bookie --rack`` checks it."""
    from magnetar.ledger.racks import InvalidRackConfiguration, normalized_rack

    if value is None:
        return ()
    try:
        return tuple(normalized_rack(rack) for rack in value.split(","))
    except InvalidRackConfiguration as exc:
        raise click.BadParameter(str(exc), param_hint="--bookie-racks") from None


def _echo_super_user(cluster: LocalCluster, tokens: ClusterTokens) -> None:
    click.echo(
        f"  super user {tokens.super_user!r}: token in "
        f"{ClusterTokens.token_file(cluster.data_dir)} (key {ClusterTokens.key_file(cluster.data_dir)});"
        f" the CLI with it: magnetar --config {cluster.client_conf} admin tenants list"
    )
