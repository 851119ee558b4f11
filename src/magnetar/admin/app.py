"""The admin ASGI application: every router, JSON ``{"reason": ...}`` errors, OpenAPI at
``/openapi.json`` (for any OpenAPI viewer; no docs page, whose assets would come from a CDN).

Route order matters where paths overlap: brokers, clusters, tenants and namespaces come
before the generic topic paths ``/admin/v2/{domain}/…`` (whose ``domain`` is checked).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

from fastapi import APIRouter, Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin import (
    bookies,
    brokers,
    bundles,
    clusters,
    dynamic_config,
    isolation_policies,
    message_inspection,
    metrics,
    namespaces,
    offload_policies,
    permissions,
    rate_limits,
    replication_policies,
    schemas,
    storage_quota,
    subscriptions,
    tenants,
    topic_offload,
    topic_policies,
    topics,
)
from magnetar.admin.context import AdminContext
from magnetar.admin.errors import http_error
from magnetar.admin.owner_redirect import OwnerRedirect
from magnetar.admin.path_names import check_path_names
from magnetar.admin.responses import error_response
from magnetar.admin.security import request_guard
from magnetar.common.errors import MagnetarError
from magnetar.console import router as console_router

log = logging.getLogger(__name__)

# FastAPI gives each path and query parameter's pydantic field an alias; pydantic 2.12 and
# later warn that the alias has no effect there, which is wrong (pydantic issue 12356), and
# the warning would reach the broker's stderr as it builds the routes.
warnings.filterwarnings("ignore", message="The 'alias' attribute with value", category=UserWarning)

API_VERSION = "2"


def create_app(ctx: AdminContext, extra_routers: Sequence[APIRouter] = ()) -> FastAPI:
    """The app serving ``ctx``'s broker. ``extra_routers`` (the host's own parts, e.g. its
    Functions Worker) come first, before the generic topic paths; they answer their own
    errors."""
    app = FastAPI(
        title="Magnetar admin REST API",
        version=API_VERSION,
        description="Pulsar-compatible admin REST API (v2), lookup REST and metrics.",
        openapi_url="/openapi.json",
        # No /docs or /redoc page: FastAPI's load their scripts from a CDN, blank offline.
        # /openapi.json is the API's description for any OpenAPI viewer.
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(check_path_names), Depends(request_guard(ctx.service))],
    )

    @app.exception_handler(MagnetarError)
    async def magnetar_error(request: Request, exc: Exception) -> Response:
        status, reason = http_error(exc)
        if status >= 500:
            # the detail (which may name internal metadata paths) goes to the log only
            log.warning("%s %s failed: %r", request.method, request.url.path, exc)
        return error_response(status, reason)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in exc.errors()
        )
        return error_response(400, f"Invalid request: {details}")

    @app.exception_handler(HTTPException)
    async def http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(500, f"Internal error: {exc.__class__.__name__}")

    app.add_middleware(OwnerRedirect, ctx=ctx)

    registry = metrics.registry_for(ctx)

    @app.get("/metrics", tags=["metrics"], summary="Prometheus metrics (text format)")
    async def scrape() -> Response:
        return Response(metrics.render(registry), media_type=metrics.CONTENT_TYPE)

    app.include_router(console_router.router(ctx))  # before the generic topic paths
    for extra in extra_routers:
        app.include_router(extra)
    for module in (
        bookies,
        dynamic_config,  # before brokers: /brokers/{cluster} would match
        brokers,
        isolation_policies,  # before clusters: /clusters/{cluster}/... paths
        clusters,
        tenants,
        bundles,
        permissions,  # before namespaces and topics: their generic paths would match
        rate_limits,
        storage_quota,
        replication_policies,  # before namespaces and topics: their generic paths would match
        offload_policies,  # likewise
        namespaces,
        schemas,
        subscriptions,
        message_inspection,  # before topics: T/ledger/…, T/examinemessage
        topic_policies,
        topic_offload,  # before topics: T/offload, T/internal-info
        topics,
    ):
        app.include_router(module.router(ctx))
    return app
