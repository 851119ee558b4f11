"""The Functions Worker's REST API, with Pulsar's paths:

* ``/admin/v3/{functions|sources|sinks}/{tenant}/{namespace}`` — GET: the names;
* ``.../{name}`` — POST create, PUT update (multipart ``functionConfig`` (or
  ``sourceConfig``/``sinkConfig``) JSON + ``data`` file, as pulsar-admin sends them; or a
  JSON body without a package), GET the definition, DELETE;
* ``.../{name}/status``, ``.../{name}/stats``, ``.../{name}/{instanceId}/status``;
* ``.../{name}/start|stop|restart`` and ``.../{name}/{instanceId}/start|stop|restart`` (POST);
* ``/admin/v3/functions/{tenant}/{namespace}/{name}/state/{key}`` (GET, POST) and
  ``.../{name}/download``: :mod:`magnetar.functions.state_rest`;
* ``/admin/v2/worker/cluster`` and ``/admin/v2/worker/cluster/leader`` (WorkerInfo JSON:
  ``workerId``, ``workerHostname``, ``port``); ``PUT /admin/v2/worker/rebalance`` and
  ``PUT /admin/v2/worker/leader/drain?workerId=``.

Every error is Pulsar's JSON ``{"reason": ...}``: 400 malformed input, 404 unknown
definition or instance, 409 a definition that exists already, 413 an oversized upload, 503
while no leader can take writes. Changes that reach a follower are forwarded to the leader
(the request as it came, marked with :data:`FORWARDED_HEADER` so it is forwarded only once).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from magnetar.admin_client import AdminClient, AdminError
from magnetar.auth.authentication import AUTH_METHOD_HEADER
from magnetar.common.errors import InvalidTopicName, MagnetarError, ProducerFenced
from magnetar.common.names import check_named_entity
from magnetar.functions.errors import (
    FunctionExists,
    FunctionNotFound,
    InvalidRequest,
    LeaderUnavailable,
    MembershipUnavailable,
    NotLeader,
    PackageTooLarge,
    TriggerTimeout,
)
from magnetar.functions.function_config import (
    ComponentKind,
    FunctionConfig,
    InvalidFunctionConfig,
)
from magnetar.functions.instance_status import InstanceStatus, function_status_json
from magnetar.functions.rest_access import RestRefused, WorkerRestAccess
from magnetar.functions.service_slot import ServiceSlot

if TYPE_CHECKING:
    # The worker brings the client library: a host may build the routes before its worker
    # joins (see ServiceSlot).
    from magnetar.functions.worker_service import WorkerService

log = logging.getLogger(__name__)

FORWARDED_HEADER = "X-Magnetar-Forwarded-By"
"""Set on a request a follower forwarded to the leader (its value: the follower's id)."""
JSON_BODY_BYTES_MAX = 1024 * 1024
MULTIPART_OVERHEAD_BYTES = 1024 * 1024
"""Room for the definition and multipart framing around the largest package."""
FORWARD_TIMEOUT_S = 60.0
TRIGGER_TIMEOUT_MS = 10_000
"""How long ``trigger`` waits for the function's output."""
TRIGGER_VALUE_BYTES_MAX = 1024 * 1024
UPLOADS_CONCURRENT_MAX = 4
"""Definition uploads read at once (each may hold a package of ``package_bytes_max`` in
memory); more are answered 503 "try again"."""
_CONFIG_PARTS = ("functionConfig", "sourceConfig", "sinkConfig")
_KINDS = {f"{k.value}s": k for k in ComponentKind}


class PayloadTooLarge(MagnetarError):
    pass


def error_response(status: int, reason: str) -> Response:
    return Response(
        json.dumps({"reason": reason}).encode(), status_code=status, media_type="application/json"
    )


def json_response(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")).encode(),
        status_code=status,
        media_type="application/json",
    )


def http_status_of(exc: BaseException) -> int:
    if isinstance(exc, InvalidRequest | InvalidFunctionConfig | InvalidTopicName):
        return 400
    if isinstance(exc, FunctionNotFound):
        return 404
    if isinstance(exc, FunctionExists):
        return 409
    if isinstance(exc, TriggerTimeout):
        return 408
    if isinstance(exc, PackageTooLarge | PayloadTooLarge):
        return 413
    if isinstance(exc, LeaderUnavailable | NotLeader | MembershipUnavailable):
        return 503
    if isinstance(exc, ProducerFenced):
        return 503
    return 500


Handler = Callable[..., Awaitable[Response]]


async def _answer(call: Callable[[], Awaitable[Response]]) -> Response:
    """Run a route body; every expected error becomes ``{"reason": ...}`` with its status."""
    try:
        return await call()
    except MagnetarError as exc:
        status = http_status_of(exc)
        if status >= 500:
            log.warning("functions REST failed: %r", exc)
        if isinstance(exc, ProducerFenced):
            reason = "this worker is no longer the leader (a newer leader fenced it); try again"
        elif status < 500 or status == 503:
            reason = str(exc)
        else:
            reason = f"Internal error: {exc!r}"
        return error_response(status, reason)
    except ValueError as exc:
        return error_response(400, str(exc))


async def read_body(request: Request, limit_bytes: int) -> bytes:
    """The whole body, refused with :class:`PayloadTooLarge` past ``limit_bytes``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise PayloadTooLarge(f"the request body is larger than {limit_bytes} bytes")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit_bytes:
            raise PayloadTooLarge(f"the request body is larger than {limit_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_form(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A ``multipart/form-data`` body: part name -> (file name or None, bytes). Raises
    :class:`InvalidRequest`."""
    if not content_type.startswith("multipart/form-data"):
        raise InvalidRequest("the request must be multipart/form-data")
    parser = BytesParser(policy=HTTP)
    msg = parser.parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    if not isinstance(msg, EmailMessage) or not msg.is_multipart():
        raise InvalidRequest("the multipart body cannot be read")
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts():
        assert isinstance(part, EmailMessage)
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str):
            parts[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return parts


def parse_definition_body(
    content_type: str, body: bytes
) -> tuple[dict[str, Any], tuple[str, bytes] | None]:
    """(definition JSON, (file name, package bytes) or None) from a multipart form (parts
    ``functionConfig``/``sourceConfig``/``sinkConfig`` and ``data``) or a JSON body.
    Raises :class:`InvalidRequest`."""
    if content_type.startswith("multipart/form-data"):
        parser = BytesParser(policy=HTTP)
        msg = parser.parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
        if not isinstance(msg, EmailMessage) or not msg.is_multipart():
            raise InvalidRequest("the multipart body cannot be read")
        config_text: bytes | None = None
        package: tuple[str, bytes] | None = None
        for part in msg.iter_parts():
            assert isinstance(part, EmailMessage)
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            data = payload if isinstance(payload, bytes) else b""
            if name in _CONFIG_PARTS:
                config_text = data
            elif name == "data":
                package = (part.get_filename() or "package", data)
            elif name == "url":
                raise InvalidRequest("package URLs are not supported; upload the package")
        if config_text is None:
            raise InvalidRequest("the form has no functionConfig part")
        definition = _json_object(config_text)
        return definition, package
    if not body.strip():
        raise InvalidRequest("the request has no definition (multipart functionConfig or JSON)")
    return _json_object(body), None


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"the definition is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("the definition must be a JSON object")
    return value


def _definition(
    kind: ComponentKind, tenant: str, namespace: str, name: str, data: dict[str, Any]
) -> FunctionConfig:
    for key, value in (("tenant", tenant), ("namespace", namespace), ("name", name)):
        given = data.get(key)
        if given is not None and given != value:
            raise InvalidRequest(f"{key} {given!r} in the definition differs from the path's")
        data[key] = value
    return FunctionConfig.from_json(data, kind=kind)


def worker_info_json(host: str, port: int, worker_id: str) -> dict[str, Any]:
    return {"workerId": worker_id, "workerHostname": host, "port": port}


def function_stats_json(instances: list[InstanceStatus]) -> dict[str, Any]:
    """Pulsar's ``FunctionStats`` shape, from the instances' statuses."""

    def metrics(s: InstanceStatus) -> dict[str, Any]:
        return {
            "receivedTotal": s.num_received,
            "processedSuccessfullyTotal": s.num_successfully_processed,
            "systemExceptionsTotal": s.num_system_exceptions,
            "userExceptionsTotal": s.num_user_exceptions,
            "avgProcessLatency": s.average_latency_ms or None,
            "lastInvocation": s.last_invocation_time_ms or None,
        }

    total = len(instances) or 1
    return {
        "receivedTotal": sum(s.num_received for s in instances),
        "processedSuccessfullyTotal": sum(s.num_successfully_processed for s in instances),
        "systemExceptionsTotal": sum(s.num_system_exceptions for s in instances),
        "userExceptionsTotal": sum(s.num_user_exceptions for s in instances),
        "avgProcessLatency": (sum(s.average_latency_ms for s in instances) / total) or None,
        "lastInvocation": max((s.last_invocation_time_ms for s in instances), default=0) or None,
        "instances": [
            {"instanceId": s.instance_id, "metrics": metrics(s)}
            for s in sorted(instances, key=lambda s: s.instance_id)
        ],
    }


async def _forward(service: WorkerService, request: Request, body: bytes) -> Response | None:
    """Send a change to the leader as it came; the leader's answer is the answer. None when
    this worker turned out to be the leader (the caller carries the change out)."""
    if request.headers.get(FORWARDED_HEADER):
        raise LeaderUnavailable(
            f"worker {service.worker_id} is not the leader (leadership is changing); try again"
        )
    base = await service.leader_url()
    if base is None:  # this worker was made leader meanwhile
        return None
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    headers = {FORWARDED_HEADER: service.worker_id, "Accept": "application/json"}
    # The caller's own credentials go along: the leader checks them again.
    for name in ("content-type", "authorization", AUTH_METHOD_HEADER.lower()):
        value = request.headers.get(name)
        if value:
            headers[name] = value
    leader = AdminClient(base, timeout_s=FORWARD_TIMEOUT_S)
    try:
        answer = await asyncio.to_thread(
            leader.exchange, request.method, path, body or None, headers
        )
    except AdminError as exc:
        raise LeaderUnavailable(f"the leader at {base} cannot be reached: {exc}") from None
    media = answer.header("Content-Type")
    return Response(answer.body, status_code=answer.status, media_type=media or None)


def routes_on(app: FastAPI, slot: ServiceSlot) -> list[BaseRoute]:
    """:func:`router`'s routes built for ``app`` (with the app's dependencies) but not
    placed in it: the caller puts them where they belong (the standalone: first)."""
    routes = app.router.routes
    before = len(routes)
    app.include_router(router(slot))
    built = routes[before:]
    del routes[before:]
    return built


def router(slot: ServiceSlot) -> APIRouter:
    """The routes, for the worker's own app or the standalone's admin app."""
    r = APIRouter(tags=["functions"])
    uploads = asyncio.Semaphore(UPLOADS_CONCURRENT_MAX)

    def kind_of(kinds: str) -> ComponentKind:
        kind = _KINDS.get(kinds)
        if kind is None:
            raise FunctionNotFound(f"unknown component type {kinds!r}")
        return kind

    async def leader_only(
        request: Request, body: bytes, action: Callable[[], Awaitable[Response]]
    ) -> Response:
        service = await slot.get()
        if service.worker.is_leader:
            try:
                return await action()
            except (NotLeader, ProducerFenced) as exc:
                # Deposed without having been told yet: a newer leader fenced this worker's
                # writes (nothing was written). The change goes to that leader instead.
                log.info(
                    "worker %s is no longer the leader (%s); forwarding", service.worker_id, exc
                )
                if (answer := await _forward(service, request, body)) is None:
                    raise LeaderUnavailable("leadership is changing; try again") from None
                return answer
        answer = await _forward(service, request, body)
        return answer if answer is not None else await action()

    def fqfn(tenant: str, namespace: str, name: str) -> str:
        check_named_entity("function", name)
        return f"{tenant}/{namespace}/{name}"

    # Before the instance routes: ``{name}/state/status`` is a state key, not instance "state".
    from magnetar.functions.state_rest import add_state_routes  # it builds on this module

    add_state_routes(r, slot, fqfn, kind_of)

    @r.get("/admin/v2/worker/cluster", summary="The worker cluster's members")
    async def cluster() -> Response:
        async def run() -> Response:
            view = await (await slot.get()).members()
            return json_response(
                [worker_info_json(m.host, m.port, m.worker_id) for m in view.members]
            )

        return await _answer(run)

    @r.get("/admin/v2/worker/cluster/leader", summary="The worker cluster's leader")
    async def cluster_leader() -> Response:
        async def run() -> Response:
            view = await (await slot.get()).members()
            if view.leader is None:
                raise LeaderUnavailable("no worker leads right now")
            m = view.leader
            return json_response(worker_info_json(m.host, m.port, m.worker_id))

        return await _answer(run)

    @r.put("/admin/v2/worker/rebalance", summary="Spread every instance anew")
    async def rebalance(request: Request) -> Response:
        async def run() -> Response:
            service = await slot.get()
            return await leader_only(request, b"", lambda: _moved(service.rebalance()))

        return await _answer(run)

    @r.put("/admin/v2/worker/leader/drain", summary="Move a worker's instances away")
    async def drain(request: Request, workerId: str) -> Response:
        async def run() -> Response:
            service = await slot.get()
            return await leader_only(request, b"", lambda: _moved(service.drain(workerId)))

        return await _answer(run)

    @r.get("/admin/v3/{kinds}/{tenant}/{namespace}", summary="List definitions")
    async def list_(kinds: str, tenant: str, namespace: str) -> Response:
        async def run() -> Response:
            return json_response(
                (await slot.get()).registry.list(tenant, namespace, kind_of(kinds))
            )

        return await _answer(run)

    async def write_definition(
        request: Request, kinds: str, tenant: str, namespace: str, name: str, create: bool
    ) -> Response:
        kind = kind_of(kinds)
        fqfn(tenant, namespace, name)
        service = await slot.get()
        package_limit = service.config.package_bytes_max + MULTIPART_OVERHEAD_BYTES
        if uploads.locked():
            raise LeaderUnavailable(
                f"{UPLOADS_CONCURRENT_MAX} uploads are in progress on this worker; try again"
            )
        async with uploads:
            body = await read_body(request, package_limit)

            async def apply() -> Response:
                content_type = request.headers.get("content-type", "")
                data, package = parse_definition_body(content_type, body)
                config = _definition(kind, tenant, namespace, name, data)
                if create:
                    await service.create(config, package)
                else:
                    await service.update(config, package)
                return Response(status_code=204)

            return await leader_only(request, body, apply)

    @r.post("/admin/v3/{kinds}/{tenant}/{namespace}/{name}", summary="Create a definition")
    async def create(
        kinds: str, tenant: str, namespace: str, name: str, request: Request
    ) -> Response:
        return await _answer(
            lambda: write_definition(request, kinds, tenant, namespace, name, create=True)
        )

    @r.put("/admin/v3/{kinds}/{tenant}/{namespace}/{name}", summary="Update a definition")
    async def update(
        kinds: str, tenant: str, namespace: str, name: str, request: Request
    ) -> Response:
        return await _answer(
            lambda: write_definition(request, kinds, tenant, namespace, name, create=False)
        )

    @r.get("/admin/v3/{kinds}/{tenant}/{namespace}/{name}", summary="Get a definition")
    async def get(kinds: str, tenant: str, namespace: str, name: str) -> Response:
        async def run() -> Response:
            record = (await slot.get()).get(fqfn(tenant, namespace, name), kind_of(kinds))
            return json_response(record.config.to_json())

        return await _answer(run)

    @r.delete("/admin/v3/{kinds}/{tenant}/{namespace}/{name}", summary="Delete a definition")
    async def delete(
        kinds: str, tenant: str, namespace: str, name: str, request: Request
    ) -> Response:
        async def run() -> Response:
            key, kind = fqfn(tenant, namespace, name), kind_of(kinds)

            async def apply() -> Response:
                await (await slot.get()).delete(key, kind)
                return Response(status_code=204)

            return await leader_only(request, b"", apply)

        return await _answer(run)

    @r.get("/admin/v3/{kinds}/{tenant}/{namespace}/{name}/status", summary="Instances' status")
    async def status(kinds: str, tenant: str, namespace: str, name: str) -> Response:
        async def run() -> Response:
            statuses = await (await slot.get()).statuses(
                fqfn(tenant, namespace, name), kind_of(kinds)
            )
            return json_response(function_status_json(statuses))

        return await _answer(run)

    @r.get("/admin/v3/{kinds}/{tenant}/{namespace}/{name}/stats", summary="Instances' stats")
    async def stats(kinds: str, tenant: str, namespace: str, name: str) -> Response:
        async def run() -> Response:
            statuses = await (await slot.get()).statuses(
                fqfn(tenant, namespace, name), kind_of(kinds)
            )
            return json_response(function_stats_json(statuses))

        return await _answer(run)

    @r.get(
        "/admin/v3/{kinds}/{tenant}/{namespace}/{name}/{instance_id}/status",
        summary="One instance's status",
    )
    async def instance_status(
        kinds: str, tenant: str, namespace: str, name: str, instance_id: str, local: bool = False
    ) -> Response:
        async def run() -> Response:
            key, kind = fqfn(tenant, namespace, name), kind_of(kinds)
            index = _instance_index(instance_id)
            if local:
                found = (await slot.get()).local_status(f"{key}:{index}")
                if found is None:
                    raise FunctionNotFound(f"instance {index} of {name} does not run here")
                return json_response(found.to_json()["status"] | {"instanceId": index})
            one = await (await slot.get()).status(key, kind, index)
            return json_response(one.to_json()["status"])

        return await _answer(run)

    @r.post("/admin/v3/{kinds}/{tenant}/{namespace}/{name}/trigger", summary="Trigger")
    async def trigger(
        kinds: str, tenant: str, namespace: str, name: str, request: Request
    ) -> Response:
        async def run() -> Response:
            key, kind = fqfn(tenant, namespace, name), kind_of(kinds)
            body = await read_body(request, TRIGGER_VALUE_BYTES_MAX + MULTIPART_OVERHEAD_BYTES)
            form = parse_form(request.headers.get("content-type", ""), body)
            value = form.get("dataStream") or form.get("data")
            if value is None:
                raise InvalidRequest("give the value to trigger with: a data or dataStream part")
            topic = form.get("topic")
            output = await (await slot.get()).trigger(
                key,
                kind,
                value[1],
                topic[1].decode("utf-8", "replace") if topic and topic[1] else None,
                TRIGGER_TIMEOUT_MS,
            )
            if output is None:
                return Response(status_code=204)
            return json_response(output.decode("utf-8", "replace"))

        return await _answer(run)

    for verb in ("start", "stop", "restart"):
        _add_control(r, slot, verb, fqfn, kind_of, leader_only)
    return r


def _instance_index(text: str) -> int:
    if not text.isdigit():
        raise InvalidRequest(f"instance id {text!r} is not a number")
    return int(text)


async def _moved(count: Awaitable[int]) -> Response:
    await count
    return Response(status_code=204)


def _add_control(
    r: APIRouter,
    slot: ServiceSlot,
    verb: str,
    fqfn: Callable[[str, str, str], str],
    kind_of: Callable[[str], ComponentKind],
    leader_only: Callable[[Request, bytes, Callable[[], Awaitable[Response]]], Awaitable[Response]],
) -> None:
    async def control(
        request: Request,
        kinds: str,
        tenant: str,
        namespace: str,
        name: str,
        instance_id: str | None = None,
    ) -> Response:
        async def run() -> Response:
            key, kind = fqfn(tenant, namespace, name), kind_of(kinds)
            index = None if instance_id is None else _instance_index(instance_id)

            async def apply() -> Response:
                if verb == "restart":
                    await (await slot.get()).restart(key, kind, index)
                else:
                    await (await slot.get()).set_running(key, kind, index, verb == "start")
                return Response(status_code=204)

            return await leader_only(request, b"", apply)

        return await _answer(run)

    async def all_instances(
        kinds: str, tenant: str, namespace: str, name: str, request: Request
    ) -> Response:
        return await control(request, kinds, tenant, namespace, name)

    async def one_instance(
        kinds: str, tenant: str, namespace: str, name: str, instance_id: str, request: Request
    ) -> Response:
        return await control(request, kinds, tenant, namespace, name, instance_id)

    base = "/admin/v3/{kinds}/{tenant}/{namespace}/{name}"
    r.add_api_route(f"{base}/{verb}", all_instances, methods=["POST"], summary=f"{verb} all")
    r.add_api_route(
        f"{base}/{{instance_id}}/{verb}", one_instance, methods=["POST"], summary=f"{verb} one"
    )


def create_worker_app(slot: ServiceSlot, access: WorkerRestAccess | None = None) -> FastAPI:
    """The app a worker serves on its own HTTP port (``magnetar functions-worker``);
    ``access`` checks every request first (:mod:`magnetar.functions.rest_access`)."""
    dependencies = [] if access is None else [Depends(access.check)]
    app = FastAPI(
        title="Magnetar Functions Worker",
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
        dependencies=dependencies,
    )

    @app.exception_handler(RestRefused)
    async def refused(request: Request, exc: RestRefused) -> Response:
        return error_response(exc.status, exc.reason)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(500, f"Internal error: {exc.__class__.__name__}")

    @app.get("/ready", summary="Whether the worker has joined its cluster")
    async def ready() -> Response:
        service = slot.service
        if service is None:
            return error_response(503, "the functions worker is starting")
        return json_response({"workerId": service.worker_id, "leader": service.worker.is_leader})

    app.include_router(router(slot))
    return app
