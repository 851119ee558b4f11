"""A namespace's bundles: ``GET …/bundles``, ``PUT …/{bundle}/unload``, ``PUT …/unload``.

Standalone owns every topic and has one bundle per namespace (its policy's ``bundles``):
unloading it unloads the namespace's loaded topics, whose clients reconnect to the same
broker. In a cluster the bundles are the controller's (``/controller_state/namespaces``);
an unload is a request to the controller, which moves the bundle to another live broker
(its producers and consumers are told to go and look it up again). A broker that is not
the controller answers 307 to the controller's HTTP URL, as Pulsar's brokers redirect
to the leader.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Conflict, ResourceNotFound
from magnetar.admin.namespaces import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.controller import BundleBusy, BundleId, InvalidBundle, UnknownBundle
from magnetar.broker.controller.bundles import BundleRange, NamespaceBundles
from magnetar.broker.ownership import current_controller
from magnetar.common.errors import ServiceNotReady
from magnetar.common.names import NamespaceName

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
STANDALONE_BUNDLES = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["namespaces"])
    service = ctx.service

    async def cluster_bundles(ns: NamespaceName) -> NamespaceBundles:
        assert service.ownership is not None
        bundles = await service.ownership.namespace_bundles(str(ns))
        if bundles is None:
            raise ServiceNotReady(f"the controller has not split {ns} into bundles yet")
        return bundles

    @r.get(NS + "/bundles", summary="A namespace's bundles (boundaries)")
    async def get_bundles(tenant: str, namespace: str) -> Response:
        ns = NamespaceName.of(tenant, namespace)
        policies = await namespace_policies(ctx, ns)
        if service.ownership is None:
            return json_response(policies.extra.get("bundles") or STANDALONE_BUNDLES)
        names = (await cluster_bundles(ns)).to_names()
        return json_response({"boundaries": names, "numBundles": len(names) - 1})

    async def unload(request: Request, ns: NamespaceName, ranges: list[str] | None) -> Response:
        await namespace_policies(ctx, ns)
        if service.ownership is None:
            for topic in service.loaded_topics():
                if topic.name.namespace_name == ns:
                    await service.unload_topic(topic.name)
            return no_content()
        controller = await current_controller(service.store)
        if controller is None:
            raise ServiceNotReady("no controller is elected yet")
        if controller.address.broker_id != service.ownership.broker_id:
            target = controller.address.http_url + request.url.path
            if request.url.query:
                target += "?" + request.url.query
            return RedirectResponse(target, status_code=307)
        assert ctx.controller is not None
        known = await cluster_bundles(ns)
        bundles = (
            known.bundles
            if ranges is None
            else [BundleId(str(ns), BundleRange.parse(name)) for name in ranges]
        )
        for bundle in bundles:
            try:
                await ctx.controller.unload(bundle)
            except UnknownBundle:
                raise ResourceNotFound(f"Bundle {bundle} not found") from None
            except BundleBusy as exc:
                if ranges is not None:
                    raise Conflict(f"Bundle {bundle} is moving already ({exc})") from None
        return no_content()

    @r.put(NS + "/unload", summary="Unload every bundle of a namespace")
    async def unload_namespace(request: Request, tenant: str, namespace: str) -> Response:
        return await unload(request, NamespaceName.of(tenant, namespace), None)

    @r.put(NS + "/{bundle}/unload", summary="Unload one bundle (moves it to another broker)")
    async def unload_bundle(request: Request, tenant: str, namespace: str, bundle: str) -> Response:
        try:
            BundleRange.parse(bundle)
        except InvalidBundle as exc:
            raise ResourceNotFound(f"Bundle {bundle} not found: {exc}") from None
        return await unload(request, NamespaceName.of(tenant, namespace), [bundle])

    return r
