"""The broker's live view of policies: cached reads plus change notifications.

:class:`PolicyCache` reads through a :class:`~magnetar.metadata.cache.MetadataCache` and
follows the store's notifications under both roots; after a change it reads the changed node
directly from the store (so it never acts on a value the cache has not yet dropped) and calls
every listener with the affected namespace (and topic, for topic policies). The broker
re-resolves its loaded topics there, so a change takes effect on live topics without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker.dynamic_config import DynamicConfigFollower, overridden
from magnetar.broker.policies.json_fields import PolicyError
from magnetar.broker.policies.namespace_policies import Policies
from magnetar.broker.policies.resolution import BrokerDefaults, EffectivePolicies, resolve
from magnetar.broker.policies.store import (
    NAMESPACE_POLICIES_ROOT,
    TOPIC_POLICIES_ROOT,
    PolicyStore,
    namespace_path,
    parse_policy_path,
    topic_path,
)
from magnetar.broker.policies.topic_policies import TopicPolicies
from magnetar.common.names import NamespaceName, TopicName
from magnetar.metadata.cache import MetadataCache
from magnetar.metadata.notifications import StreamOverflow
from magnetar.metadata.store import MetadataStore, NotFound

log = logging.getLogger(__name__)


PolicyListener = Callable[[NamespaceName | None, TopicName | None], Awaitable[None]]
"""``(namespace, topic)``: a namespace's policies changed (``topic`` None), or a topic's
overrides changed; ``(None, None)``: anything may have changed (notifications were lost)."""


class PolicyCache:
    """Cached policy reads plus change notifications. ``await start()``; ``await close()``."""

    def __init__(self, store: MetadataStore, defaults: BrokerDefaults) -> None:
        self.store = store
        self.configured_defaults = defaults
        """The broker's own settings; :attr:`defaults` adds the dynamic configuration."""
        self.defaults = defaults
        self._dynamic_config = DynamicConfigFollower(store, self._defaults_overridden)
        self.policy_store = PolicyStore(store)
        self._namespaces = MetadataCache(store, NAMESPACE_POLICIES_ROOT)
        self._topics = MetadataCache(store, TOPIC_POLICIES_ROOT)
        self._listeners: list[PolicyListener] = []
        self._decoded: dict[str, tuple[bytes, Policies]] = {}
        """Namespace policies path -> the stored value last decoded and its decoding (the
        decoding is frozen, so callers share it)."""
        self._resolved: dict[
            NamespaceName, tuple[BrokerDefaults, Policies | None, EffectivePolicies]
        ] = {}
        """Namespace -> what a topic without overrides resolves to, with the defaults and
        the namespace policies (these very objects) it was resolved from."""
        self._tasks: list[asyncio.Task[None]] = []
        # one change at a time, whether a notification or this process's own write told of
        # it: a slow fresh read for an earlier change never lands after a later one's
        self._notifying = asyncio.Lock()

    def add_listener(self, listener: PolicyListener) -> None:
        """``listener`` (see :data:`PolicyListener`) runs after each change, one at a time."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Follow the stored policies and the dynamic configuration (the broker defaults
        changed at run time, :mod:`magnetar.broker.dynamic_config`)."""
        await self._dynamic_config.start()
        for root, cache in (
            (NAMESPACE_POLICIES_ROOT, self._namespaces),
            (TOPIC_POLICIES_ROOT, self._topics),
        ):
            await cache.start()
            stream = self.store.notifications(root)
            await stream.wait_ready()
            self._tasks.append(
                asyncio.create_task(self._follow(root, stream), name=f"policies-{root}")
            )

    async def _defaults_overridden(self, values: dict[str, str]) -> None:
        defaults = overridden(self.configured_defaults, values)
        if defaults != self.defaults:
            self.defaults = defaults
            await self._notify(None, None)  # every loaded topic resolves its policies anew

    async def close(self) -> None:
        await self._dynamic_config.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._namespaces.close()
        await self._topics.close()

    async def _follow(self, root: str, stream: Any) -> None:
        while True:
            try:
                async for event in stream:
                    target = parse_policy_path(event.path)
                    if target is not None:
                        await self._notify(*target)
                return
            except StreamOverflow:
                log.warning("policy notifications under %s overflowed; refreshing all", root)
            finally:
                stream.close()
            stream = self.store.notifications(root)
            await stream.wait_ready()
            await self._notify(None, None)

    async def written(self, namespace: NamespaceName, topic: TopicName | None) -> None:
        """This process has just written ``namespace``'s policies (``topic`` None) or
        ``topic``'s overrides: drop the cached value and tell the listeners now, as the
        store's notification will again (listeners re-read fresh values, so twice is
        harmless). The :data:`PolicyListener` the admin API's :class:`PolicyStore` calls."""
        if topic is None:
            self._namespaces.invalidate(namespace_path(namespace))
        else:
            path = topic_path(topic)
            self._topics.invalidate(path)
            self._topics.invalidate(path.rpartition("/")[0])  # its list of topics
        await self._notify(namespace, topic)

    async def _notify(self, namespace: NamespaceName | None, topic: TopicName | None) -> None:
        async with self._notifying:
            for listener in list(self._listeners):
                try:
                    await listener(namespace, topic)
                except Exception:
                    log.exception("policy listener failed for %s %s", namespace, topic)

    async def namespace(self, namespace: NamespaceName, *, fresh: bool = False) -> Policies | None:
        """The namespace's policies (``None`` if it does not exist). ``fresh`` bypasses the
        cache (use in listeners: the cache may not have seen the change yet)."""
        path = namespace_path(namespace)
        if fresh:
            try:
                value = (await self.store.get(path)).value
            except NotFound:
                return None
        else:
            got = await self._namespaces.get(path)
            if got is None:
                return None
            value = got.value
        decoded = self._decoded.get(path)
        if decoded is None or decoded[0] != value:
            decoded = self._decoded[path] = (value, Policies.decode(value))
        return decoded[1]

    async def namespace_exists(self, namespace: NamespaceName) -> bool:
        """Whether the namespace exists. A cached "no" is confirmed by a fresh read, so a
        namespace created a moment ago (its notification still on the way) is not refused."""
        path = namespace_path(namespace)
        if await self._namespaces.get(path) is not None:
            return True
        return await self.store.exists(path) is not None

    async def topic(self, topic: TopicName, *, fresh: bool = False) -> TopicPolicies | None:
        if fresh:
            return await self.policy_store.get_topic(topic)
        path = topic_path(topic)
        parent, _, leaf = path.rpartition("/")
        # most topics have no overrides: the namespace's watched list of those that do
        # answers for them without a read per topic
        if not await self._topics.has_child(parent, leaf):
            return None
        got = await self._topics.get(path)
        return None if got is None else TopicPolicies.decode(got.value)

    async def effective(self, topic: TopicName, *, fresh: bool = False) -> EffectivePolicies:
        """Resolved policies of ``topic``. A malformed stored value is logged and ignored
        (the level falls back to the next one), so bad admin input never stops a topic."""
        base = topic.partitioned_topic if topic.partition_index >= 0 else topic
        ns: Policies | None = None
        tp: TopicPolicies | None = None
        try:
            ns = await self.namespace(topic.namespace_name, fresh=fresh)
        except PolicyError as exc:
            log.warning("ignoring namespace policies of %s: %s", topic.namespace_name, exc)
        try:
            tp = await self.topic(base, fresh=fresh)
            if tp is None and base is not topic:
                tp = await self.topic(topic, fresh=fresh)
        except PolicyError as exc:
            log.warning("ignoring topic policies of %s: %s", base, exc)
        if tp is not None:
            return resolve(self.defaults, ns, tp)
        # Most topics have no overrides: theirs is their namespace's, resolved once.
        key = topic.namespace_name
        resolved = self._resolved.get(key)
        if resolved is None or resolved[0] is not self.defaults or resolved[1] is not ns:
            resolved = self._resolved[key] = (self.defaults, ns, resolve(self.defaults, ns))
        return resolved[2]
