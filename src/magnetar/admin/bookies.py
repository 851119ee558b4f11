"""The bookies of the cluster, with Pulsar's paths and shapes:

* ``GET /admin/v2/bookies/all`` — ``{"bookies": [{"bookieId": "host:port"}, ...]}``, every
  registered bookie (writable and read-only), as Pulsar's ``BookiesClusterInfo``;
* ``GET /admin/v2/bookies/racks-info`` — the rack placement (``BookiesRackConfiguration``:
  group → bookie → ``{"rack", "hostname"}``) stored at ``/bookies``, as Pulsar keeps it;
  ``{}`` when none is configured;
* ``GET /admin/v2/bookies/racks-info/{bookie}`` — one bookie's entry; 404 when it has none;
* ``POST /admin/v2/bookies/racks-info/{bookie}?group=<group>`` with ``{"rack": "/r1",
  "hostname": "…"}`` — sets it (in ``default`` when no group is given; a bookie is in one
  group: an entry in another group is moved), 204;
* ``DELETE /admin/v2/bookies/racks-info/{bookie}`` — removes it (404 when it has none).

The ledger client spreads the bookies of each new ensemble over racks
(:mod:`magnetar.ledger.racks`). Writes are compare-and-set on the one node, retried on a
concurrent change (at most :data:`RACKS_UPDATE_ATTEMPTS_MAX` times).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, Conflict, ResourceNotFound, RestError
from magnetar.admin.request_body import as_object, read_json
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.controller.election import registered_bookies
from magnetar.ledger.racks import (
    DEFAULT_GROUP,
    RACK_NAME_BYTES_MAX,
    RACKS_PATH,
    BookieRack,
    InvalidRackConfiguration,
    normalized_rack,
    parse_configuration,
)
from magnetar.metadata.store import MUST_NOT_EXIST, BadVersion, NodeExists, NotFound

RACKS_UPDATE_ATTEMPTS_MAX = 20
"""Bound on compare-and-set retries of one rack update racing others."""
BOOKIE_ID_BYTES_MAX = 1024


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["bookies"])

    async def stored() -> tuple[dict[str, dict[str, Any]], int]:
        """The configuration and its node's version (``MUST_NOT_EXIST`` if absent)."""
        try:
            got = await ctx.service.store.get(RACKS_PATH)
        except NotFound:
            return {}, MUST_NOT_EXIST
        try:
            return parse_configuration(got.value), got.stat.version
        except InvalidRackConfiguration as exc:
            raise RestError(str(exc)) from None

    async def update(change: Callable[[dict[str, dict[str, Any]]], bool]) -> None:
        """Apply ``change`` (which edits the configuration in place and says whether it
        found what it changes) by compare-and-set. 404 when it found nothing."""
        for _ in range(RACKS_UPDATE_ATTEMPTS_MAX):
            configuration, version = await stored()
            if not change(configuration):
                raise ResourceNotFound("Bookie rack placement configuration not found")
            body = json.dumps(configuration, sort_keys=True).encode()
            try:
                await ctx.service.store.put(RACKS_PATH, body, version)
            except (BadVersion, NodeExists):
                continue  # changed meanwhile: apply it again on the new version
            return
        raise Conflict("the rack placement kept changing; try again")

    @r.get("/admin/v2/bookies/all", summary="Every registered bookie")
    async def all_bookies() -> Response:
        bookies = sorted(await registered_bookies(ctx.service.store))
        return json_response({"bookies": [{"bookieId": b} for b in bookies]})

    @r.get("/admin/v2/bookies/racks-info", summary="The rack placement of every bookie")
    async def racks_info() -> Response:
        return json_response((await stored())[0])

    @r.get("/admin/v2/bookies/racks-info/{bookie}", summary="The rack placement of one bookie")
    async def bookie_rack(bookie: str) -> Response:
        for group in (await stored())[0].values():
            if bookie in group:
                return json_response(group[bookie])
        raise ResourceNotFound(f"Bookie rack placement configuration not found: {bookie}")

    @r.post("/admin/v2/bookies/racks-info/{bookie}", summary="Set the rack of one bookie")
    async def set_bookie_rack(
        bookie: str, request: Request, group: str = DEFAULT_GROUP
    ) -> Response:
        if not bookie or len(bookie.encode()) > BOOKIE_ID_BYTES_MAX or "/" in bookie:
            raise BadRequest(f"invalid bookie id {bookie[:100]!r}: expected host:port")
        if not group or len(group.encode()) > RACK_NAME_BYTES_MAX:
            raise BadRequest("invalid group name")
        body = as_object(await read_json(request), "the bookie info")
        rack, hostname = body.get("rack"), body.get("hostname", "")
        if not isinstance(rack, str) or not isinstance(hostname, str):
            raise BadRequest('the bookie info needs "rack" (and "hostname") as strings')
        if len(hostname.encode()) > RACK_NAME_BYTES_MAX:
            raise BadRequest(f"a hostname is at most {RACK_NAME_BYTES_MAX} bytes")
        try:
            info = BookieRack(normalized_rack(rack), hostname).to_json()
        except InvalidRackConfiguration as exc:
            raise BadRequest(str(exc)) from None

        def put_rack(configuration: dict[str, dict[str, Any]]) -> bool:
            for other in configuration.values():
                other.pop(bookie, None)
            configuration.setdefault(group, {})[bookie] = info
            for name in [n for n, g in configuration.items() if not g]:
                del configuration[name]
            return True

        await update(put_rack)
        return no_content()

    @r.delete("/admin/v2/bookies/racks-info/{bookie}", summary="Remove the rack of one bookie")
    async def delete_bookie_rack(bookie: str) -> Response:
        def remove(configuration: dict[str, dict[str, Any]]) -> bool:
            found = False
            for name in list(configuration):
                if configuration[name].pop(bookie, None) is not None:
                    found = True
                if not configuration[name]:
                    del configuration[name]
            return found

        await update(remove)
        return no_content()

    return r
