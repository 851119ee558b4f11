"""``magnetar broker``: one broker of a cluster on ZooKeeper, with the controller inside.

The process holds no data of its own: topics live in ledgers on remote bookies (``magnetar
bookie`` processes registered under ``/ledgers/available``), metadata in the store named by
``metadata_url``. Start-up order:

1. the metadata session;
2. the broker of :mod:`magnetar.broker_server` over it (ledger client, broker service,
   admin HTTP server), its topics limited to the bundles it owns;
3. the registration, ephemeral ``/loadbalance/brokers/<broker id>`` holding the broker's
   URLs (the broker id defaults to ``<advertised host>:<http port>``, as Pulsar's);
4. bundle ownership (:class:`~magnetar.broker.ownership.ClusterOwnership`): the broker
   serves a topic only while it holds its bundle's ownership node;
5. the controller candidacy (:class:`~magnetar.broker.controller.runner.ControllerRunner`).

A lost metadata session ends the process (Pulsar's ``zookeeperSessionExpiredPolicy``
default, ``shutdown``): its ownership nodes are gone and other brokers may already serve its
bundles, so it closes its topics' producers and consumers and exits with status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.broker.controller.bundle_state_machine import ControllerPolicy
from magnetar.broker.controller.bundles import BundleId
from magnetar.broker.controller.election import REGISTRATIONS_PATH
from magnetar.broker.controller.load import DEFAULT_OVERLOAD_CPU_PERCENT, LoadPolicy, LoadReport
from magnetar.broker.controller.replica_state_machine import ReplicaPolicy
from magnetar.broker.controller.runner import ControllerRunner
from magnetar.broker.load_report import CpuMeter, with_load
from magnetar.broker.ownership import BrokerAddress, ClusterOwnership
from magnetar.broker_server import BrokerServer, BrokerServerConfig, HostsBrokerServer, serve
from magnetar.common.clock import Clock, SystemClock
from magnetar.common.errors import MagnetarError
from magnetar.common.shutdown import STOP_TIMEOUT_S, stop_step
from magnetar.common.task_crash import report_crash
from magnetar.metadata import MetadataStore, connect
from magnetar.metadata import path as paths
from magnetar.metadata.store import (
    MetadataStoreError,
    NodeExists,
    NotFound,
    SessionExpired,
    SetOp,
    wait_session_lost,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

REGISTRATION_WAIT_POLL_S = 0.2


class BrokerStartError(MagnetarError):
    """The broker cannot start (its id is registered by a live process, ...)."""


@dataclass(frozen=True, slots=True)
class BrokerNodeConfig:
    metadata_url: str
    server: BrokerServerConfig = field(default_factory=BrokerServerConfig)
    """The broker and its HTTP API; its ``broker_client_auth`` is what this broker presents
    when it calls another broker (with authorization on, a super user's)."""
    broker_id: str | None = None
    """Registered id; ``<advertised host>:<http port>`` when None."""
    session_timeout_s: float = 10.0
    """Metadata session timeout: how long after a crash the broker's bundles move."""
    load_report_interval_ms: int = 5_000
    """How often the broker writes its load report (read by the controller)."""
    overload_cpu_percent: float = DEFAULT_OVERLOAD_CPU_PERCENT
    """The controller's threshold while this broker is the controller (Pulsar's
    ``loadBalancerBrokerOverloadedThresholdPercentage``): a broker reporting at least this
    CPU takes no new bundles while another does not, and sheds its busiest bundle."""


class BrokerNode(HostsBrokerServer):
    """Start with :meth:`start`, stop with :meth:`stop` (idempotent)."""

    def __init__(self, config: BrokerNodeConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.store: MetadataStore | None = None
        self.server: BrokerServer | None = None
        self.ownership: ClusterOwnership | None = None
        self.controller: ControllerRunner | None = None
        self.address: BrokerAddress | None = None
        self.session_lost = asyncio.Event()
        self._session_task: asyncio.Task[None] | None = None
        self._reporter: asyncio.Task[None] | None = None

    @property
    def broker_id(self) -> str:
        assert self.address is not None
        return self.address.broker_id

    async def start(self) -> None:
        cfg = self.config
        b = cfg.server.broker
        self.store = store = await connect(
            cfg.metadata_url, session_timeout_s=cfg.session_timeout_s
        )
        self._session_task = asyncio.create_task(self._watch_session(store))
        self.ownership = ClusterOwnership(
            store, unload_bundle=self._unload_bundle, clock=self.clock
        )
        self.server = server = BrokerServer(
            cfg.server,
            store,
            clock=self.clock,
            ownership=self.ownership,
            collectors=[self._cluster_collector()],
        )
        await server.start()
        assert server.broker is not None and server.http is not None
        assert server.admin is not None
        server.admin.host_settings.update(
            metadataStoreUrl=cfg.metadata_url,
            metadataStoreSessionTimeoutMillis=round(cfg.session_timeout_s * 1000),
            loadReportIntervalMs=cfg.load_report_interval_ms,
            loadBalancerBrokerOverloadedThresholdPercentage=cfg.overload_cpu_percent,
        )
        host = b.advertised_address or b.host
        http_url = f"http://{host}:{server.http.port}"
        self.address = BrokerAddress(
            broker_id=cfg.broker_id or f"{host}:{server.http.port}",
            service_url=server.broker.service_url,
            service_url_tls=server.broker.service_url_tls,
            http_url=http_url,
            listeners=b.advertised_listeners,
        )
        # Registered first: a second process under a live broker's id must fail before it
        # could act on that broker's assignments.
        await self._register(store, self.address)
        await self.ownership.start(self.address)
        self.controller = ControllerRunner(
            store,
            self.address.broker_id,
            clock=self.clock,
            cluster=b.cluster_name,
            policy=ControllerPolicy(load=LoadPolicy(overload_cpu_percent=cfg.overload_cpu_percent)),
            # autorecovery keeps the ensembles it repairs within the brokers' placement
            replica_policy=ReplicaPolicy(placement=cfg.server.placement),
        )
        server.admin.controller = self.controller
        self.controller.start()
        self._reporter = asyncio.create_task(self._report_load(store, self.address))
        self._reporter.add_done_callback(report_crash(log))

    def load_report(self, cpu_percent: float) -> LoadReport:
        """This broker's load now (rates from the loaded topics' meters)."""
        assert self.broker is not None and self.ownership is not None and self.address
        rate_in = rate_out = 0.0
        per_bundle: dict[str, float] = {}
        for topic in self.broker.loaded_topics():
            topic_in = topic.meters.msg_in.rate()
            topic_out = sum(m.msg_out.rate() for m in topic.subscription_meters.values())
            rate_in += topic_in
            rate_out += topic_out
            bundle = self.ownership.bundle_of(topic.name)
            if bundle is not None:
                per_bundle[bundle.name] = per_bundle.get(bundle.name, 0.0) + topic_in + topic_out
        return LoadReport(
            broker=self.address.broker_id,
            reported_ms=self.clock.now_ms(),
            cpu_percent=cpu_percent,
            msg_rate_in=rate_in,
            msg_rate_out=rate_out,
            topics=len(self.broker.loaded_topics()),
            connections=self.broker.connection_count,
            bundle_msg_rates=per_bundle,
        )

    async def _report_load(self, store: MetadataStore, address: BrokerAddress) -> None:
        """Rewrite the registration with a load report every ``load_report_interval_ms``
        until the registration is gone (stopping, or the session lost)."""
        path = paths.join(REGISTRATIONS_PATH, address.broker_id)
        cpu = CpuMeter(time.process_time, self.clock.monotonic_s)
        while True:
            await self.clock.sleep(self.config.load_report_interval_ms / 1000)
            report = self.load_report(cpu.sample())
            try:
                await store.multi([SetOp(path, with_load(address.registration_json(), report))])
            except (NotFound, SessionExpired):
                return
            except MetadataStoreError as exc:
                log.warning("writing the load report failed: %s", exc)

    async def _unload_bundle(self, bundle: BundleId) -> None:
        assert self.broker is not None
        await self.broker.unload_bundle(bundle)

    async def _register(self, store: MetadataStore, address: BrokerAddress) -> None:
        """Create the ephemeral registration; a node of an earlier process under the same
        id (killed, its session not expired yet) is waited out, up to two session
        timeouts. Raises :class:`BrokerStartError`."""
        path = paths.join(REGISTRATIONS_PATH, address.broker_id)
        deadline_s = self.clock.monotonic_s() + 2 * self.config.session_timeout_s
        while True:
            try:
                await store.create(path, address.registration_json(), ephemeral=True)
                return
            except NodeExists:
                if self.clock.monotonic_s() >= deadline_s:
                    raise BrokerStartError(
                        f"broker id {address.broker_id} is registered by another live broker"
                        f" ({path})"
                    ) from None
            await self.clock.sleep(REGISTRATION_WAIT_POLL_S)

    async def _watch_session(self, store: MetadataStore) -> None:
        await wait_session_lost(store)
        self.session_lost.set()

    def _cluster_collector(self) -> Any:
        from magnetar.admin.cluster_metrics import ClusterCollector

        return ClusterCollector(
            bundles_owned=lambda: 0 if self.ownership is None else len(self.ownership.core.held),
            controller_epoch=lambda: None if self.controller is None else self.controller.epoch,
            bundle_states=lambda: (
                {} if self.controller is None else self.controller.bundle_states()
            ),
            ledger_states=lambda: (
                {} if self.controller is None else self.controller.ledger_states()
            ),
            replication_tasks_in_flight=lambda: (
                None if self.controller is None else self.controller.replication_tasks_in_flight()
            ),
        )

    async def stop(self) -> None:
        """Resign as controller, give up the bundles (their clients are told to go and
        look up the new owner), deregister, then stop every part, all within
        ``STOP_TIMEOUT_S``."""
        deadline_s = asyncio.get_running_loop().time() + STOP_TIMEOUT_S
        if self._reporter is not None:
            self._reporter.cancel()
        controller, self.controller = self.controller, None
        if controller is not None:
            await stop_step("controller", controller.close(), deadline_s)
        ownership, self.ownership = self.ownership, None
        if ownership is not None:
            if self.session_lost.is_set():
                await stop_step("topics", ownership.release_all(), deadline_s)
            else:
                await stop_step("bundle ownership", ownership.close(), deadline_s)
        store = self.store
        if store is not None and self.address is not None and not self.session_lost.is_set():
            with contextlib.suppress(MagnetarError):
                await store.delete(paths.join(REGISTRATIONS_PATH, self.address.broker_id))
        server, self.server = self.server, None
        if server is not None:
            await server.stop(deadline_s)
        if self._session_task is not None:
            self._session_task.cancel()
        self.store = None
        if store is not None:
            await stop_step("metadata store", store.close(), deadline_s)

    def ready_line(self, elapsed_ms: float) -> str:
        assert self.server is not None and self.address is not None
        b = self.config.server.broker
        return (
            "magnetar broker ready: "
            + self.server.urls_text(b.advertised_address or b.host)
            + f" id {self.address.broker_id} ({elapsed_ms:.0f} ms)"
        )

    async def ended(self) -> int:
        """Returns :data:`SESSION_LOST_EXIT_CODE` once the metadata session is lost."""
        await self.session_lost.wait()
        log.error(
            "the metadata session expired: this broker's bundles may be served elsewhere "
            "now; stopping"
        )
        return SESSION_LOST_EXIT_CODE


SESSION_LOST_EXIT_CODE = 1
"""The exit status after a lost metadata session."""


async def run(config: BrokerNodeConfig, started_at: float | None = None) -> int:
    """Run until SIGINT/SIGTERM (returns 0) or a lost metadata session (returns 1); prints
    one ready line to stdout once serving (see :func:`magnetar.broker_server.serve`)."""
    return await serve(BrokerNode(config), started_at)
