"""Bundle ownership of a cluster broker: the asyncio shell around
:class:`~magnetar.broker.bundle_ownership.BundleOwnership`, and lookups of a topic's owner.

Metadata it reads and writes (Pulsar's paths where Pulsar has one):

* ``/controller_state/namespaces/<quoted tenant/ns>`` and
  ``/controller_state/bundles/<quoted bundle>`` — the controller's bundle boundaries and
  records (:mod:`magnetar.broker.controller.election`); a record naming this broker in
  ASSIGNING or OWNED is the command "hold this bundle";
* ``/namespace/<tenant>/<ns>/<0x..._0x...>`` — the ephemeral ownership node of a bundle,
  created by its owner in one ``fenced_multi`` on ``/controller_epoch`` with the
  command's epoch, and holding the owner's URLs as Pulsar's ``NamespaceEphemeralData``
  (``nativeUrl``, ``nativeUrlTls``, ``httpUrl``, ``httpUrlTls``, ``disabled``,
  ``advertisedListeners``) plus ``brokerId`` and ``epoch``.

One task applies the records: it re-reads them on every change under
``/controller_state`` and at least every ``rescan_interval_ms`` (watches may coalesce, and
the controller resends a command without rewriting its record), so a command is never
missed for longer than that.

Lookups (:meth:`ClusterOwnership.owner`) read the ownership node of the topic's bundle;
while no broker holds it they wait for a change under ``/namespace`` or
``/controller_state``, bounded by the caller's timeout, then raise
:class:`~magnetar.common.errors.ServiceNotReady` (retriable: the client looks up again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from magnetar.broker.bundle_ownership import (
    AcquireOwnership,
    BundleOwnership,
    Holding,
    OwnershipEffect,
    ReleaseOwnership,
)
from magnetar.broker.controller.bundle_state import BundleRecord, CorruptRecord
from magnetar.broker.controller.bundles import BundleId, NamespaceBundles
from magnetar.broker.controller.election import CONTROLLER_PATH, REGISTRATIONS_PATH, STATE_ROOT
from magnetar.broker.listeners import NO_LISTENERS, AdvertisedListener, AdvertisedListeners
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError, ServiceNotReady
from magnetar.common.names import TopicName
from magnetar.common.task_crash import report_crash
from magnetar.metadata import path as paths
from magnetar.metadata.election import fenced_multi
from magnetar.metadata.notifications import NotificationStream
from magnetar.metadata.store import (
    CreateOp,
    FencedByEpoch,
    MetadataStore,
    MetadataStoreError,
    NodeExists,
    NotFound,
    SessionExpired,
    SessionState,
)

log = logging.getLogger(__name__)

OWNERSHIP_ROOT = "/namespace"
"""Pulsar's root of bundle ownership nodes."""
CONTROLLER_EPOCH_PATH = CONTROLLER_PATH + "_epoch"
DEFAULT_RESCAN_INTERVAL_MS = 5_000
DEFAULT_OWNER_PROBE_TIMEOUT_MS = 200


def ownership_path(bundle: BundleId) -> str:
    """``/namespace/<tenant>/<ns>/<0x..._0x...>``."""
    return f"{OWNERSHIP_ROOT}/{bundle.namespace}/{bundle.range.name}"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """How clients reach one broker: what its registration and ownership nodes hold."""

    broker_id: str
    service_url: str
    """``pulsar://host:port`` for lookups without a listener name."""
    service_url_tls: str | None
    http_url: str
    listeners: AdvertisedListeners = NO_LISTENERS

    def lookup_urls(self, listener_name: str | None) -> tuple[str, str]:
        """``(plain, tls)`` URLs a lookup naming ``listener_name`` gets (as
        :meth:`magnetar.broker.service.BrokerService.lookup_urls`). Raises
        :class:`~magnetar.common.errors.ListenerNotFound`."""
        if listener_name is None or not listener_name.strip():
            return self.service_url, self.service_url_tls or self.service_url
        listener = self.listeners.require(listener_name)
        url = listener.broker_service_url
        return url, listener.broker_service_url_tls or url

    def _listeners_json(self) -> dict[str, dict[str, str]]:
        return {
            li.name: {"brokerUrl": li.broker_service_url, "brokerUrlTls": li.broker_service_url_tls}
            if li.broker_service_url_tls
            else {"brokerUrl": li.broker_service_url}
            for li in self.listeners.listeners
        }

    def registration_json(self) -> bytes:
        """The value of ``/loadbalance/brokers/<id>`` (field names of Pulsar's
        ``LocalBrokerData``)."""
        body: dict[str, Any] = {
            "brokerId": self.broker_id,
            "pulsarServiceUrl": self.service_url,
            "pulsarServiceUrlTls": self.service_url_tls,
            "webServiceUrl": self.http_url,
            "advertisedListeners": self._listeners_json(),
            "internalListenerName": self.listeners.internal_name,
        }
        return json.dumps(body, sort_keys=True).encode()

    def ownership_json(self, epoch: int) -> bytes:
        """The value of an ownership node (Pulsar's ``NamespaceEphemeralData`` fields plus
        the broker id and the controller epoch of the command)."""
        body: dict[str, Any] = {
            "brokerId": self.broker_id,
            "nativeUrl": self.service_url,
            "nativeUrlTls": self.service_url_tls,
            "httpUrl": self.http_url,
            "httpUrlTls": None,
            "disabled": False,
            "advertisedListeners": self._listeners_json(),
            "internalListenerName": self.listeners.internal_name,
            "epoch": epoch,
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BrokerAddress:
        """Read a registration or ownership node. Raises :class:`CorruptRecord`."""
        try:
            body = json.loads(data)
            listeners = tuple(
                AdvertisedListener(name, v["brokerUrl"], v.get("brokerUrlTls"))
                for name, v in sorted(body.get("advertisedListeners", {}).items())
            )
            return cls(
                broker_id=str(body["brokerId"]),
                service_url=str(body.get("nativeUrl") or body["pulsarServiceUrl"]),
                service_url_tls=body.get("nativeUrlTls", body.get("pulsarServiceUrlTls")),
                http_url=str(body.get("httpUrl") or body["webServiceUrl"]),
                listeners=AdvertisedListeners(
                    listeners, body.get("internalListenerName") if listeners else None
                ),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptRecord(f"undecodable broker address {data[:80]!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    address: BrokerAddress
    epoch: int


async def registered_brokers(store: MetadataStore) -> list[str]:
    """Ids of the brokers registered now (sorted)."""
    try:
        return await store.children(REGISTRATIONS_PATH)
    except NotFound:
        return []


async def current_controller(store: MetadataStore) -> ControllerInfo | None:
    """The controller as stored now (its registration and epoch), ``None`` while none is
    elected or its registration is gone."""
    try:
        broker_id = (await store.get(CONTROLLER_PATH)).value.decode()
        epoch = (await store.get(CONTROLLER_EPOCH_PATH)).stat.version
        registration = await store.get(paths.join(REGISTRATIONS_PATH, broker_id))
    except NotFound:
        return None
    return ControllerInfo(BrokerAddress.from_json(registration.value), epoch)


class ClusterOwnership:
    """Which bundles this broker serves, applied from the controller's records.

    ``unload_bundle`` must close every topic of the bundle (telling its producers and
    consumers to go) before it returns; it is called before the ownership node is deleted.
    Construct before the broker serves; :meth:`start` once its address (and with it its
    broker id) is known. Until then, and after :meth:`close`, it serves nothing.
    """

    def __init__(
        self,
        store: MetadataStore,
        *,
        unload_bundle: Callable[[BundleId], Awaitable[None]],
        clock: Clock,
        rescan_interval_ms: int = DEFAULT_RESCAN_INTERVAL_MS,
        owner_probe_timeout_ms: int = DEFAULT_OWNER_PROBE_TIMEOUT_MS,
        state_root: str = STATE_ROOT,
    ) -> None:
        self.store = store
        self.owner_probe_timeout_ms = owner_probe_timeout_ms
        self.core = BundleOwnership("")
        """Replaced by the broker's own at :meth:`start`."""
        self._unload_bundle = unload_bundle
        self._clock = clock
        self.rescan_interval_ms = rescan_interval_ms
        self.namespaces_path = paths.join(state_root, "namespaces")
        self.bundles_path = paths.join(state_root, "bundles")
        self._state_root = state_root
        self.address: BrokerAddress | None = None
        self._namespaces: dict[str, NamespaceBundles] = {}
        self._seen: set[BundleId] = set()
        self._changed = asyncio.Event()
        """Set (and replaced by a fresh one) on every change seen under the watched roots:
        a lookup takes the current one before reading, so no change is missed."""
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._streams: list[NotificationStream] = []
        self._closing = False

    # --- queries -------------------------------------------------------------------------

    @property
    def broker_id(self) -> str:
        """This broker's registered id ("" before :meth:`start`)."""
        return "" if self.address is None else self.address.broker_id

    def bundle_of(self, name: TopicName) -> BundleId | None:
        """The topic's bundle by the boundaries read last (``None`` if not known yet)."""
        bundles = self._namespaces.get(str(name.namespace_name))
        return None if bundles is None else bundles.bundle_for_topic(name)

    @property
    def session_lost(self) -> bool:
        """True once the metadata session is LOST: the ownership nodes went with it and
        the controller may have given the bundles to another broker, so this broker
        vouches for no topic any more (it serves nothing; lookups and requests for topics
        are answered ServiceNotReady)."""
        return self.store.session_state is SessionState.LOST

    def require_session(self) -> None:
        """Raises :class:`ServiceNotReady` once :attr:`session_lost`."""
        if self.session_lost:
            raise ServiceNotReady(
                "this broker lost its metadata session and serves no topic; look it up again"
            )

    def serves(self, name: TopicName) -> bool:
        """True while this broker holds the topic's bundle (never once the session is
        lost)."""
        if self._closing or self.address is None or self.session_lost:
            return False
        bundle = self.bundle_of(name)
        return bundle is not None and self.core.serves(bundle)

    async def serving_soon(self, name: TopicName, timeout_ms: int) -> bool:
        """Whether this broker serves the topic's bundle, waiting up to ``timeout_ms`` while
        it is taking the bundle (its ownership node created, the reply not yet in): another
        broker's lookup reads the node as soon as it exists and may send a client here
        first, which would be refused ("not served") in that gap."""
        deadline_s = self._clock.monotonic_s() + timeout_ms / 1000
        while not self.serves(name):
            bundle = self.bundle_of(name)
            if bundle is None or self.core.holding(bundle) is not Holding.ACQUIRING:
                return False
            remaining_s = deadline_s - self._clock.monotonic_s()
            if remaining_s <= 0 or self._closing:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining_s)
        return True

    async def namespace_bundles(self, namespace: str) -> NamespaceBundles | None:
        """The namespace's bundles as the controller stored them (``None`` before it has)."""
        return await self._read_namespace(namespace)

    async def owner(self, name: TopicName, timeout_ms: int) -> BrokerAddress:
        """The address of the broker holding the topic's bundle, waiting up to
        ``timeout_ms`` for one to take it. Raises :class:`ServiceNotReady` when none did.

        An owner whose binary port refuses connections (its process is gone; its
        ownership node lingers until its session expires) counts as none: the lookup
        waits for the bundle to move instead of sending the client to a dead broker,
        whose refusal would put the client into its reconnect backoff. A node naming this
        broker counts only while this broker serves the bundle (see the comment below).
        Once this broker's session is lost it raises :class:`ServiceNotReady` at once: it
        cannot read the current owner."""
        self.require_session()
        deadline_s = self._clock.monotonic_s() + timeout_ms / 1000
        what = f"the namespace {name.namespace_name}"
        while True:
            changed = self._changed
            bundles = await self._read_namespace(str(name.namespace_name))
            if bundles is not None:
                bundle = bundles.bundle_for_topic(name)
                what = f"the bundle {bundle}"
                try:
                    got = await self.store.get(ownership_path(bundle))
                except NotFound:
                    pass
                else:
                    address = BrokerAddress.from_json(got.value)
                    if address.broker_id == self.broker_id:
                        if self.serves(name):
                            return address
                        # The node names this broker, which does not serve the bundle: it
                        # is an earlier process's under the same id (killed or cut off
                        # while stopping; its session not expired yet), or this broker is
                        # between creating the node and serving. A client sent here now
                        # would be refused its SUBSCRIBE or PRODUCER ("not served"), and
                        # the official C++ client then waits out its operation timeout
                        # instead of looking the topic up again.
                        what = f"the bundle {bundle} (not served here yet)"
                    elif not await self._refuses(address):
                        return address
                    else:
                        what = f"the bundle {bundle} (its owner {address.broker_id} is down)"
            remaining_s = deadline_s - self._clock.monotonic_s()
            if remaining_s <= 0 or self._closing:
                raise ServiceNotReady(f"no broker owns {what} yet; try again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining_s)

    async def _refuses(self, address: BrokerAddress) -> bool:
        """True only if the owner's binary port actively refused a connection; a timeout
        or any other error (a stalled or remote broker) gives it the benefit of the doubt."""
        host_port = address.service_url.split("://", 1)[-1].rstrip("/")
        host, _, port = host_port.rpartition(":")
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port)), self.owner_probe_timeout_ms / 1000
            )
        except ConnectionRefusedError:
            return True
        except (OSError, ValueError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return False

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self, address: BrokerAddress) -> None:
        self.address = address
        self.core = BundleOwnership(address.broker_id)
        for prefix in (self._state_root, OWNERSHIP_ROOT):
            stream = self.store.notifications(prefix)
            self._streams.append(stream)
            await stream.wait_ready()
            self._tasks.append(asyncio.create_task(self._pump(stream)))
        run = asyncio.create_task(self._run(), name="bundle-ownership")
        run.add_done_callback(report_crash(log))
        self._tasks.append(run)

    async def close(self) -> None:
        """Stop applying commands and release every held bundle (topics closed, ownership
        nodes deleted) so the controller can reassign them at once."""
        self._closing = True
        self._changed.set()
        for stream in self._streams:
            stream.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for bundle in sorted(self.core.held):
            self.core.record_seen(bundle, None, self._clock.now_ms())
            await self._release(bundle)

    async def release_all(self) -> None:
        """Close the topics of every bundle held (the session is lost: the ownership
        nodes are gone already). Serves nothing afterwards."""
        self._closing = True
        for bundle in sorted(self.core.held):
            with contextlib.suppress(MagnetarError):
                await self._unload_bundle(bundle)

    # --- internals -----------------------------------------------------------------------

    async def _pump(self, stream: NotificationStream) -> None:
        async for _ in stream:
            self._wake_lookups()
            self._dirty.set()

    def _wake_lookups(self) -> None:
        """Lookups waiting in :meth:`owner` read again (a change under the watched roots, or
        this broker began or stopped serving a bundle)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _run(self) -> None:
        while not self._closing:
            self._dirty.clear()
            try:
                await self._sync()
                await self._apply(self.core.tick(self._clock.now_ms()))
            except SessionExpired:
                return
            except MetadataStoreError as exc:
                log.warning("reading the controller's bundle records failed: %s", exc)
            timer = self._clock.call_later(self.rescan_interval_ms / 1000, self._dirty.set)
            try:
                await self._dirty.wait()
            finally:
                timer.cancel()

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.children(path)
        except NotFound:
            return []

    async def _read_namespace(self, namespace: str) -> NamespaceBundles | None:
        try:
            got = await self.store.get(paths.join(self.namespaces_path, _segment(namespace)))
        except NotFound:
            return None
        try:
            bundles = NamespaceBundles.from_names(namespace, json.loads(got.value)["boundaries"])
        except (ValueError, KeyError, TypeError, MagnetarError) as exc:
            log.error("the bundle boundaries of %s are unreadable: %s", namespace, exc)
            return None
        self._namespaces[namespace] = bundles
        return bundles

    async def _sync(self) -> None:
        """Read every namespace's boundaries and every bundle record; feed the core."""
        for segment in await self._children(self.namespaces_path):
            await self._read_namespace(unquote(segment))
        seen: set[BundleId] = set()
        now_ms = self._clock.now_ms()
        for segment in await self._children(self.bundles_path):
            path = paths.join(self.bundles_path, segment)
            try:
                bundle = BundleId.parse(unquote(segment))
                record = BundleRecord.from_bytes((await self.store.get(path)).value)
            except NotFound:
                continue
            except MagnetarError as exc:
                log.error("skipping the bundle record %s: %s", path, exc)
                continue
            seen.add(bundle)
            await self._apply(self.core.record_seen(bundle, record, now_ms))
        for bundle in sorted(self._seen - seen):
            await self._apply(self.core.record_seen(bundle, None, now_ms))
        self._seen = seen

    async def _apply(self, effects: list[OwnershipEffect]) -> None:
        for effect in effects:
            if isinstance(effect, AcquireOwnership):
                await self._apply(await self._acquire(effect))
            elif isinstance(effect, ReleaseOwnership):
                await self._apply(await self._release(effect.bundle))

    async def _acquire(self, effect: AcquireOwnership) -> list[OwnershipEffect]:
        assert self.address is not None
        bundle, path = effect.bundle, ownership_path(effect.bundle)
        now_ms = self._clock.now_ms()
        try:
            with contextlib.suppress(NodeExists):
                await self.store.create(paths.parent(path), b"")
            await fenced_multi(
                self.store,
                CONTROLLER_EPOCH_PATH,
                effect.epoch,
                [CreateOp(path, self.address.ownership_json(effect.epoch), ephemeral=True)],
            )
        except FencedByEpoch:
            log.info("not taking %s: the command's epoch %d is over", bundle, effect.epoch)
            return self.core.acquire_failed(bundle, effect.epoch, now_ms, fenced=True)
        except NodeExists:
            stat = await self.store.exists(path)
            if stat is None or stat.ephemeral_owner != self.store.session_id:
                log.info("not taking %s yet: another session still holds it", bundle)
                return self.core.acquire_failed(bundle, effect.epoch, now_ms, fenced=False)
        except SessionExpired:
            raise
        except MetadataStoreError as exc:
            log.warning("taking %s failed: %s", bundle, exc)
            return self.core.acquire_failed(bundle, effect.epoch, now_ms, fenced=False)
        log.info("now serving bundle %s (controller epoch %d)", bundle, effect.epoch)
        effects = self.core.acquired(bundle, now_ms)
        self._wake_lookups()
        return effects

    async def _release(self, bundle: BundleId) -> list[OwnershipEffect]:
        # Serving stopped when the core left HELD; close the topics, then let go of the node.
        try:
            await self._unload_bundle(bundle)
        except MagnetarError as exc:
            log.warning("closing the topics of %s: %s", bundle, exc)
        with contextlib.suppress(NotFound, SessionExpired):
            stat = await self.store.exists(ownership_path(bundle))
            if stat is not None and stat.ephemeral_owner == self.store.session_id:
                await self.store.delete(ownership_path(bundle), stat.version)
        log.info("released bundle %s", bundle)
        return self.core.released(bundle, self._clock.now_ms())


def _segment(name: str) -> str:
    return quote(name, safe="")
