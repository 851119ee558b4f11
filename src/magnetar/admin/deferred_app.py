"""An HTTP app served before it is built: a plain ASGI stand-in that holds requests.

Building the admin app (importing FastAPI, pydantic and the admin routes, then creating
them) was about half of ``magnetar standalone``'s start-up CPU. The HTTP server therefore
starts with a :class:`DeferredApp`: the port accepts connections at once, and a request
that arrives before :meth:`DeferredApp.install` waits (at most ``wait_ms``) for the real app
and is then served by it; one that waits longer is answered 503 with a reason. After the
install every request goes straight to the real app. :meth:`DeferredApp.wait_needed`
serves a host that builds the app only once it is needed (an idle standalone without
the Functions Worker never imports the web framework). Importing this module imports no web
framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class DeferredApp:
    """An ASGI app that serves the app given to :meth:`install`, and holds the requests
    that come before it (each for at most ``wait_ms``, then 503)."""

    def __init__(self, wait_ms: int) -> None:
        self.wait_ms = wait_ms
        self._app: ASGIApp | None = None
        self._installed = asyncio.Event()
        self._needed = asyncio.Event()

    @property
    def installed(self) -> bool:
        return self._app is not None

    def install(self, app: ASGIApp) -> None:
        """Serve ``app`` from now on; requests waiting meanwhile go to it."""
        self._app = app
        self._installed.set()

    async def wait_installed(self) -> None:
        await self._installed.wait()

    def need(self) -> None:
        """Mark the app needed (as a request does), for the host's own use of it."""
        self._needed.set()

    async def wait_needed(self) -> None:
        """Until the first request has come or :meth:`need` was called (at once if so)."""
        await self._needed.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            self._needed.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._installed.wait(), self.wait_ms / 1000)
            app = self._app
            if app is None:
                if scope["type"] == "http":
                    await send_reason(send, 503, "the HTTP service is starting; try again")
                return
        await app(scope, receive, send)


async def send_reason(send: Send, status: int, reason: str) -> None:
    """Answer ``status`` with Pulsar's error body, ``{"reason": ...}``."""
    body = json.dumps({"reason": reason}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
