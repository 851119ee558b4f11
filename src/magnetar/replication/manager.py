"""The topic owner's side of geo-replication: one
:class:`~magnetar.replication.persistent_replicator.PersistentReplicator` per loaded topic
and remote cluster of its replication clusters (:mod:`magnetar.replication.policy`).

The broker calls it through its topic hooks (:class:`magnetar.broker.topic_hooks.TopicHooks`):
:meth:`ReplicationManager.topic_loaded` when a topic has loaded (its replication cursors are
created before the topic takes producers, so nothing published is missed),
:meth:`ReplicationManager.policies_applied` when its policies changed (replicators started
and stopped to match; the cursor of a cluster taken off the list is deleted, so it no longer
holds the log), :meth:`ReplicationManager.topic_closing` before its managed ledger closes
(its replicators stop; the next owner resumes from the cursors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from magnetar.common.errors import MagnetarError
from magnetar.replication.policy import effective_clusters, remote_clusters

if TYPE_CHECKING:
    from magnetar.auth.client_credentials import ClientCredentials
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import Topic
    from magnetar.replication.persistent_replicator import PersistentReplicator
    from magnetar.replication.replicated_subscriptions import ReplicatedSubscriptionsController

log = logging.getLogger(__name__)


class ReplicationManager:
    """The replicators of one broker's loaded topics. Register with
    ``service.topic_hooks.append(manager)``; ``credentials`` are the broker's client ones,
    which its replicators present to remote clusters."""

    def __init__(self, service: BrokerService, credentials: ClientCredentials) -> None:
        self._service = service
        self._credentials = credentials
        self._replicators: dict[str, dict[str, PersistentReplicator]] = {}
        self._controllers: dict[str, ReplicatedSubscriptionsController] = {}
        self._locks: dict[str, _TopicLock] = {}

    def controller_of(self, topic: str) -> ReplicatedSubscriptionsController | None:
        """The replicated subscriptions controller of ``topic`` (None: not replicated)."""
        return self._controllers.get(topic)

    def controllers(self) -> list[ReplicatedSubscriptionsController]:
        return list(self._controllers.values())

    def replicators_of(self, topic: str) -> dict[str, PersistentReplicator]:
        """The running replicators of ``topic`` (a full name) by remote cluster."""
        return dict(self._replicators.get(topic, {}))

    async def _remotes(self, topic: Topic, *, fresh: bool) -> frozenset[str]:
        policies = self._service.policies
        name = topic.name
        base = name.partitioned_topic if name.partition_index >= 0 else name
        ns = await policies.namespace(name.namespace_name, fresh=fresh)
        own = await policies.topic(base, fresh=fresh)
        return remote_clusters(self._service.config.cluster_name, effective_clusters(ns, own))

    async def topic_loaded(self, topic: Topic) -> None:
        from magnetar.replication.persistent_replicator import CURSOR_PREFIX

        # Most topics replicate nowhere: then, with no replicator running and no replication
        # cursor to delete, there is nothing to do and no lock to take (doing nothing is
        # right whatever a concurrent change of the topic's policies does).
        if topic.full_name not in self._replicators and not any(
            n.startswith(CURSOR_PREFIX) for n in topic.ml.cursors
        ):
            try:
                if not await self._remotes(topic, fresh=False):
                    return
            except MagnetarError:
                pass  # _sync reports it
        await self._sync(topic, fresh=False)

    def policies_applied(self, topic: Topic) -> None:
        # fresh reads: the cache may not have seen the change that called this yet
        self._service.spawn(self._sync(topic, fresh=True))

    async def topic_closing(self, topic: Topic) -> None:
        async with self._locked(topic.full_name):
            controller = self._controllers.pop(topic.full_name, None)
            if controller is not None:
                await controller.stop()
            running = self._replicators.pop(topic.full_name, {})
            for replicator in running.values():
                await replicator.stop()

    @contextlib.asynccontextmanager
    async def _locked(self, name: str) -> AsyncIterator[None]:
        """Hold topic ``name``'s lock (one change of its replicators at a time); the lock
        is kept only while someone holds or waits for it, not per loaded topic."""
        entry = self._locks.get(name)
        if entry is None:
            entry = self._locks[name] = _TopicLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0 and self._locks.get(name) is entry:
                del self._locks[name]

    async def _sync(self, topic: Topic, *, fresh: bool) -> None:
        """Start and stop ``topic``'s replicators to match its replication clusters, and
        delete the cursors of clusters no longer among them (they would hold the log's
        entries forever). A failure to read the policies or to create or delete a cursor
        is logged; the next policy change or load tries again."""
        # imported by the first topic, not at the broker's start: with the replicators
        # come the protocol's markers and the replicated subscriptions' snapshots
        from magnetar.replication.persistent_replicator import CURSOR_PREFIX, PersistentReplicator

        async with self._locked(topic.full_name):
            if topic.closed:
                return
            try:
                wanted = await self._remotes(topic, fresh=fresh)
            except MagnetarError as exc:
                log.warning("%s: replication clusters unknown: %s", topic.full_name, exc)
                return
            if topic.closed:  # it closed while the policies were read
                return
            running = self._replicators.get(topic.full_name)
            if running is None:
                if not wanted and not any(n.startswith(CURSOR_PREFIX) for n in topic.ml.cursors):
                    return  # not replicated (most topics): nothing to do, nothing kept
                running = self._replicators[topic.full_name] = {}
            for remote in sorted(set(running) - wanted):
                await running.pop(remote).stop()
            for name in sorted(topic.ml.cursors):
                remote = name[len(CURSOR_PREFIX) :]
                if name.startswith(CURSOR_PREFIX) and remote not in wanted:
                    try:
                        await topic.ml.delete_cursor(name)
                    except MagnetarError as exc:
                        log.warning("%s: deleting cursor %s: %s", topic.full_name, name, exc)
            for remote in sorted(wanted - set(running)):
                replicator = PersistentReplicator(
                    topic=topic.full_name,
                    ml=topic.ml,
                    local=self._service.config.cluster_name,
                    remote=remote,
                    store=self._service.store,
                    clock=self._service.clock,
                    schemas=self._service.schemas.registry,
                    # built here, not at start: it imports the client library
                    authentication=self._credentials.client_authentication(),
                )
                try:
                    await replicator.open_cursor()
                except MagnetarError as exc:
                    log.warning("%s: replication cursor to %s: %s", topic.full_name, remote, exc)
                    continue
                replicator.start()
                running[remote] = replicator
            await self._sync_controller(topic, running)
            if not running:
                self._replicators.pop(topic.full_name, None)

    async def _sync_controller(
        self, topic: Topic, running: dict[str, PersistentReplicator]
    ) -> None:
        """Run the replicated subscriptions controller while ``topic`` replicates."""
        name = topic.full_name
        controller = self._controllers.get(name)
        if running and controller is None:
            from magnetar.replication.replicated_subscriptions import (
                ReplicatedSubscriptionsController,
            )

            controller = ReplicatedSubscriptionsController(
                topic,
                self._service.config.cluster_name,
                lambda: self._replicators.get(name, {}),
                self._service.clock,
            )
            controller.start()
            self._controllers[name] = controller
        elif not running and controller is not None:
            del self._controllers[name]
            await controller.stop()


class _TopicLock:
    """A topic's lock and how many hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


def attach_replication(
    service: BrokerService, credentials: ClientCredentials
) -> ReplicationManager:
    """A :class:`ReplicationManager` following ``service``'s topics, its replicators
    authenticating to remote clusters with ``credentials`` (the broker's client ones)."""
    manager = ReplicationManager(service, credentials)
    service.topic_hooks.append(manager)
    return manager
