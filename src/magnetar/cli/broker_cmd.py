"""``magnetar broker``: one broker of a cluster on ZooKeeper (see :mod:`magnetar.broker_node`)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from magnetar.broker.controller.load import DEFAULT_OVERLOAD_CPU_PERCENT
from magnetar.cli.inactive_topic_options import inactive_topic_options
from magnetar.cli.server_auth import ServerAuth, server_auth_options
from magnetar.cli.server_setup import (
    check_quorums,
    check_tls,
    configure_logging,
    install_uvloop,
    ledger_options,
    listener_options,
    memory_options,
    parse_listeners,
    tls_options,
)
from magnetar.cli.standalone_cmd import LOG_LEVELS


def _zk_url(_ctx: click.Context, _param: click.Parameter, url: str) -> str:
    if not url.startswith("zk://"):
        raise click.BadParameter(
            f"{url!r} is not a ZooKeeper URL (zk://host:port[,host:port]/chroot); brokers of "
            "a cluster share one metadata store"
        )
    return url


@click.command()
@click.option(
    "--metadata-url",
    required=True,
    callback=_zk_url,
    help="zk://host:port[,host:port]/chroot, the cluster's metadata store.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port", default=6650, show_default=True, type=int, help="Binary protocol port (0 = any free)."
)
@click.option(
    "--http-port", default=8080, show_default=True, type=int, help="HTTP port (0 = any free)."
)
@click.option(
    "--broker-id",
    default=None,
    help="The id this broker registers under /loadbalance/brokers (default: host:http-port).",
)
@click.option("--ensemble-size", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--write-quorum", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(min=1))
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
@tls_options
@server_auth_options
@listener_options
@click.option(
    "--deduplication/--no-deduplication",
    default=False,
    show_default=True,
    help="Broker-wide message deduplication (brokerDeduplicationEnabled).",
)
@inactive_topic_options
@click.option("--max-message-size", default=5 * 1024 * 1024, show_default=True, type=int)
@memory_options
@ledger_options
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
)
def broker(
    metadata_url: str,
    host: str,
    port: int,
    http_port: int,
    broker_id: str | None,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    session_timeout_s: float,
    overload_threshold_cpu_percent: float,
    tls_port: int | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_trust_certs_file: str | None,
    tls_require_trusted_client_cert: bool,
    server_auth: ServerAuth,
    advertised_address: str | None,
    advertised_listeners: str | None,
    internal_listener_name: str | None,
    deduplication: bool,
    inactive_topics: dict[str, Any],
    max_message_size: int,
    managed_ledger_cache_size_mb: int,
    max_message_publish_buffer_size_mb: int,
    managed_ledger_max_entries_per_ledger: int,
    managed_ledger_min_ledger_rollover_time_ms: int,
    log_level: str,
) -> None:
    """A broker (binary protocol on 6650, HTTP on 8080) for a cluster on ZooKeeper."""
    started = time.perf_counter()
    check_quorums(ensemble_size, write_quorum, ack_quorum)
    check_tls(
        tls_port, tls_cert_file, tls_key_file, tls_require_trusted_client_cert, tls_trust_certs_file
    )
    if broker_id is not None and (not broker_id or "/" in broker_id):
        raise click.UsageError(f"--broker-id {broker_id!r}: must be non-empty, without '/'")
    import asyncio

    from magnetar.broker.config import BrokerConfig

    listeners = parse_listeners(advertised_listeners, internal_listener_name)
    from magnetar.broker_node import BrokerNodeConfig, run

    configure_logging(log_level)
    config = BrokerNodeConfig(
        metadata_url=metadata_url,
        http_host=host,
        http_port=http_port,
        broker_id=broker_id,
        session_timeout_s=session_timeout_s,
        overload_cpu_percent=overload_threshold_cpu_percent,
        managed_ledger_max_entries_per_ledger=managed_ledger_max_entries_per_ledger,
        managed_ledger_min_ledger_rollover_time_ms=managed_ledger_min_ledger_rollover_time_ms,
        broker_client_auth=server_auth.broker_client,
        broker=BrokerConfig(
            host=host,
            port=port,
            tls_port=tls_port,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            tls_trust_certs_file=tls_trust_certs_file,
            tls_require_trusted_client_cert=tls_require_trusted_client_cert,
            advertised_address=advertised_address,
            advertised_listeners=listeners,
            deduplication_enabled=deduplication,
            max_message_size_bytes=max_message_size,
            managed_ledger_cache_size_mb=managed_ledger_cache_size_mb,
            max_message_publish_buffer_size_mb=max_message_publish_buffer_size_mb,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            auth=server_auth.auth,
            **inactive_topics,
        ),
    )
    install_uvloop()
    from magnetar.bookie.gc_tuning import (
        fix_mmap_threshold,
        start_heap_trimmer,
        tune_gc_for_serving,
    )
    from magnetar.common.gil import tune_gil_for_serving

    tune_gc_for_serving()
    tune_gil_for_serving()
    fix_mmap_threshold()
    start_heap_trimmer()
    sys.exit(asyncio.run(run(config, started)))
