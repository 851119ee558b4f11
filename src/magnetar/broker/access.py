"""The broker's access control: authorization decisions (:mod:`magnetar.auth`) fed with
the tenant info and namespace policies from the metadata store.

Every check reads the namespace policies fresh from the store, so a revoked permission
takes effect on the very next PRODUCER, SUBSCRIBE, LOOKUP or REST request. (Connections
and producers already open keep working, as in Pulsar.) With authorization off every
check returns at once, without a read.
"""

from __future__ import annotations

import json
from typing import Any

from magnetar.auth import AuthConfig, Authorizer, AuthPolicies, TopicOperation
from magnetar.auth.authorization import AuthAction
from magnetar.broker.policies import NAMESPACE_POLICIES_ROOT, PolicyCache
from magnetar.common.errors import AuthorizationError, TopicNotFound
from magnetar.common.names import NamespaceName, TopicName
from magnetar.metadata.store import MetadataStore, NotFound

_OPERATION_WORDS = {
    TopicOperation.LOOKUP: "lookup",
    TopicOperation.PRODUCE: "produce",
    TopicOperation.CONSUME: "consume",
}


class AccessControl:
    """Authorization of one broker (and its admin REST)."""

    def __init__(self, config: AuthConfig, store: MetadataStore, policies: PolicyCache) -> None:
        self.authorizer = Authorizer(config.authorization_enabled, config.super_user_roles)
        self._store = store
        self._policies = policies

    @property
    def enabled(self) -> bool:
        return self.authorizer.enabled

    async def tenant_admin_roles(self, tenant: str) -> list[str]:
        """The tenant's ``adminRoles`` ([] for a tenant that does not exist)."""
        try:
            got = await self._store.get(f"{NAMESPACE_POLICIES_ROOT}/{tenant}")
        except NotFound:
            return []
        try:
            info: Any = json.loads(got.value) if got.value.strip() else {}
        except ValueError:
            return []
        roles = info.get("adminRoles") if isinstance(info, dict) else None
        return [str(r) for r in roles] if isinstance(roles, list) else []

    async def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        if self.authorizer.is_super_user(role):
            return True
        return self.authorizer.is_tenant_admin(role, await self.tenant_admin_roles(tenant))

    async def allows_topic(
        self,
        role: str | None,
        topic: TopicName,
        operation: TopicOperation,
        subscription: str | None = None,
    ) -> bool:
        if self.authorizer.is_super_user(role):
            return True
        admin_roles = await self.tenant_admin_roles(topic.tenant)
        policies = await self._policies.namespace(topic.namespace_name, fresh=True)
        auth = AuthPolicies.from_json(policies.auth_policies if policies else None)
        names = [topic.full_name]
        if topic.is_partition:
            names.append(topic.partitioned_topic.full_name)
        return self.authorizer.allows_topic(role, operation, names, admin_roles, auth, subscription)

    async def allows_namespace_action(
        self, role: str | None, namespace: NamespaceName, action: AuthAction
    ) -> bool:
        """Tenant admin, or ``action`` (functions, sources, sinks, packages) granted to
        ``role`` on ``namespace``; read fresh, so a revocation counts at the next request."""
        if self.authorizer.is_super_user(role):
            return True
        admin_roles = await self.tenant_admin_roles(namespace.tenant)
        policies = await self._policies.namespace(namespace, fresh=True)
        auth = AuthPolicies.from_json(policies.auth_policies if policies else None)
        return self.authorizer.allows_namespace_action(role, action, admin_roles, auth)

    async def check_namespace(self, role: str | None, namespace: NamespaceName) -> None:
        """Listing a namespace's topics: tenant admin, or produce or consume granted on the
        namespace itself. Raises :class:`AuthorizationError` (TopicNotFound for a namespace
        that does not exist)."""
        if not self.enabled or self.authorizer.is_super_user(role):
            return
        admin_roles = await self.tenant_admin_roles(namespace.tenant)
        policies = await self._policies.namespace(namespace, fresh=True)
        if policies is None:
            raise TopicNotFound(f"Namespace {namespace} does not exist")
        auth = AuthPolicies.from_json(policies.auth_policies)
        if not self.authorizer.allows_topic(role, TopicOperation.LOOKUP, [], admin_roles, auth):
            raise AuthorizationError(
                f"Client with role {role!r} is not authorized to list the topics of {namespace}"
            )

    async def check_topic(
        self,
        role: str | None,
        topic: TopicName,
        operation: TopicOperation,
        subscription: str | None = None,
    ) -> None:
        """Raises :class:`AuthorizationError` unless ``role`` may do ``operation``
        (:class:`TopicNotFound` instead when the topic's namespace does not exist)."""
        if not self.enabled:
            return
        if not await self.allows_topic(role, topic, operation, subscription):
            # A namespace that does not exist is told as such (Pulsar's clients expect
            # TopicNotFound there, whoever asks); it grants nothing either way.
            if not await self._policies.namespace_exists(topic.namespace_name):
                raise TopicNotFound(f"Namespace {topic.namespace_name} does not exist")
            raise AuthorizationError(
                f"Client with role {role!r} is not authorized to "
                f"{_OPERATION_WORDS[operation]} {topic.full_name}"
            )
