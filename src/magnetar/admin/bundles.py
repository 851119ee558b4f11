"""A namespace's bundles: ``GET …/bundles``, ``PUT …/{bundle}/unload``, ``PUT …/unload``,
``PUT …/{bundle}/split``.

Standalone owns every topic and has one bundle per namespace (its policy's ``bundles``):
unloading it unloads the namespace's loaded topics, whose clients reconnect to the same
broker. In a cluster the bundles are the controller's (``/controller_state/namespaces``);
an unload is a request to the controller, which moves the bundle to another live broker
(its producers and consumers are told to go and look it up again). A broker that is not
the controller answers 307 to the controller's HTTP URL, as Pulsar's brokers redirect
to the leader. A split is a request to the controller too: the bundle is released by its
owner (its clients look their topics up again) and its two halves — Pulsar's
``range_equally_divide``, the only algorithm here — are assigned to live brokers.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import Conflict, PreconditionFailed, ResourceNotFound
from magnetar.admin.resources.namespace_policies import namespace_policies
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.controller import BundleBusy, BundleId, InvalidBundle, UnknownBundle
from magnetar.broker.controller.bundles import BundleRange, NamespaceBundles
from magnetar.broker.ownership import current_controller
from magnetar.common.errors import ServiceNotReady
from magnetar.common.names import NamespaceName

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
STANDALONE_BUNDLES = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
SPLIT_ALGORITHMS = ("range_equally_divide",)
"""The split algorithms supported (Pulsar's names); Pulsar's default is the first."""


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

    async def to_controller(request: Request) -> Response | None:
        """A 307 to the controller's HTTP URL, or ``None`` when this broker is it."""
        assert service.ownership is not None
        controller = await current_controller(service.store)
        if controller is None:
            raise ServiceNotReady("no controller is elected yet")
        if controller.address.broker_id == service.ownership.broker_id:
            return None
        target = controller.address.http_url + request.url.path
        if request.url.query:
            target += "?" + request.url.query
        return RedirectResponse(target, status_code=307)

    async def unload(request: Request, ns: NamespaceName, ranges: list[str] | None) -> Response:
        await namespace_policies(ctx, ns)
        if service.ownership is None:
            for topic in service.loaded_topics():
                if topic.name.namespace_name == ns:
                    await service.unload_topic(topic.name)
            return no_content()
        if (redirect := await to_controller(request)) is not None:
            return redirect
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

    @r.put(NS + "/{bundle}/split", summary="Split one bundle in two (the halves are assigned)")
    async def split_bundle(
        request: Request,
        tenant: str,
        namespace: str,
        bundle: str,
        unload: bool = False,
        algorithm: str | None = Query(default=None, alias="splitAlgorithmName"),
    ) -> Response:
        # ``unload`` is accepted for Pulsar's clients; here the bundle is always released
        # before it splits, so the halves' topics are always looked up again.
        del unload
        ns = NamespaceName.of(tenant, namespace)
        if algorithm is not None and algorithm not in SPLIT_ALGORITHMS:
            raise PreconditionFailed(
                "Unsupported namespace bundle split algorithm, supported algorithms are "
                f"{list(SPLIT_ALGORITHMS)}"
            )
        try:
            bundle_range = BundleRange.parse(bundle)
        except InvalidBundle as exc:
            raise ResourceNotFound(f"Bundle {bundle} not found: {exc}") from None
        await namespace_policies(ctx, ns)
        if service.ownership is None:
            raise PreconditionFailed(
                "a standalone broker serves each namespace as one bundle and does not split "
                "it; bundles split in cluster mode (magnetar broker)"
            )
        if (redirect := await to_controller(request)) is not None:
            return redirect
        assert ctx.controller is not None
        target = BundleId(str(ns), bundle_range)
        try:
            await ctx.controller.split(target)
        except UnknownBundle:
            raise ResourceNotFound(f"Bundle {target} not found") from None
        except BundleBusy as exc:
            raise Conflict(f"Bundle {target} is moving already ({exc})") from None
        except InvalidBundle as exc:
            raise PreconditionFailed(f"Bundle {target} cannot be split: {exc}") from None
        return no_content()

    return r
