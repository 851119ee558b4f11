"""The proxy's settings (``magnetar proxy``'s options, Pulsar's ``proxy.conf`` keys)."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.auth.client_credentials import ClientCredentials
from magnetar.auth.config import AuthConfig
from magnetar.proxy.discovery import DEFAULT_ALLOWED_TARGET_PORTS, BrokerEndpoint

DEFAULT_MAX_CONNECTIONS = 10_000
"""Pulsar's ``maxConcurrentInboundConnections``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    bind_address: str = "0.0.0.0"
    port: int | None = 6650
    """Binary protocol (``servicePort``; 0: any free port; None: off)."""
    tls_port: int | None = None
    """Binary protocol over TLS (``servicePortTls``)."""
    http_port: int = 8080
    """Admin REST, HTTP lookups, metrics, readiness (``webServicePort``)."""
    advertised_address: str | None = None
    """The host this proxy names in its answers (default: the bind address, or the
    loopback address when that is a wildcard)."""
    metadata_url: str | None = None
    """``zk://host:port/chroot`` of the brokers' metadata store (``metadataStoreUrl``)."""
    session_timeout_s: float = 10.0
    discovery_refresh_s: float = 2.0
    static_brokers: tuple[BrokerEndpoint, ...] = ()
    """``brokerServiceURL`` / ``brokerWebServiceURL``."""
    allowed_target_ports: frozenset[int] = DEFAULT_ALLOWED_TARGET_PORTS
    auth: AuthConfig = field(default_factory=AuthConfig)
    """What the proxy checks of its clients (as a broker would)."""
    broker_client: ClientCredentials = field(default_factory=ClientCredentials)
    """What the proxy presents to brokers (``brokerClientAuthenticationPlugin``)."""
    forward_credentials: bool = False
    """Pass the client's credentials on as ``original_auth_data``
    (``forwardAuthorizationCredentials``)."""
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_trust_certs_file: str | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    connect_timeout_s: float = 10.0
    """Bound on connecting and hand-shaking with a broker, and on a client's CONNECT."""
    request_timeout_s: float = 30.0
    """Bound on one lookup or other request forwarded to a broker (and on one HTTP
    request forwarded)."""

    @property
    def advertised_host(self) -> str:
        if self.advertised_address:
            return self.advertised_address
        return "127.0.0.1" if self.bind_address in ("0.0.0.0", "::", "") else self.bind_address
