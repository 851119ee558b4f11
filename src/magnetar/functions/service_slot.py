"""Where the worker's REST routes find the worker: a host builds its HTTP app (and these
routes) before or after its worker joins, in either order; a request waits for it.

Imports neither the web framework nor the worker (its client library), so a host holds the
slot from its start and builds the routes, the worker, or both, only when first needed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from magnetar.functions.errors import LeaderUnavailable

if TYPE_CHECKING:
    from magnetar.functions.worker_service import WorkerService

SERVICE_WAIT_MS = 10_000
"""How long a request waits for the worker to start (its host serves HTTP first)."""


class ServiceSlot:
    """The worker the routes serve, set once it has started (a host builds its HTTP app
    before the worker, whose advertised port is the app's). Until then a request waits for
    it, at most :data:`SERVICE_WAIT_MS`, then gets 503."""

    def __init__(self, service: WorkerService | None = None) -> None:
        self._service = service
        self._set = asyncio.Event()
        self.failure: str | None = None
        """Why the worker could not start (then requests get 503 with it at once)."""
        if service is not None:
            self._set.set()

    @property
    def service(self) -> WorkerService | None:
        return self._service

    @service.setter
    def service(self, service: WorkerService | None) -> None:
        self._service = service
        if service is None:
            self._set.clear()
        else:
            self._set.set()

    async def get(self) -> WorkerService:
        """Raises :class:`LeaderUnavailable` when no worker came in time."""
        if self._service is None and self.failure is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._set.wait(), SERVICE_WAIT_MS / 1000)
        if self._service is None:
            raise LeaderUnavailable(
                f"the functions worker did not start: {self.failure}"
                if self.failure
                else "the functions worker is starting; try again"
            )
        return self._service
