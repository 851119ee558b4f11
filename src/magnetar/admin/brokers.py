"""Liveness, readiness, the leader broker, the broker list, and the lookup REST
(reference §8.2: the C++ client's ``http://`` service URL path)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Header, Query, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import PreconditionFailed, ResourceNotFound
from magnetar.admin.health import storage_problem
from magnetar.admin.responses import json_response
from magnetar.broker.controller.election import REGISTRATIONS_PATH
from magnetar.broker.ownership import current_controller, registered_brokers
from magnetar.broker.runtime_config import runtime_config
from magnetar.common.errors import ServiceNotReady
from magnetar.common.names import TopicName
from magnetar.metadata.store import NotFound

LISTENER_NAME_HEADER = "X-Pulsar-ListenerName"
"""Pulsar's header naming the advertised listener an HTTP lookup asks for."""


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["brokers"])

    async def check() -> Response:
        problem = next((p for p in (c() for c in ctx.health_checks) if p is not None), None)
        if problem is None:
            problem = await storage_problem(ctx.service)
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        return PlainTextResponse("ok")

    @r.get(
        "/ready",
        summary="Readiness: 200 once the broker serves and its storage takes writes, else 503",
    )
    async def ready() -> Response:
        return await check()

    @r.get(
        "/admin/v2/brokers/health",
        summary="Broker health check: 200 ok, or 503 with the reason (e.g. read-only bookies)",
    )
    async def health() -> Response:
        return await check()

    @r.get("/admin/v2/brokers/leaderBroker", summary="The leader broker (the controller)")
    async def leader() -> Response:
        """Standalone: this broker. Cluster mode: the controller, with its epoch as
        ``controllerEpoch`` (503 while none is elected)."""
        if ctx.service.ownership is None:
            return json_response(
                {"serviceUrl": ctx.http_url, "brokerId": f"{ctx.advertised_host}:{ctx.http_port}"}
            )
        controller = await current_controller(ctx.service.store)
        if controller is None:
            raise ServiceNotReady("no controller is elected yet")
        return json_response(
            {
                "serviceUrl": controller.address.http_url,
                "brokerId": controller.address.broker_id,
                "controllerEpoch": controller.epoch,
            }
        )

    @r.get(
        "/admin/v2/brokers/configuration/runtime",
        summary="This broker's effective configuration (Pulsar's keys where they exist)",
    )
    async def runtime_configuration() -> Response:
        service = ctx.service
        settings = runtime_config(service.config, ctx.host_settings)
        # the ports bound (a configured 0 picks a free one)
        settings["brokerServicePort"] = str(service.port)
        settings["webServicePort"] = str(ctx.http_port)
        if ctx.controller is not None:
            settings["brokerId"] = ctx.controller.broker_id
        return json_response(settings)

    @r.get(
        "/admin/v2/broker-stats/load-report",
        summary="This broker's latest load report (cluster mode), as the controller reads it",
    )
    async def load_report() -> Response:
        """The ``load`` object of this broker's registration (``cpu.usage``, message rates,
        topics, connections, per-bundle rates; :mod:`magnetar.broker.load_report`), with its
        ``brokerId``. 404 before the first report (one every few seconds); 412 on a
        standalone, which reports no load."""
        if ctx.service.ownership is None or ctx.controller is None:
            raise PreconditionFailed("load reports are written by cluster brokers only")
        broker_id = ctx.controller.broker_id
        try:
            got = await ctx.service.store.get(f"{REGISTRATIONS_PATH}/{broker_id}")
            load = json.loads(got.value).get("load")
        except (NotFound, ValueError, AttributeError):
            load = None
        if not isinstance(load, dict):
            raise ResourceNotFound(f"broker {broker_id} has not reported its load yet")
        return json_response({"brokerId": broker_id, **load})

    @r.get("/admin/v2/brokers/{cluster}", summary="Active brokers of a cluster")
    async def brokers(cluster: str) -> Response:
        if cluster != ctx.cluster:
            raise ResourceNotFound("Cluster does not exist")
        if ctx.service.ownership is None:
            return json_response([f"{ctx.advertised_host}:{ctx.http_port}"])
        return json_response(await registered_brokers(ctx.service.store))

    @r.get(
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}",
        summary="Lookup: the broker serving a topic",
    )
    async def lookup(
        request: Request,
        domain: str,
        tenant: str,
        namespace: str,
        topic: str,
        listener_name: str | None = Query(default=None, alias="listenerName"),
        listener_name_header: str | None = Header(default=None, alias=LISTENER_NAME_HEADER),
    ) -> Response:
        """As Pulsar: the ``listenerName`` query parameter, else the listener name header,
        picks the advertised listener whose URLs are answered; a listener the broker lacks
        is a 500 ``{"reason": "the broker do not have <name> listener"}``."""
        name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
        url, url_tls = ctx.service.lookup_urls(listener_name or listener_name_header)
        ownership = ctx.service.ownership
        if ownership is not None:
            # Cluster mode: the owner answers; any other broker redirects there (307 with
            # the same path and query, as Pulsar's brokers do).
            await ctx.service.require_namespace(name)
            owner = await ownership.owner(name, ctx.service.config.lookup_owner_wait_ms)
            if owner.broker_id != ownership.broker_id:
                target = owner.http_url + request.url.path
                if request.url.query:
                    target += "?" + request.url.query
                return RedirectResponse(target, status_code=307)
        return json_response(
            {
                "brokerUrl": url,
                "brokerUrlTls": url_tls,
                "brokerUrlSsl": "",
                "nativeUrl": url,
                "httpUrl": ctx.http_url,
                "httpUrlTls": ctx.http_url,
            }
        )

    return r
