"""``build_route_matching``: what FastAPI (0.165) builds lazily, on the event loop, when the
first request is matched against an included router is built ahead, so that request does
not hold the loop (0.1-0.4 s measured in the standalone). The check reads FastAPI's own
cache markers: when an upgrade renames them, this fails rather than the pre-build silently
doing nothing."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import _IncludedRouter

from magnetar.admin.server import build_route_matching
from magnetar.functions.rest import ServiceSlot, create_worker_app


def _branches(app: FastAPI) -> list[Any]:
    """Every included router reachable from the app's routes, through what was built."""
    found: list[Any] = []
    pending = [r for r in app.router.routes if isinstance(r, _IncludedRouter)]
    while pending:
        branch = pending.pop()
        found.append(branch)
        pending.extend(c for c in branch._effective_candidates if isinstance(c, _IncludedRouter))
    return found


def _nested_app() -> FastAPI:
    inner = APIRouter()

    @inner.get("/inner/{name}")
    async def inner_get(name: str) -> dict[str, str]:
        return {"name": name}

    outer = APIRouter()
    outer.include_router(inner, prefix="/v1")
    app = FastAPI()
    app.include_router(outer, prefix="/api")
    return app


def test_every_included_router_is_built_ahead_of_the_first_request() -> None:
    nested = _nested_app()
    for app in (nested, create_worker_app(ServiceSlot())):
        before = _branches(app)
        assert before and all(b._effective_candidates_version is None for b in before)
        build_route_matching(app)
        after = _branches(app)
        assert len(after) >= len(before)
        assert all(b._effective_candidates_version is not None for b in after)
        assert all(b._effective_low_priority_routes_version is not None for b in after)
    # nested: the inner router's branch was reached and built as well
    assert len(_branches(nested)) == 2
