"""``magnetar broker``: one broker of a cluster on ZooKeeper (see :mod:`magnetar.broker_node`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING

import click

from magnetar.broker.controller.load import DEFAULT_OVERLOAD_CPU_PERCENT
from magnetar.cli.broker_options import broker_options, run_server
from magnetar.cli.server_config_file import SERVER_CONTEXT, config_file_option
from magnetar.cli.server_setup import configure_logging, log_level_option

if TYPE_CHECKING:
    from magnetar.broker_server import BrokerServerConfig

CLUSTER_QUORUM_DEFAULT = 2
"""Ensemble, write and ack quorum of a cluster broker's ledgers unless given (Pulsar's
``managedLedgerDefault*`` in broker.conf)."""


def _zk_url(_ctx: click.Context, _param: click.Parameter, url: str) -> str:
    if not url.startswith("zk://"):
        raise click.BadParameter(
            f"{url!r} is not a ZooKeeper URL (zk://host:port[,host:port]/chroot); brokers of "
            "a cluster share one metadata store"
        )
    return url


def _worker_url(_ctx: click.Context, _param: click.Parameter, url: str | None) -> str | None:
    from magnetar.admin_client.errors import AdminError
    from magnetar.admin_client.service_url import parse_service_url

    if url:
        try:
            parse_service_url(url)
        except AdminError as exc:
            raise click.BadParameter(str(exc)) from None
    return url or None


@click.command(context_settings=SERVER_CONTEXT)
@config_file_option
@click.option(
    "--metadata-url",
    required=True,
    callback=_zk_url,
    help="zk://host:port[,host:port]/chroot, the cluster's metadata store.",
)
@broker_options(quorum_default=CLUSTER_QUORUM_DEFAULT)
@click.option(
    "--broker-id",
    default=None,
    help="The id this broker registers under /loadbalance/brokers (default: host:http-port).",
)
@click.option(
    "--session-timeout-s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="Metadata session timeout: a crashed broker's bundles move after this long.",
)
@click.option(
    "--overload-threshold-cpu-percent",
    default=DEFAULT_OVERLOAD_CPU_PERCENT,
    show_default=True,
    type=click.FloatRange(min=1.0, max=100.0),
    help="A broker using at least this much of a core is overloaded: the controller sheds "
    "its busiest bundle and gives it no new ones (loadBalancerBrokerOverloadedThreshold"
    "Percentage).",
)
@click.option(
    "--function-worker-web-service-url",
    default=None,
    callback=_worker_url,
    help="A Functions Worker's REST URL (functionWorkerWebServiceURL): this broker's HTTP "
    "port forwards /admin/v3/functions|sources|sinks and /admin/v2/worker there.",
)
@log_level_option
def broker(
    metadata_url: str,
    broker_server: BrokerServerConfig,
    broker_id: str | None,
    session_timeout_s: float,
    overload_threshold_cpu_percent: float,
    function_worker_web_service_url: str | None,
    log_level: str,
) -> None:
    """A broker (binary protocol on 6650, HTTP on 8080) for a cluster on ZooKeeper."""
    started = time.perf_counter()
    if broker_id is not None and (not broker_id or "/" in broker_id):
        raise click.UsageError(f"--broker-id {broker_id!r}: must be non-empty, without '/'")
    from magnetar.broker_node import BrokerNodeConfig, run

    configure_logging(log_level)
    if function_worker_web_service_url is not None:
        broker_server = dataclasses.replace(
            broker_server, function_worker_url=function_worker_web_service_url
        )
    config = BrokerNodeConfig(
        metadata_url=metadata_url,
        server=broker_server,
        broker_id=broker_id,
        session_timeout_s=session_timeout_s,
        overload_cpu_percent=overload_threshold_cpu_percent,
    )
    sys.exit(run_server(run(config, started), broker_server))
