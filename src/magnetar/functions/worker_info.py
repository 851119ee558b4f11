"""A worker's identity, and its spelling as a coordination consumer name.

Every worker of a worker cluster subscribes to the coordination topic with the consumer name
``workerId:host:port`` (as Pulsar's workers do), so the subscription's consumer list, read
from topic stats, *is* the member list, and ``activeConsumerName`` names the leader.

The worker id may not contain ``:``; the host may (an IPv6 literal), because the name is
split at the first ``:`` (end of the id) and the last (start of the port).
"""

from __future__ import annotations

from dataclasses import dataclass

PORT_MAX = 65_535


class InvalidWorkerInfo(ValueError):
    """A worker id, host or port that cannot be spelled as (or parsed from) a consumer name."""


@dataclass(frozen=True, slots=True, order=True)
class WorkerInfo:
    """``worker_id`` (unique in its worker cluster), and the host and port the worker's own
    service listens on. Raises :class:`InvalidWorkerInfo` when a field is unusable."""

    worker_id: str
    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.worker_id or ":" in self.worker_id or not self.worker_id.isprintable():
            raise InvalidWorkerInfo(
                f"worker id {self.worker_id!r} must be non-empty, printable and without ':'"
            )
        if not self.host or not self.host.isprintable() or " " in self.host:
            raise InvalidWorkerInfo(f"worker host {self.host!r} must be non-empty, no spaces")
        if not 0 <= self.port <= PORT_MAX:
            raise InvalidWorkerInfo(f"worker port {self.port} is outside 0..{PORT_MAX}")

    @property
    def consumer_name(self) -> str:
        """``workerId:host:port``: the coordination consumer's name."""
        return f"{self.worker_id}:{self.host}:{self.port}"

    @classmethod
    def parse(cls, consumer_name: str) -> WorkerInfo:
        """The inverse of :attr:`consumer_name`. Raises :class:`InvalidWorkerInfo` for a
        name that is not ``workerId:host:port``."""
        worker_id, sep, rest = consumer_name.partition(":")
        host, sep2, port_text = rest.rpartition(":")
        if not sep or not sep2 or not port_text.isdigit() or not port_text.isascii():
            raise InvalidWorkerInfo(f"{consumer_name!r} is not a workerId:host:port name")
        return cls(worker_id, host, int(port_text))
