"""The proxy's counters and its open connections, for ``/metrics`` and
``/proxy-stats/connections``. Plain data updated on the event loop; no I/O.

Metric names are Pulsar's proxy's where it has one (``pulsar_proxy_*``). Bytes are counted
as they are copied, so a piped connection's frames are not (the proxy does not parse them):
``pulsar_proxy_binary_ops`` counts the commands of lookup connections only.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ConnectionStats:
    """One client connection."""

    connection_id: int
    remote_address: str
    created_at_ms: int
    role: str | None = None
    broker: str | None = None
    """``host:port`` of the broker it is piped to; None for a lookup connection."""
    bytes_in: int = 0
    """From the client."""
    bytes_out: int = 0
    """To the client."""

    def to_json(self) -> dict[str, Any]:
        return {
            "connectionId": self.connection_id,
            "remoteAddress": self.remote_address,
            "createdAt": self.created_at_ms,
            "role": self.role,
            "brokerUrl": None if self.broker is None else f"pulsar://{self.broker}",
            "bytesIn": self.bytes_in,
            "bytesOut": self.bytes_out,
        }


_COUNTERS: tuple[tuple[str, str], ...] = (
    ("pulsar_proxy_new_connections", "Client connections accepted"),
    ("pulsar_proxy_rejected_connections", "Client connections refused (limit, bad handshake)"),
    ("pulsar_proxy_binary_ops", "Commands handled on lookup connections"),
    ("pulsar_proxy_binary_bytes", "Bytes copied between clients and brokers"),
    ("pulsar_proxy_lookup_requests", "Topic lookups"),
    ("pulsar_proxy_rejected_lookup_requests", "Topic lookups that failed"),
    ("pulsar_proxy_partitions_metadata_requests", "Partitioned-topic metadata requests"),
    ("pulsar_proxy_get_topics_of_namespace_requests", "Topics-of-namespace requests"),
    ("pulsar_proxy_get_schema_requests", "Schema requests"),
    ("pulsar_proxy_authentication_failures", "Clients refused at authentication"),
    ("pulsar_proxy_http_requests", "HTTP requests forwarded to brokers"),
)


@dataclass(slots=True)
class ProxyStats:
    counters: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _ in _COUNTERS})
    connections: dict[int, ConnectionStats] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] += by

    def opened(self, remote_address: str, now_ms: int) -> ConnectionStats:
        """A new client connection (forgotten again by :meth:`closed`)."""
        conn = ConnectionStats(next(self._ids), remote_address, now_ms)
        self.connections[conn.connection_id] = conn
        self.count("pulsar_proxy_new_connections")
        return conn

    def closed(self, conn: ConnectionStats) -> None:
        self.connections.pop(conn.connection_id, None)

    def copied(self, conn: ConnectionStats, *, from_client: int = 0, to_client: int = 0) -> None:
        conn.bytes_in += from_client
        conn.bytes_out += to_client
        self.bytes_in += from_client
        self.bytes_out += to_client
        self.count("pulsar_proxy_binary_bytes", from_client + to_client)

    def connections_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.connections.values()]

    def prometheus_text(self) -> str:
        """The metrics in Prometheus' text format (version 0.0.4)."""
        lines = [
            "# HELP pulsar_proxy_active_connections Client connections open",
            "# TYPE pulsar_proxy_active_connections gauge",
            f"pulsar_proxy_active_connections {len(self.connections)}",
            "# HELP pulsar_proxy_piped_connections Client connections piped to a broker",
            "# TYPE pulsar_proxy_piped_connections gauge",
            "pulsar_proxy_piped_connections "
            f"{sum(1 for c in self.connections.values() if c.broker is not None)}",
        ]
        for name, help_text in _COUNTERS:
            lines += [
                f"# HELP {name} {help_text}",
                f"# TYPE {name} counter",
                f"{name} {self.counters[name]}",
            ]
        for direction, value in (("in", self.bytes_in), ("out", self.bytes_out)):
            name = f"pulsar_proxy_bytes_{direction}"
            lines += [
                f"# HELP {name} Bytes {'from' if direction == 'in' else 'to'} clients",
                f"# TYPE {name} counter",
                f"{name} {value}",
            ]
        return "\n".join(lines) + "\n"
