"""Authentication and authorization of admin and lookup REST requests.

The app-wide dependency made by :func:`request_guard` runs after routing, before the route:

1. authentication (``Authorization`` header, see
   :meth:`~magnetar.auth.AuthenticationService.authenticate_http`): refused credentials
   with no anonymous role configured → **401** ``{"reason": "Authentication required: ..."}``;
2. authorization, by what the matched route touches (:func:`requirement_for`):
   open (``/metrics``, ``/ready``, ``/openapi.json``), any authenticated role (routes that
   filter their answer by role: the console's namespace list), a topic lookup (the lookup
   REST, the read-only topic metadata a client needs: partitions, stats, schema, last
   message id, and the console's views of a topic),
   tenant admin (every other path naming a tenant), or super user (clusters, brokers,
   creating, updating and deleting tenants, anything else). A refused role → **403**
   ``{"reason": "... is not authorized to ..."}``.

The role is left in ``request.state.auth_role`` for routes that need it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request

from magnetar.admin.errors import Forbidden, Unauthenticated
from magnetar.auth import TopicOperation
from magnetar.auth.authorization import AuthAction
from magnetar.auth.http_request import authenticate_request, route_template
from magnetar.broker.service import BrokerService
from magnetar.common.errors import AuthenticationError, MagnetarError
from magnetar.common.names import NamespaceName, TopicDomain, TopicName

NAMESPACE_ACTION_PATHS = "/admin/v3/{kinds}/{tenant}/{namespace}"
"""Routes under this template (the Functions Worker's) need the action named by ``kinds``."""
_KIND_ACTIONS = {
    "functions": AuthAction.FUNCTIONS,
    "sources": AuthAction.SOURCES,
    "sinks": AuthAction.SINKS,
}

OPEN_PATHS = frozenset({"/metrics", "/ready", "/openapi.json"})
"""Answered without credentials (Pulsar does not authenticate metrics by default)."""

ROLE_FILTERED_PATHS = frozenset({"/admin/v2/console/namespaces"})
"""Answered to any authenticated role; the route shows only what that role may see."""
TOPIC_READ_PREFIXES = ("/lookup/", "/admin/v2/console/")
"""Routes under these prefixes naming a topic need a topic lookup permission."""

TOPIC_READ_ENDPOINTS = frozenset(
    {
        "partitions",
        "stats",
        "partitioned-stats",
        "internalStats",
        "lastMessageId",
        "schema",
        "schemas",
        "{version}",
    }
)
"""Last segments of read-only topic routes a role with produce or consume may use (GET)."""


class Need(enum.Enum):
    OPEN = "open"
    AUTHENTICATED = "authenticated"
    TOPIC_LOOKUP = "topic lookup"
    NAMESPACE_ACTION = "namespace permission"
    TENANT_ADMIN = "tenant admin"
    SUPER_USER = "super user"


@dataclass(frozen=True, slots=True)
class Requirement:
    need: Need
    tenant: str | None = None
    topic: TopicName | None = None
    namespace: NamespaceName | None = None
    action: AuthAction | None = None


def requirement_for(route_path: str, method: str, params: Mapping[str, Any]) -> Requirement:
    """What a request to the route ``route_path`` (its template, e.g.
    ``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats``) with ``params`` requires."""
    if route_path in OPEN_PATHS:
        return Requirement(Need.OPEN)
    if route_path in ROLE_FILTERED_PATHS:
        return Requirement(Need.AUTHENTICATED)
    tenant = params.get("tenant")
    if not isinstance(tenant, str):
        return Requirement(Need.SUPER_USER)
    if route_path.startswith(NAMESPACE_ACTION_PATHS):
        action = _KIND_ACTIONS.get(str(params.get("kinds")))
        try:
            namespace = NamespaceName.of(tenant, str(params.get("namespace")))
        except MagnetarError:
            namespace = None
        if action is not None and namespace is not None:
            return Requirement(Need.NAMESPACE_ACTION, tenant, namespace=namespace, action=action)
        return Requirement(Need.TENANT_ADMIN, tenant)
    topic = _topic(route_path, params)
    last = route_path.rstrip("/").rsplit("/", 1)[-1]
    if topic is not None and (
        route_path.startswith(TOPIC_READ_PREFIXES)
        or (method == "GET" and last in TOPIC_READ_ENDPOINTS)
    ):
        return Requirement(Need.TOPIC_LOOKUP, tenant, topic)
    if route_path.startswith("/admin/v2/tenants") and method != "GET":
        return Requirement(Need.SUPER_USER)
    return Requirement(Need.TENANT_ADMIN, tenant)


def _topic(route_path: str, params: Mapping[str, Any]) -> TopicName | None:
    local = params.get("topic")
    if not isinstance(local, str):
        return None
    domain_value = params.get("domain", "persistent")
    if route_path.startswith("/admin/v2/schemas/"):
        domain_value = "persistent"
    try:
        domain = TopicDomain(domain_value)
        return TopicName.of(
            domain, str(params.get("tenant")), str(params.get("namespace")), unquote(local)
        )
    except (ValueError, MagnetarError):
        return None


def request_guard(service: BrokerService) -> Callable[[Request], Coroutine[Any, Any, None]]:
    """The FastAPI dependency checking every request against ``service``'s settings."""

    async def guard(request: Request) -> None:
        route_path = route_template(request)
        if route_path in OPEN_PATHS:
            return
        try:
            identity = authenticate_request(
                service.authentication, request, service.clock.now_ms() / 1000
            )
        except AuthenticationError as exc:
            raise Unauthenticated(f"Authentication required: {exc}") from None
        request.state.auth_role = identity.role
        access = service.access
        if not access.enabled:
            return
        role = identity.role
        need = requirement_for(route_path, request.method, request.path_params)
        allowed: bool
        if need.need in (Need.OPEN, Need.AUTHENTICATED):
            allowed = True
        elif need.need is Need.TOPIC_LOOKUP:
            assert need.topic is not None
            allowed = await access.allows_topic(role, need.topic, TopicOperation.LOOKUP)
        elif need.need is Need.NAMESPACE_ACTION:
            assert need.namespace is not None and need.action is not None
            allowed = await access.allows_namespace_action(role, need.namespace, need.action)
        elif need.need is Need.TENANT_ADMIN:
            assert need.tenant is not None
            allowed = await access.is_tenant_admin(role, need.tenant)
        else:
            allowed = access.authorizer.is_super_user(role)
        if not allowed:
            if need.action is not None:
                needs = f"tenant admin of {need.tenant} or {need.action.value} on {need.namespace}"
            else:
                what = need.topic.full_name if need.topic else need.tenant or "this broker"
                needs = f"{need.need.value} of {what}"
            raise Forbidden(
                f"Client with role {role!r} is not authorized to {request.method} "
                f"{request.url.path} (needs {needs})"
            )

    return guard
