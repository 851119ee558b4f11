"""Routes an app serves before they are built: a stand-in at the front of the app's routes.

``magnetar standalone`` serves HTTP (its readiness) before its Functions Worker has joined;
building the worker's routes (FastAPI analyses every endpoint's parameters) was about 5 % of
the CPU to the ready line. :class:`DeferredRoutes` takes their place at start: it claims the
paths under its prefixes, and a request there waits (at most ``wait_ms``) until
:meth:`DeferredRoutes.install` has put the real routes where it stood, then is served by
them. Afterwards the real routes are ordinary routes of the app (and of its OpenAPI
document); the stand-in only serves requests that arrived before.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from magnetar.admin.deferred_app import send_reason


class DeferredRoutes(BaseRoute):
    """Stands in for routes under ``path_prefixes`` until :meth:`install` is called."""

    def __init__(self, path_prefixes: tuple[str, ...], wait_ms: int) -> None:
        self.path_prefixes = path_prefixes
        self.wait_ms = wait_ms
        self._installed = asyncio.Event()
        self._routes: list[BaseRoute] = []

    @property
    def installed(self) -> bool:
        return self._installed.is_set()

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and str(scope["path"]).startswith(self.path_prefixes):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._installed.wait(), self.wait_ms / 1000)
        if not self._installed.is_set():
            await send_reason(send, 503, "the service behind this path is starting; try again")
            return
        partial: tuple[BaseRoute, Scope] | None = None
        for route in self._routes:
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL and partial is None:
                partial = (route, child_scope)
        if partial is not None:  # the path exists with another method: its 405
            scope.update(partial[1])
            await partial[0].handle(scope, receive, send)
            return
        await send_reason(send, 404, "Not Found")

    def install(self, app: FastAPI, router: APIRouter) -> None:
        """Build ``router``'s routes on ``app`` (with the app's dependencies) and put them
        where this stand-in is; requests waiting on it are served by them."""
        routes = app.router.routes
        before = len(routes)
        app.include_router(router)
        built = routes[before:]
        del routes[before:]
        at = routes.index(self)
        routes[at : at + 1] = built
        app.openapi_schema = None  # generated again, with them
        self._routes = built
        self._installed.set()
