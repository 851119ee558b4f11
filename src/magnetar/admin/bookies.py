"""The bookies of the cluster, with Pulsar's paths and shapes:

* ``GET /admin/v2/bookies/all`` — ``{"bookies": [{"bookieId": "host:port"}, ...]}``, every
  registered bookie (writable and read-only), as Pulsar's ``BookiesClusterInfo``;
* ``GET /admin/v2/bookies/racks-info`` — the rack placement (``BookiesRackConfiguration``:
  group → bookie → ``{"rack", "hostname"}``) stored at ``/bookies``, as Pulsar keeps it;
  ``{}`` when none is configured;
* ``GET /admin/v2/bookies/racks-info/{bookie}`` — one bookie's entry; 404 when it has none.

Placement is rack-unaware so far: the rack information is shown, not used.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import ResourceNotFound, RestError
from magnetar.admin.responses import json_response
from magnetar.broker.controller.election import registered_bookies
from magnetar.metadata.store import NotFound

RACKS_PATH = "/bookies"
"""Where Pulsar keeps the bookies' rack placement (``BookiesRackConfiguration``)."""


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["bookies"])

    async def racks() -> dict[str, Any]:
        try:
            value = (await ctx.service.store.get(RACKS_PATH)).value
        except NotFound:
            return {}
        try:
            body = json.loads(value) if value else {}
        except ValueError:
            body = None
        if not isinstance(body, dict) or not all(isinstance(v, dict) for v in body.values()):
            raise RestError(f"the rack placement at {RACKS_PATH} is not a JSON object of groups")
        return body

    @r.get("/admin/v2/bookies/all", summary="Every registered bookie")
    async def all_bookies() -> Response:
        bookies = sorted(await registered_bookies(ctx.service.store))
        return json_response({"bookies": [{"bookieId": b} for b in bookies]})

    @r.get("/admin/v2/bookies/racks-info", summary="The rack placement of every bookie")
    async def racks_info() -> Response:
        return json_response(await racks())

    @r.get("/admin/v2/bookies/racks-info/{bookie}", summary="The rack placement of one bookie")
    async def bookie_rack(bookie: str) -> Response:
        for group in (await racks()).values():
            if bookie in group:
                return json_response(group[bookie])
        raise ResourceNotFound(f"Bookie rack placement configuration not found: {bookie}")

    return r
