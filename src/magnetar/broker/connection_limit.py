"""Connection limits of one broker: Pulsar's ``brokerMaxConnections`` and
``brokerMaxConnectionsPerIp`` (0 or less: no limit).

A connection over either limit is refused as Pulsar refuses it: the broker answers Error
``NotAllowedError`` (request id -1) with the reason, and closes it. Pure bookkeeping: the
caller admits a connection when it opens and releases it when it closes.
"""

from __future__ import annotations

from collections import Counter


class ConnectionLimiter:
    """Counts open connections in all and per client IP, and refuses those over a limit."""

    def __init__(self, max_connections: int = 0, max_connections_per_ip: int = 0) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._open = 0
        self._per_ip: Counter[str] = Counter()
        self.refused_total = 0
        """Connections refused since the broker started (metrics)."""

    @property
    def open_connections(self) -> int:
        return self._open

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; the reason it is refused (and then not
        counted), or None when admitted. Every admitted connection must be released."""
        if 0 < self.max_connections <= self._open:
            self.refused_total += 1
            return f"Reached the maximum number of connections ({self.max_connections})"
        if 0 < self.max_connections_per_ip <= self._per_ip[ip]:
            self.refused_total += 1
            return (
                f"Reached the maximum number of connections on address {ip} "
                f"({self.max_connections_per_ip})"
            )
        self._open += 1
        self._per_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        """An admitted connection from ``ip`` closed. Holds nothing for an IP without
        connections."""
        assert self._per_ip[ip] > 0, f"release of a connection from {ip} never admitted"
        self._open -= 1
        self._per_ip[ip] -= 1
        if not self._per_ip[ip]:
            del self._per_ip[ip]
