"""The broker's options, declared once for ``magnetar broker`` and ``magnetar standalone``
(the two commands start the same :class:`~magnetar.broker_server.BrokerServer`).

:func:`broker_options` adds them to a command, security included
(:func:`~magnetar.cli.server_auth.server_auth_options`), checks them together (one usage
line each) and hands the command one ``broker_server:``
:class:`~magnetar.broker_server.BrokerServerConfig` instead of thirty values. The commands
differ only in defaults (a standalone has one bookie: quorums of 1) and in what they add
around the broker (the standalone's data directory, bookie and worker; the cluster broker's
id and controller). :data:`BROKER_OPTION_NAMES` lists the options, for the test that both
commands offer them.

:func:`run_server` runs the server and names the option of a port that cannot be bound.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import click

from magnetar.cli import offload_options
from magnetar.cli.inactive_topic_options import OPTIONS as INACTIVE_TOPIC_OPTIONS
from magnetar.cli.placement_options import placement_options, placement_policy
from magnetar.cli.server_auth import ServerAuth, server_auth_options
from magnetar.cli.server_setup import (
    check_quorums,
    check_tls,
    ledger_options,
    listener_options,
    memory_options,
    parse_listeners,
    tls_options,
)

if TYPE_CHECKING:
    from magnetar.broker_server import BrokerServerConfig


def _own_options(f: Callable[..., Any], quorum_default: int) -> Callable[..., Any]:
    """Every broker option but security's; the first listed is the first in ``--help``."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind."),
        click.option(
            "--port",
            default=6650,
            show_default=True,
            type=int,
            help="Binary protocol port (brokerServicePort; 0 = any free).",
        ),
        click.option(
            "--http-port",
            default=8080,
            show_default=True,
            type=int,
            help="HTTP port: admin, lookup, metrics (webServicePort; 0 = any free).",
        ),
        click.option(
            "--https-port",
            default=None,
            type=int,
            help="Serve the HTTP API over TLS on this port too, with --tls-cert-file/"
            "--tls-key-file (webServicePortTls; 0 = any free port).",
        ),
        tls_options,
        click.option(
            "--cluster-name",
            default="standalone",
            show_default=True,
            help="The cluster this broker belongs to (clusterName); geo-replication tells "
            "clusters apart by it.",
        ),
        click.option(
            "--ensemble-size",
            default=quorum_default,
            show_default=True,
            type=click.IntRange(min=1),
            help="Bookies per ledger (managedLedgerDefaultEnsembleSize).",
        ),
        click.option(
            "--write-quorum",
            default=quorum_default,
            show_default=True,
            type=click.IntRange(min=1),
            help="Bookies each entry is written to (managedLedgerDefaultWriteQuorum).",
        ),
        click.option(
            "--ack-quorum",
            default=quorum_default,
            show_default=True,
            type=click.IntRange(min=1),
            help="Bookies that must acknowledge an entry (managedLedgerDefaultAckQuorum).",
        ),
        listener_options,
        click.option(
            "--deduplication/--no-deduplication",
            default=False,
            show_default=True,
            help="Broker-wide message deduplication (brokerDeduplicationEnabled).",
        ),
        click.option(
            "--max-message-size",
            default=5 * 1024 * 1024,
            show_default=True,
            type=int,
            help="Bytes of the largest message (maxMessageSize).",
        ),
        click.option(
            "--partial-frame-bytes-max",
            default=64 * 1024 * 1024,
            show_default=True,
            type=click.IntRange(min=1),
            help="Bytes all connections may hold in frames not yet completely read; past it, "
            "connections holding part of a frame stop reading until the total falls below.",
        ),
        click.option(
            "--partial-frame-timeout-ms",
            default=30_000,
            show_default=True,
            type=click.IntRange(min=1),
            help="A frame not completely read this long after its first byte closes its "
            "connection.",
        ),
        click.option(
            "--keep-alive-interval-seconds",
            default=30,
            show_default=True,
            type=click.IntRange(min=0),
            help="A PING goes to each client this often; a connection silent for a whole "
            "interval after one is closed (keepAliveIntervalSeconds; 0: off).",
        ),
        click.option(
            "--broker-max-connections",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="Refuse client connections beyond this many (brokerMaxConnections; 0: no limit).",
        ),
        click.option(
            "--broker-max-connections-per-ip",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="Refuse a client IP's connections beyond this many "
            "(brokerMaxConnectionsPerIp; 0: no limit).",
        ),
        click.option(
            "--failover-delay-ms",
            default=1000,
            show_default=True,
            type=int,
            help="How long a failover subscription waits before it moves its active "
            "consumer to a new one (activeConsumerFailoverDelayTimeMillis).",
        ),
        *(option for _, _, option in INACTIVE_TOPIC_OPTIONS),
        *(option for _, _, option in offload_options.OPTIONS),
        memory_options,
        ledger_options,
        placement_options(),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _option_keys() -> tuple[str, ...]:
    def probe() -> None:
        pass

    params: list[click.Parameter] = getattr(_own_options(probe, 1), "__click_params__", [])
    return tuple(p.name for p in params if p.name is not None)


_KEYS = _option_keys()


def _security_option_names() -> tuple[str, ...]:
    from magnetar.auth.server_options import SERVER_AUTH_OPTIONS

    return tuple(f"--{spec.name}" for spec in SERVER_AUTH_OPTIONS)


BROKER_OPTION_NAMES: tuple[str, ...] = (
    tuple(f"--{key.replace('_', '-')}" for key in _KEYS) + _security_option_names()
)
"""Every broker option (its first spelling), security's included."""


def broker_options(*, quorum_default: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds the broker's options to a click command, which receives them as one
    ``broker_server: BrokerServerConfig`` argument; ``quorum_default`` is the default of
    ``--ensemble-size``, ``--write-quorum`` and ``--ack-quorum``."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, server_auth: ServerAuth, **kwargs: Any) -> Any:
            values = {key: kwargs.pop(key) for key in _KEYS}
            return f(*args, broker_server=_server_config(values, server_auth), **kwargs)

        return _own_options(server_auth_options(command), quorum_default)

    return decorate


def _server_config(values: dict[str, Any], server_auth: ServerAuth) -> BrokerServerConfig:
    """The checked configuration; raises :class:`click.UsageError` naming the options."""
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker_server import BrokerServerConfig

    v = values
    check_quorums(v["ensemble_size"], v["write_quorum"], v["ack_quorum"])
    check_tls(
        v["tls_port"],
        v["tls_cert_file"],
        v["tls_key_file"],
        v["tls_require_trusted_client_cert"],
        v["tls_trust_certs_file"],
    )
    if v["https_port"] is not None and (v["tls_cert_file"] is None or v["tls_key_file"] is None):
        raise click.UsageError("--https-port needs --tls-cert-file and --tls-key-file")
    offload_options.check(v)
    listeners = parse_listeners(v["advertised_listeners"], v["internal_listener_name"])
    return BrokerServerConfig(
        http_host=v["host"],
        http_port=v["http_port"],
        https_port=v["https_port"],
        managed_ledger_max_entries_per_ledger=v["managed_ledger_max_entries_per_ledger"],
        managed_ledger_min_ledger_rollover_time_ms=v["managed_ledger_min_ledger_rollover_time_ms"],
        broker_client_auth=server_auth.broker_client,
        placement=placement_policy(v),
        broker=BrokerConfig(
            cluster_name=v["cluster_name"],
            host=v["host"],
            port=v["port"],
            tls_port=v["tls_port"],
            tls_cert_file=v["tls_cert_file"],
            tls_key_file=v["tls_key_file"],
            tls_trust_certs_file=v["tls_trust_certs_file"],
            tls_require_trusted_client_cert=v["tls_require_trusted_client_cert"],
            advertised_address=v["advertised_address"],
            advertised_listeners=listeners,
            deduplication_enabled=v["deduplication"],
            max_message_size_bytes=v["max_message_size"],
            managed_ledger_cache_size_mb=v["managed_ledger_cache_size_mb"],
            max_message_publish_buffer_size_mb=v["max_message_publish_buffer_size_mb"],
            partial_frame_bytes_max=v["partial_frame_bytes_max"],
            partial_frame_timeout_ms=v["partial_frame_timeout_ms"],
            keep_alive_interval_ms=v["keep_alive_interval_seconds"] * 1000,
            max_connections=v["broker_max_connections"],
            max_connections_per_ip=v["broker_max_connections_per_ip"],
            failover_delay_ms=v["failover_delay_ms"],
            ensemble_size=v["ensemble_size"],
            write_quorum=v["write_quorum"],
            ack_quorum=v["ack_quorum"],
            auth=server_auth.auth,
            **{field: v[param] for param, field, _ in INACTIVE_TOPIC_OPTIONS},
            **{field: v[param] for param, field, _ in offload_options.OPTIONS},
        ),
    )


# "cannot listen on 127.0.0.1:6650: ..." (asyncio's bind error, as magnetar.cli.output
# words it) and "cannot listen for HTTP on 127.0.0.1:8080: ..." (the admin server's)
_BIND_ADDRESS = re.compile(r"\('([^']*)', (\d+)\)|(\S+):(\d+)")


PORT_PURPOSES: dict[str, str] = {
    "--port": "the binary protocol",
    "--tls-port": "the binary protocol over TLS",
    "--http-port": "HTTP",
    "--https-port": "HTTPS",
    "--bookie-port": "the bookie",
}
"""What each port option listens for, as a bind error words it."""


def run_server(
    main: Coroutine[Any, Any, int],
    server: BrokerServerConfig,
    other_ports: dict[str, int | None] | None = None,
) -> int:
    """``asyncio.run(main)`` on uvloop (see :func:`run_server_ports`), the options of the
    ports those of ``server`` and ``other_ports`` (option -> its value)."""
    return run_server_ports(
        main,
        {
            "--port": server.broker.port,
            "--tls-port": server.broker.tls_port,
            "--http-port": server.http_port,
            "--https-port": server.https_port,
            **(other_ports or {}),
        },
    )


def run_server_ports(main: Coroutine[Any, Any, int], port_flags: dict[str, int | None]) -> int:
    """``asyncio.run(main)`` on uvloop. A port that cannot be bound ends it as one line,
    ``cannot listen for HTTP on HOST:PORT (--http-port): address already in use``, the
    option found among ``port_flags`` (option -> its value)."""
    import asyncio
    import errno

    from magnetar.cli.output import CommandFailed
    from magnetar.cli.server_setup import install_uvloop

    install_uvloop()
    try:
        return asyncio.run(main)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        found = _BIND_ADDRESS.search(exc.strerror or str(exc))
        if found is None:
            raise
        host = found.group(1) or found.group(3)
        port = int(found.group(2) or found.group(4))
        flags = [flag for flag, value in port_flags.items() if value == port]
        what = f" for {PORT_PURPOSES[flags[0]]}" if flags else ""
        named = f" ({flags[0]})" if flags else ""
        raise CommandFailed(
            f"cannot listen{what} on {host}:{port}{named}: {_os_reason(exc.errno)}"
        ) from None


def _os_reason(code: int) -> str:
    """The C library's text for ``code``, lower-case: one spelling whichever part failed."""
    import os

    text = os.strerror(code)
    return text[:1].lower() + text[1:]
