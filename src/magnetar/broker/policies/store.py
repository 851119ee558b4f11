"""Where policies live in the metadata store, and reading and writing them.

Namespace policies at ``/admin/policies/<tenant>/<ns>`` (the tenant node
``/admin/policies/<tenant>`` holds the tenant info), topic overrides at
``/admin/topic-policies/<tenant>/<ns>/<domain>/<quoted local name>``. Updates are
read-modify-write with compare-and-set, retried on a version conflict up to
:data:`UPDATE_RETRIES_MAX` times.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from urllib.parse import quote, unquote

from magnetar.broker.policies.namespace_policies import Policies
from magnetar.broker.policies.topic_policies import TopicPolicies
from magnetar.common.errors import MagnetarError, MetadataError
from magnetar.common.names import NamespaceName, TopicName
from magnetar.metadata.store import (
    MUST_NOT_EXIST,
    BadVersion,
    MetadataStore,
    NodeExists,
    NotFound,
)

NAMESPACE_POLICIES_ROOT = "/admin/policies"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"
UPDATE_RETRIES_MAX = 20


def namespace_path(namespace: NamespaceName) -> str:
    return f"{NAMESPACE_POLICIES_ROOT}/{namespace.tenant}/{namespace.namespace}"


def topic_path(topic: TopicName) -> str:
    return (
        f"{TOPIC_POLICIES_ROOT}/{topic.tenant}/{topic.namespace}/{topic.domain.value}/"
        f"{quote(topic.local_name, safe='')}"
    )


def parse_policy_path(path: str) -> tuple[NamespaceName, TopicName | None] | None:
    """The namespace (and topic) a policy node belongs to, or ``None`` for other nodes
    (tenant nodes, intermediate nodes)."""
    parts = path.strip("/").split("/")
    with contextlib.suppress(ValueError, MagnetarError):
        if parts[:2] == ["admin", "policies"] and len(parts) == 4:
            return NamespaceName.of(parts[2], parts[3]), None
        if parts[:2] == ["admin", "topic-policies"] and len(parts) == 6:
            tenant, ns, domain, local = parts[2:]
            topic = TopicName.parse(f"{domain}://{tenant}/{ns}/{unquote(local)}")
            return topic.namespace_name, topic
    return None


class PolicyStore:
    """Reads and writes policies in the metadata store (no caching).

    ``on_written`` (the admin API's: :meth:`PolicyCache.written` of the broker it runs in)
    is awaited after each successful write, before the write returns: a REST answer then
    means that broker's loaded topics already apply the change (the store's notification
    reaches them, and every other broker, a moment later; until then a consumer subscribed
    right after a new dispatch rate could be sent its whole backlog unthrottled)."""

    def __init__(
        self,
        store: MetadataStore,
        on_written: Callable[[NamespaceName, TopicName | None], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._on_written = on_written

    async def _written(self, namespace: NamespaceName, topic: TopicName | None) -> None:
        if self._on_written is not None:
            await self._on_written(namespace, topic)

    async def get_namespace(self, namespace: NamespaceName) -> Policies | None:
        """``None`` when the namespace does not exist. Raises :class:`PolicyError`."""
        try:
            got = await self.store.get(namespace_path(namespace))
        except NotFound:
            return None
        return Policies.decode(got.value)

    async def create_namespace(self, namespace: NamespaceName, policies: Policies) -> None:
        """Raises ``NodeExists`` when the namespace exists."""
        await self.store.put(namespace_path(namespace), policies.encode(), MUST_NOT_EXIST)

    async def update_namespace(
        self, namespace: NamespaceName, change: Callable[[Policies], Policies]
    ) -> Policies:
        """Read-modify-write with compare-and-set (retried on conflict). Raises ``NotFound``
        when the namespace does not exist."""
        path = namespace_path(namespace)
        for _ in range(UPDATE_RETRIES_MAX):
            got = await self.store.get(path)
            new = change(Policies.decode(got.value))
            try:
                await self.store.put(path, new.encode(), got.stat.version)
            except BadVersion:
                continue
            await self._written(namespace, None)
            return new
        raise MetadataError(f"{path}: too many concurrent updates")

    async def get_topic(self, topic: TopicName) -> TopicPolicies | None:
        try:
            got = await self.store.get(topic_path(topic))
        except NotFound:
            return None
        return TopicPolicies.decode(got.value)

    async def update_topic(
        self, topic: TopicName, change: Callable[[TopicPolicies], TopicPolicies]
    ) -> TopicPolicies:
        """Read-modify-write of the topic's overrides (created when absent)."""
        path = topic_path(topic)
        for _ in range(UPDATE_RETRIES_MAX):
            try:
                got = await self.store.get(path)
                current, version = TopicPolicies.decode(got.value), got.stat.version
            except NotFound:
                current, version = TopicPolicies(), MUST_NOT_EXIST
            new = change(current)
            try:
                await self.store.put(path, new.encode(), version)
            except (BadVersion, NodeExists):
                continue
            await self._written(topic.namespace_name, topic)
            return new
        raise MetadataError(f"{path}: too many concurrent updates")

    async def delete_topic(self, topic: TopicName) -> None:
        """Forget a topic's overrides (no error when there are none)."""
        try:
            await self.store.delete(topic_path(topic))
        except NotFound:
            return
        await self._written(topic.namespace_name, topic)
