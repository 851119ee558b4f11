"""What the admin routes operate on: the broker service and what the host process adds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.broker.policies import PolicyStore
from magnetar.broker.service import BrokerService

if TYPE_CHECKING:  # cluster mode's: the standalone imports no controller
    from magnetar.broker.controller.runner import ControllerRunner


@dataclass(slots=True)
class AdminContext:
    """Shared by every request handler of one app.

    ``http_port`` is filled in by the host once the HTTP server is bound (lookups answer
    with the HTTP URL). ``compactor`` is the broker's compaction service when the host runs
    one (``trigger(topic)`` / ``status(topic)``), else the compaction endpoints answer 405.
    ``collectors`` are extra Prometheus collectors of the host (e.g. its bookie's journal).
    """

    service: BrokerService
    http_port: int = 0
    compactor: Any = None
    collectors: list[Any] = field(default_factory=list)
    health_checks: list[Callable[[], str | None]] = field(default_factory=list)
    """Checks of the host's own parts (e.g. its bookie): each returns why the host cannot
    serve writes, or None. ``/ready`` and the health endpoint answer 503 with the first."""
    controller: ControllerRunner | None = None
    """Cluster mode: this broker's controller candidacy (bundle unloads go to it)."""
    host_settings: dict[str, object] = field(default_factory=dict)
    """The host process's own settings, keyed as Pulsar's ``broker.conf`` (e.g.
    ``metadataStoreUrl``), shown by ``GET /admin/v2/brokers/configuration/runtime``."""
    internal_client_credentials: ClientCredentials = NO_CREDENTIALS
    """What this host presents when its handlers call another broker's REST (Pulsar's
    ``brokerClientAuthenticationPlugin``); a super user's when authorization is on."""
    policies: PolicyStore = field(init=False)

    def __post_init__(self) -> None:
        # a write answers once this broker's loaded topics apply it (see PolicyStore)
        self.policies = PolicyStore(self.service.store, on_written=self.service.policies.written)

    @property
    def store(self) -> Any:
        return self.service.store

    @property
    def cluster(self) -> str:
        return self.service.config.cluster_name

    @property
    def advertised_host(self) -> str:
        cfg = self.service.config
        return cfg.advertised_address or cfg.host

    @property
    def http_url(self) -> str:
        return f"http://{self.advertised_host}:{self.http_port}"
