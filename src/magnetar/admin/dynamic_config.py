"""Dynamic broker configuration over REST, with Pulsar's paths
(:mod:`magnetar.broker.dynamic_config` holds the rules and the store):

* ``GET /admin/v2/brokers/configuration`` — the names that can be changed at run time;
* ``GET /admin/v2/brokers/configuration/values`` — the overrides stored, name -> value;
* ``POST /admin/v2/brokers/configuration/{configName}/{configValue}`` — store an override
  (204); every broker of the cluster applies it without a restart;
* ``DELETE /admin/v2/brokers/configuration/{configName}`` — remove it (204; the configured
  value applies again).

412 for a name that is not dynamic or a value it cannot take (Pulsar's status), 404 when
deleting a name that has no override.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import PreconditionFailed, ResourceNotFound
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.dynamic_config import (
    DYNAMIC_SETTINGS,
    DynamicConfigError,
    checked_value,
    read_values,
    update_values,
)

BASE = "/admin/v2/brokers/configuration"


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["brokers"])
    store = ctx.service.store

    @r.get(BASE, summary="The settings that can be changed at run time")
    async def names() -> Response:
        return json_response(sorted(DYNAMIC_SETTINGS))

    @r.get(BASE + "/values", summary="The dynamic configuration overrides")
    async def values() -> Response:
        stored, _ = await read_values(store)
        return json_response(stored)

    @r.post(BASE + "/{configName}/{configValue}", summary="Change a setting on every broker")
    async def update(configName: str, configValue: str) -> Response:
        try:
            value = checked_value(configName, configValue)
        except DynamicConfigError as exc:
            raise PreconditionFailed(str(exc)) from None
        await update_values(store, lambda current: {**current, configName: value})
        return no_content()

    @r.delete(BASE + "/{configName}", summary="Remove a setting's override")
    async def delete(configName: str) -> Response:
        if configName not in DYNAMIC_SETTINGS:
            raise PreconditionFailed(f"{configName} is not a dynamic configuration")
        stored, _ = await read_values(store)
        if configName not in stored:
            raise ResourceNotFound(f"{configName} has no dynamic configuration value")
        await update_values(
            store, lambda current: {k: v for k, v in current.items() if k != configName}
        )
        return no_content()

    return r
