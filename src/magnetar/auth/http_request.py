"""Authentication of one HTTP request as the admin API and the Functions Worker's REST API
see it (a Starlette request under uvicorn): the route's template and the caller's role."""

from __future__ import annotations

from starlette.requests import Request

from magnetar.auth.authentication import AuthenticatedRole, AuthenticationService


def route_template(request: Request) -> str:
    """The path template of the route ``request`` matched (e.g.
    ``/admin/v2/persistent/{tenant}/{namespace}/{topic}``), or its path when none did."""
    return str(getattr(request.scope.get("route"), "path", request.url.path))


def authenticate_request(
    authentication: AuthenticationService, request: Request, now_s: float
) -> AuthenticatedRole:
    """The caller's role from the request's headers and, over HTTPS, the client certificate
    uvicorn verified (the ASGI ``tls`` extension). Raises AuthenticationError."""
    tls = (request.scope.get("extensions") or {}).get("tls") or {}
    return authentication.authenticate_http(request.headers, now_s, tls.get("peer_certificate"))
