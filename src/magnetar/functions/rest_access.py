"""Authentication and authorization of a Functions Worker's own REST API (``magnetar
functions-worker``; the standalone's worker is guarded by the broker's admin app instead).

The worker checks credentials itself, with the same providers and keys as the brokers
(:mod:`magnetar.auth.server_options`). What a role may do it decides as Pulsar's worker
does, from the facts the brokers hold, read through the admin REST API with the worker's own
credentials (``--broker-client-auth-*``, a super user's) at every request, so a revocation
counts at the next one:

* ``/ready`` and ``/openapi.json``: open;
* ``/admin/v3/{kinds}/{tenant}/{namespace}/...`` (functions, sources, sinks): a super user,
  an admin of the tenant (its ``adminRoles``), or a role granted ``kinds``' action
  (``functions``, ``sources``, ``sinks``) on the namespace;
* everything else (``/admin/v2/worker/...``): a super user.

Refusals: **401** ``{"reason": "Authentication required: ..."}`` for refused credentials,
**403** for a role without the right, **503** when the brokers cannot be asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from starlette.requests import Request

from magnetar.admin_client import AdminClient, AdminError, AdminNotFound
from magnetar.auth.authentication import AuthenticationService
from magnetar.auth.authorization import AuthAction, Authorizer, AuthPolicies
from magnetar.auth.client_credentials import ClientCredentials
from magnetar.auth.config import AuthConfig
from magnetar.auth.http_request import authenticate_request, route_template
from magnetar.common.clock import Clock
from magnetar.common.errors import AuthenticationError

OPEN_PATHS = frozenset({"/ready", "/openapi.json"})
FACTS_TIMEOUT_MS = 10_000
"""Bound of one admin REST read of the brokers (tenant info, namespace permissions)."""
FACTS_BYTES_MAX = 1024 * 1024

T = TypeVar("T")

_KIND_ACTIONS = {
    "functions": AuthAction.FUNCTIONS,
    "sources": AuthAction.SOURCES,
    "sinks": AuthAction.SINKS,
}


class RestRefused(Exception):
    """A request the guard refuses: ``status`` and Pulsar's ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Facts:
    admin_roles: list[str]
    policies: AuthPolicies


class WorkerRestAccess:
    """The guard of one worker's app: :meth:`check` runs before every route."""

    def __init__(
        self,
        config: AuthConfig,
        *,
        admin_url: str,
        credentials: ClientCredentials,
        clock: Clock,
    ) -> None:
        self.authentication = AuthenticationService(config)
        self.authorizer = Authorizer(config.authorization_enabled, config.super_user_roles)
        self._admin = AdminClient(
            admin_url,
            timeout_s=FACTS_TIMEOUT_MS / 1000,
            headers=credentials.http_headers(),
            answer_bytes_max=FACTS_BYTES_MAX,
        )
        self._clock = clock

    async def check(self, request: Request) -> None:
        """Raises :class:`RestRefused` unless the request may go on."""
        if route_template(request) in OPEN_PATHS:
            return
        try:
            identity = authenticate_request(
                self.authentication, request, self._clock.now_ms() / 1000
            )
        except AuthenticationError as exc:
            raise RestRefused(401, f"Authentication required: {exc}") from None
        role = identity.role
        if self.authorizer.is_super_user(role):
            return
        params = request.path_params
        action = _KIND_ACTIONS.get(str(params.get("kinds")))
        tenant, namespace = params.get("tenant"), params.get("namespace")
        if action is None or not isinstance(tenant, str) or not isinstance(namespace, str):
            raise RestRefused(
                403,
                f"Client with role {role!r} is not authorized to {request.method} "
                f"{request.url.path} (needs super user)",
            )
        facts = await self._facts(tenant, namespace)
        if not self.authorizer.allows_namespace_action(
            role, action, facts.admin_roles, facts.policies
        ):
            raise RestRefused(
                403,
                f"Client with role {role!r} is not authorized to {request.method} "
                f"{request.url.path} (needs tenant admin of {tenant} or {action.value} on "
                f"{tenant}/{namespace})",
            )

    async def _facts(self, tenant: str, namespace: str) -> _Facts:
        tenant_info, grants = await asyncio.gather(
            self._ask(f"the tenant {tenant}", self._admin.tenant_info, tenant),
            self._ask(
                f"the permissions of {tenant}/{namespace}",
                self._admin.namespace_permissions,
                tenant,
                namespace,
            ),
        )
        roles = tenant_info.get("adminRoles") if tenant_info is not None else None
        admin_roles = [str(r) for r in roles] if isinstance(roles, list) else []
        policies = AuthPolicies.from_json({"namespace_auth": grants or {}})
        return _Facts(admin_roles, policies)

    async def _ask(self, what: str, call: Callable[..., T], *args: str) -> T | None:
        """``call(*args)`` on the brokers' admin API; None when it does not exist.
        Raises :class:`RestRefused` (503) when the brokers do not answer it."""
        try:
            return await asyncio.to_thread(call, *args)
        except AdminNotFound:
            return None
        except AdminError as exc:
            raise RestRefused(503, f"cannot check permissions: reading {what}: {exc}") from None
