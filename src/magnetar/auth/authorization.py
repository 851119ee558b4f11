"""What may a role do? Pulsar's default authorization rules, as pure functions over the
stored policies (no I/O: the broker and admin layers read the tenant and namespace and
pass them in).

Permissions live where Pulsar keeps them, in the namespace policies' ``auth_policies``::

    {"namespace_auth":          {role: [action, ...]},
     "destination_auth":        {"persistent://t/ns/topic": {role: [action, ...]}},
     "subscription_auth_roles": {subscription: [role, ...]}}

Rules (Pulsar's ``PulsarAuthorizationProvider``), when authorization is enabled:

* a super-user role may do everything; a tenant's admin role everything in its tenant;
* PRODUCE needs ``produce`` granted to the role on the namespace or on the topic (a
  partition also inherits its partitioned topic's grants);
* CONSUME needs ``consume`` likewise; when the subscription has roles listed in
  ``subscription_auth_roles``, the role must be one of them;
* LOOKUP needs either;
* everything else on a tenant (admin REST) needs tenant admin; anything outside one tenant
  (clusters, brokers, creating tenants) needs a super-user role.

Nothing is allowed that was not granted.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from magnetar.common.errors import MagnetarError
from magnetar.common.frozen_struct import frozen_struct


class AuthAction(enum.StrEnum):
    """Pulsar's ``AuthAction``: what a grant allows."""

    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    SOURCES = "sources"
    SINKS = "sinks"
    PACKAGES = "packages"


class TopicOperation(enum.Enum):
    LOOKUP = "lookup"
    PRODUCE = "produce"
    CONSUME = "consume"


class InvalidPermission(MagnetarError):
    """A grant naming an unknown action, or a malformed role."""


def parse_actions(values: Iterable[Any]) -> frozenset[AuthAction]:
    """Actions from JSON strings. Raises :class:`InvalidPermission` for unknown ones."""
    actions = set()
    for value in values:
        try:
            actions.add(AuthAction(str(value).lower()))
        except ValueError:
            known = ", ".join(a.value for a in AuthAction)
            raise InvalidPermission(f"unknown action {value!r} (known: {known})") from None
    return frozenset(actions)


def _lenient_actions(values: Any) -> frozenset[AuthAction]:
    """Stored actions, ignoring what this version does not know (never widens access)."""
    if not isinstance(values, list | tuple | set | frozenset):
        return frozenset()
    known = {a.value for a in AuthAction}
    return frozenset(AuthAction(str(v).lower()) for v in values if str(v).lower() in known)


def _role_map(value: Any) -> dict[str, frozenset[AuthAction]]:
    if not isinstance(value, Mapping):
        return {}
    return {str(role): _lenient_actions(actions) for role, actions in value.items()}


@frozen_struct(kw_only=False)
class AuthPolicies:
    """A namespace's ``auth_policies``, typed."""

    namespace_auth: Mapping[str, frozenset[AuthAction]]
    destination_auth: Mapping[str, Mapping[str, frozenset[AuthAction]]]
    subscription_auth_roles: Mapping[str, frozenset[str]]

    @classmethod
    def from_json(cls, value: Any) -> AuthPolicies:
        """From the stored JSON; malformed parts grant nothing."""
        body = value if isinstance(value, Mapping) else {}
        destinations = body.get("destination_auth")
        subscriptions = body.get("subscription_auth_roles")
        return cls(
            _role_map(body.get("namespace_auth")),
            {
                str(topic): _role_map(roles)
                for topic, roles in (
                    destinations.items() if isinstance(destinations, Mapping) else ()
                )
            },
            {
                str(sub): frozenset(str(r) for r in roles)
                for sub, roles in (
                    subscriptions.items() if isinstance(subscriptions, Mapping) else ()
                )
                if isinstance(roles, list | tuple)
            },
        )

    def granted(self, role: str, topic_names: Iterable[str]) -> frozenset[AuthAction]:
        """Actions ``role`` holds on the namespace or on any of ``topic_names``."""
        actions = set(self.namespace_auth.get(role, frozenset()))
        for topic in topic_names:
            actions |= self.destination_auth.get(topic, {}).get(role, frozenset())
        return frozenset(actions)


EMPTY_AUTH_POLICIES = AuthPolicies({}, {}, {})


@frozen_struct(kw_only=False)
class Authorizer:
    """The decisions, given the facts. ``enabled=False`` allows everything."""

    enabled: bool
    super_user_roles: frozenset[str]

    def is_super_user(self, role: str | None) -> bool:
        return not self.enabled or (role is not None and role in self.super_user_roles)

    def is_tenant_admin(self, role: str | None, admin_roles: Iterable[str]) -> bool:
        """Super user, or one of the tenant's ``adminRoles``."""
        return self.is_super_user(role) or (role is not None and role in set(admin_roles))

    def allows_topic(
        self,
        role: str | None,
        operation: TopicOperation,
        topic_names: Iterable[str],
        admin_roles: Iterable[str],
        policies: AuthPolicies,
        subscription: str | None = None,
    ) -> bool:
        """Whether ``role`` may do ``operation`` on a topic; ``topic_names`` are the topic's
        full name and, for a partition, its partitioned topic's."""
        if self.is_tenant_admin(role, admin_roles):
            return True
        if role is None:
            return False
        granted = policies.granted(role, topic_names)
        if operation is TopicOperation.PRODUCE:
            return AuthAction.PRODUCE in granted
        if operation is TopicOperation.CONSUME:
            if subscription:
                allowed = policies.subscription_auth_roles.get(subscription)
                if allowed and role not in allowed:
                    return False
            return AuthAction.CONSUME in granted
        return AuthAction.PRODUCE in granted or AuthAction.CONSUME in granted

    def allows_namespace_action(
        self,
        role: str | None,
        action: AuthAction,
        admin_roles: Iterable[str],
        policies: AuthPolicies,
    ) -> bool:
        """Whether ``role`` may manage the namespace's functions, sources, sinks or packages
        (``action``): tenant admin, or ``action`` granted on the namespace itself (Pulsar's
        ``allowFunctionOps``/``allowSourceOps``/``allowSinkOps``; topic grants do not count)."""
        if self.is_tenant_admin(role, admin_roles):
            return True
        return role is not None and action in policies.namespace_auth.get(role, frozenset())


def original_principal_refusal(
    role: str | None, original_principal: str | None, proxy_roles: frozenset[str]
) -> str | None:
    """Why a connection authenticated as ``role`` may not act for ``original_principal``
    (None: it may), as Pulsar's ``isValidOriginalPrincipal``: a proxy role must name an
    original principal that is not itself a proxy role; any other role must name none."""
    original = (original_principal or "").strip()
    if role is not None and role in proxy_roles:
        if not original:
            return "originalPrincipal must be provided when connecting with a proxy role"
        if original in proxy_roles:
            return "originalPrincipal cannot be a proxy role"
        return None
    if original:
        return "cannot specify originalPrincipal when connecting without a valid proxy role"
    return None


# --- editing the stored JSON (grant and revoke) --------------------------------------------


def _copy(auth_policies: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "namespace_auth": dict(auth_policies.get("namespace_auth") or {}),
        "destination_auth": {
            k: dict(v) for k, v in (auth_policies.get("destination_auth") or {}).items()
        },
        "subscription_auth_roles": dict(auth_policies.get("subscription_auth_roles") or {}),
    }
    for key, value in auth_policies.items():
        body.setdefault(key, value)
    return body


def _sorted(actions: Iterable[AuthAction]) -> list[str]:
    return sorted(a.value for a in actions)


def grant_namespace(
    auth_policies: Mapping[str, Any], role: str, actions: frozenset[AuthAction]
) -> dict[str, Any]:
    """A copy of ``auth_policies`` where ``role`` holds exactly ``actions`` on the namespace
    (Pulsar's grant replaces the role's set)."""
    body = _copy(auth_policies)
    body["namespace_auth"][role] = _sorted(actions)
    return body


def revoke_namespace(auth_policies: Mapping[str, Any], role: str) -> dict[str, Any]:
    body = _copy(auth_policies)
    body["namespace_auth"].pop(role, None)
    return body


def grant_topic(
    auth_policies: Mapping[str, Any], topic: str, role: str, actions: frozenset[AuthAction]
) -> dict[str, Any]:
    body = _copy(auth_policies)
    body["destination_auth"].setdefault(topic, {})[role] = _sorted(actions)
    return body


def revoke_topic(auth_policies: Mapping[str, Any], topic: str, role: str) -> dict[str, Any]:
    body = _copy(auth_policies)
    roles = body["destination_auth"].get(topic)
    if roles is not None:
        roles.pop(role, None)
        if not roles:
            del body["destination_auth"][topic]
    return body


def topic_permissions(
    auth_policies: Mapping[str, Any], topic_names: Iterable[str]
) -> dict[str, list[str]]:
    """``{role: [actions]}`` on a topic: the namespace's grants merged with the topic's
    (what Pulsar's ``GET .../permissions`` of a topic answers)."""
    policies = AuthPolicies.from_json(auth_policies)
    roles = set(policies.namespace_auth)
    names = list(topic_names)
    for name in names:
        roles |= set(policies.destination_auth.get(name, {}))
    return {role: _sorted(policies.granted(role, names)) for role in sorted(roles)}


def validate_role(role: str) -> str:
    """Raises :class:`InvalidPermission` for an empty or over-long role."""
    if not role or len(role) > 1024 or any(c in role for c in "\r\n"):
        raise InvalidPermission("a role must be 1 to 1024 characters on one line")
    return role
