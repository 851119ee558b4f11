"""``magnetar proxy``: Pulsar's proxy in front of a cluster's brokers (see
:mod:`magnetar.proxy` and docs/proxy.md)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from magnetar.cli.server_auth import server_auth_options
from magnetar.cli.server_config_file import SERVER_CONTEXT, config_file_option
from magnetar.cli.server_setup import configure_logging, log_level_option

if TYPE_CHECKING:
    from magnetar.auth.server_options import ServerAuth


def metadata_url(_ctx: click.Context, _param: click.Parameter, url: str | None) -> str | None:
    """``zk://host:port[,host:port]/chroot`` as brokers take it; Pulsar's ``zk:host:port``
    spelling is read as the same."""
    if url is None or not url.strip():
        return None
    url = url.strip()
    if url.startswith("zk:") and not url.startswith("zk://"):
        url = "zk://" + url[len("zk:") :]
    if not url.startswith("zk://"):
        raise click.BadParameter(
            f"{url!r} is not a ZooKeeper URL (zk://host:port[,host:port]/chroot, the brokers' "
            "--metadata-url)"
        )
    return url


def _ports(_ctx: click.Context, _param: click.Parameter, text: str) -> frozenset[int]:
    try:
        ports = frozenset(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of ports") from None
    if any(not 0 < p < 65536 for p in ports):
        raise click.BadParameter(f"{text!r}: ports are 1 to 65535")
    return ports


@click.command(context_settings=SERVER_CONTEXT)
@config_file_option
@click.option(
    "--metadata-store",
    "--metadata-url",
    "metadata_url",
    default=None,
    callback=metadata_url,
    envvar=["MAGNETAR_METADATA_STORE", "MAGNETAR_METADATA_URL"],
    help="The brokers' metadata store, to find the live brokers (metadataStoreUrl): "
    "zk://host:port[,host:port]/chroot as the brokers' --metadata-url (zk:host:port too).",
)
@click.option(
    "--broker-service-url",
    default=None,
    metavar="pulsar://HOST:PORT[,HOST:PORT]",
    help="Brokers to ask instead of (or besides) discovery (brokerServiceURL).",
)
@click.option(
    "--broker-service-url-tls",
    default=None,
    hidden=True,
    help="Read from proxy.conf (brokerServiceURLTLS) and not used: the proxy connects to "
    "brokers over pulsar://.",
)
@click.option(
    "--broker-web-service-url",
    default=None,
    metavar="http://HOST:PORT[,HOST:PORT]",
    help="The brokers' HTTP URLs for the admin API (brokerWebServiceURL); with "
    "--broker-service-url, paired by position.",
)
@click.option(
    "--bind-address",
    "--host",
    "host",
    default="0.0.0.0",
    show_default=True,
    envvar=["MAGNETAR_BIND_ADDRESS", "MAGNETAR_HOST"],
    help="Address to listen on (bindAddress).",
)
@click.option(
    "--port",
    default=6650,
    show_default=True,
    type=click.IntRange(min=0, max=65535),
    help="Binary protocol port (servicePort; 0 = any free).",
)
@click.option(
    "--tls-port",
    default=None,
    type=click.IntRange(min=0, max=65535),
    help="Binary protocol over TLS (servicePortTls), with --tls-cert-file/--tls-key-file.",
)
@click.option(
    "--http-port",
    default=8080,
    show_default=True,
    type=click.IntRange(min=0, max=65535),
    help="HTTP port: admin API and lookups forwarded, /metrics, /ready, /status.html "
    "(webServicePort; 0 = any free).",
)
@click.option(
    "--advertised-address",
    default=None,
    help="Host the proxy names as its own address (advertisedAddress; default: "
    "--bind-address, or 127.0.0.1 for a wildcard).",
)
@click.option("--tls-cert-file", default=None, type=click.Path(exists=True, dir_okay=False))
@click.option("--tls-key-file", default=None, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tls-trust-certs-file",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="PEM CA bundle client certificates must chain to (the tls provider's clients).",
)
@server_auth_options
@click.option(
    "--forward-authorization-credentials/--no-forward-authorization-credentials",
    default=False,
    show_default=True,
    help="Pass each client's credentials to the brokers as original_auth_data "
    "(forwardAuthorizationCredentials).",
)
@click.option(
    "--broker-proxy-allowed-target-ports",
    default="6650,6651",
    show_default=True,
    callback=_ports,
    help="Ports a client may be forwarded to besides the brokers the proxy knows "
    "(brokerProxyAllowedTargetPorts).",
)
@click.option(
    "--max-concurrent-inbound-connections",
    default=10_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Refuse client connections beyond this many (maxConcurrentInboundConnections).",
)
@click.option(
    "--session-timeout-s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="Metadata session timeout.",
)
@log_level_option
def proxy(
    metadata_url: str | None,
    broker_service_url: str | None,
    broker_service_url_tls: str | None,
    broker_web_service_url: str | None,
    host: str,
    port: int,
    tls_port: int | None,
    http_port: int,
    advertised_address: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_trust_certs_file: str | None,
    server_auth: ServerAuth,
    forward_authorization_credentials: bool,
    broker_proxy_allowed_target_ports: frozenset[int],
    max_concurrent_inbound_connections: int,
    session_timeout_s: float,
    log_level: str,
) -> None:
    """A proxy (binary protocol on 6650, HTTP on 8080): one address for clients outside
    the cluster, forwarding each connection to the topic's owner broker."""
    started = time.perf_counter()
    from magnetar.cli.broker_options import run_server_ports
    from magnetar.proxy.config import ProxyConfig
    from magnetar.proxy.discovery import static_endpoints
    from magnetar.proxy.server import run

    if metadata_url is None and not broker_service_url:
        raise click.UsageError("needs --metadata-store or --broker-service-url (or both)")
    if broker_web_service_url and not broker_service_url:
        raise click.UsageError("--broker-web-service-url needs --broker-service-url")
    if tls_port is not None and (tls_cert_file is None or tls_key_file is None):
        raise click.UsageError("--tls-port needs --tls-cert-file and --tls-key-file")
    try:
        static = static_endpoints(broker_service_url, broker_web_service_url)
    except ValueError as exc:
        raise click.UsageError(f"--broker-service-url/--broker-web-service-url: {exc}") from None
    configure_logging(log_level)
    if broker_service_url_tls:
        click.echo(
            "magnetar proxy: brokerServiceURLTLS is ignored: the proxy connects to brokers "
            "over pulsar://",
            err=True,
        )
    config = ProxyConfig(
        bind_address=host,
        port=port,
        tls_port=tls_port,
        http_port=http_port,
        advertised_address=advertised_address,
        metadata_url=metadata_url,
        session_timeout_s=session_timeout_s,
        static_brokers=tuple(static),
        allowed_target_ports=broker_proxy_allowed_target_ports,
        auth=server_auth.auth,
        broker_client=server_auth.broker_client,
        forward_credentials=forward_authorization_credentials,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        tls_trust_certs_file=tls_trust_certs_file,
        max_connections=max_concurrent_inbound_connections,
    )
    ports = {"--port": port, "--tls-port": tls_port, "--http-port": http_port}
    sys.exit(run_server_ports(run(config, started), ports))
