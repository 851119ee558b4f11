"""``magnetar standalone``: the whole system in one process (see :mod:`magnetar.standalone`)."""

from __future__ import annotations

import time
from pathlib import Path

import click

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

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.command()
@click.option(
    "--data-dir", default=Path("data"), show_default=True, type=click.Path(path_type=Path)
)
@click.option(
    "--cluster-name",
    default="standalone",
    show_default=True,
    help="The cluster's name (Pulsar's clusterName): geo-replication tells clusters apart by it.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=6650, show_default=True, type=int, help="Binary protocol port.")
@click.option("--http-port", default=8080, show_default=True, type=int)
@click.option(
    "--https-port",
    default=None,
    type=int,
    help="Serve the HTTP API (admin, lookup, metrics) over TLS on this port too, with "
    "--tls-cert-file/--tls-key-file (Pulsar's webServicePortTls; 0 = any free port).",
)
@tls_options
@server_auth_options
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
    "--ensemble-size",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Bookies per ledger; above 1 needs other bookies registered (--metadata-url).",
)
@click.option("--write-quorum", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--ack-quorum", default=1, show_default=True, type=click.IntRange(min=1))
@listener_options
@click.option(
    "--deduplication/--no-deduplication",
    default=False,
    show_default=True,
    help="Broker-wide message deduplication (brokerDeduplicationEnabled).",
)
@click.option("--max-message-size", default=5 * 1024 * 1024, show_default=True, type=int)
@click.option(
    "--partial-frame-bytes-max",
    default=64 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="Bytes all connections may hold in frames not yet completely read; past it, "
    "connections holding part of a frame stop reading until the total falls below.",
)
@click.option(
    "--broker-max-connections",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Refuse client connections beyond this many (brokerMaxConnections; 0: no limit).",
)
@click.option(
    "--broker-max-connections-per-ip",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Refuse a client IP's connections beyond this many (brokerMaxConnectionsPerIp).",
)
@click.option(
    "--partial-frame-timeout-ms",
    default=30_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="A frame not completely read this long after its first byte closes its connection.",
)
@click.option("--failover-delay-ms", default=1000, show_default=True, type=int)
@memory_options
@click.option(
    "--bookie-write-cache-size-mb",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="MiB of written entries the bookie buffers before writing them to its entry logs "
    "(dbStorage_writeCacheMaxSizeMb; they are also written every second).",
)
@ledger_options
@click.option(
    "--journal-skip-invalid-records/--no-journal-skip-invalid-records",
    default=False,
    show_default=True,
    help="Start even if the bookie's journal replay finds a damaged record followed by "
    "valid ones (skips and logs it; its entries are lost). Default: refuse to start.",
)
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
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
)
def standalone(
    data_dir: Path,
    cluster_name: str,
    host: str,
    port: int,
    http_port: int,
    https_port: int | None,
    tls_port: int | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_trust_certs_file: str | None,
    tls_require_trusted_client_cert: bool,
    server_auth: ServerAuth,
    metadata_url: str | None,
    session_timeout_s: float,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    advertised_address: str | None,
    advertised_listeners: str | None,
    internal_listener_name: str | None,
    deduplication: bool,
    max_message_size: int,
    partial_frame_bytes_max: int,
    partial_frame_timeout_ms: int,
    broker_max_connections: int,
    broker_max_connections_per_ip: int,
    failover_delay_ms: int,
    managed_ledger_cache_size_mb: int,
    max_message_publish_buffer_size_mb: int,
    bookie_write_cache_size_mb: int,
    managed_ledger_max_entries_per_ledger: int,
    managed_ledger_min_ledger_rollover_time_ms: int,
    journal_skip_invalid_records: bool,
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
    check_quorums(ensemble_size, write_quorum, ack_quorum)
    if ensemble_size > 1 and metadata_url is None:
        raise click.UsageError(
            f"--ensemble-size {ensemble_size} needs other bookies: with the embedded store "
            "the standalone has one; give --metadata-url"
        )
    check_tls(
        tls_port, tls_cert_file, tls_key_file, tls_require_trusted_client_cert, tls_trust_certs_file
    )
    if https_port is not None and (tls_cert_file is None or tls_key_file is None):
        raise click.UsageError("--https-port needs --tls-cert-file and --tls-key-file")
    import asyncio
    import sys

    from magnetar.broker.config import BrokerConfig

    listeners = parse_listeners(advertised_listeners, internal_listener_name)
    from magnetar.standalone import StandaloneConfig, run

    configure_logging(log_level)
    config = StandaloneConfig(
        data_dir=data_dir,
        http_host=host,
        http_port=http_port,
        https_port=https_port,
        managed_ledger_max_entries_per_ledger=managed_ledger_max_entries_per_ledger,
        managed_ledger_min_ledger_rollover_time_ms=managed_ledger_min_ledger_rollover_time_ms,
        bookie_write_cache_size_mb=bookie_write_cache_size_mb,
        bookie_journal_skip_invalid_records=journal_skip_invalid_records,
        functions_worker=functions_worker,
        functions_runtime=functions_runtime,
        broker_client_auth=server_auth.broker_client,
        metadata_url=metadata_url,
        metadata_session_timeout_s=session_timeout_s,
        broker=BrokerConfig(
            cluster_name=cluster_name,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
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
            partial_frame_bytes_max=partial_frame_bytes_max,
            partial_frame_timeout_ms=partial_frame_timeout_ms,
            max_connections=broker_max_connections,
            max_connections_per_ip=broker_max_connections_per_ip,
            failover_delay_ms=failover_delay_ms,
            auth=server_auth.auth,
        ),
    )
    install_uvloop()
    from magnetar.bookie.errors import CookieMismatch, IndexCorrupt, JournalCorrupt

    try:
        asyncio.run(run(config, started))
    except (CookieMismatch, IndexCorrupt, JournalCorrupt) as exc:
        click.echo(f"magnetar standalone: {exc}", err=True)
        sys.exit(3)
