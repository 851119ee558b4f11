"""Admin REST API v2, lookup REST, health/readiness and Prometheus ``/metrics`` of a broker.

The package sits above :mod:`magnetar.broker`: a process that runs a broker builds the app
with :func:`magnetar.admin.app.create_app` over an :class:`~magnetar.admin.context.AdminContext`
and serves it with :class:`~magnetar.admin.server.AdminServer` on the broker's event loop.
FastAPI, uvicorn and prometheus-client are imported only when the app is built, so importing
this package stays cheap. See ``docs/admin.md``.
"""

from magnetar.admin.context import AdminContext
from magnetar.admin.server import AdminServer

__all__ = ["AdminContext", "AdminServer"]
