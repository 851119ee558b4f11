"""The Functions Worker's REST routes for a function's state and a component's package
(part of :func:`magnetar.functions.rest.router`, with its error handling):

* ``GET /admin/v3/functions/{tenant}/{namespace}/{name}/state/{key}`` — Pulsar's
  ``FunctionState`` JSON: ``key``, then ``numberValue`` for a counter, ``stringValue`` for a
  UTF-8 value or ``byteValue`` (base64) for other bytes, and ``version``; 404 for an unknown
  function or key;
* ``POST …/state/{key}`` — store a value: multipart part ``state`` (as pulsar-admin sends it)
  or a JSON body, holding a ``FunctionState`` with ``stringValue`` or ``byteValue``; 400 for
  a counter (Pulsar refuses them too) or a ``key`` other than the path's; 204. Running
  instances see the value at their next message (they catch up with the state topic first);
* ``GET /admin/v3/{kinds}/{tenant}/{namespace}/{name}/download`` — the uploaded package.

The state lives on the function's compacted state topic (:mod:`magnetar.functions.state_store`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.functions.errors import FunctionNotFound, InvalidRequest
from magnetar.functions.function_config import ComponentKind
from magnetar.functions.rest import (
    MULTIPART_OVERHEAD_BYTES,
    _answer,
    json_response,
    parse_form,
    read_body,
)
from magnetar.functions.service_slot import ServiceSlot
from magnetar.functions.state_store import (
    STATE_VALUE_BYTES_MAX,
    StateEntry,
    StateError,
    state_topic_name,
)

STATE_BODY_BYTES_MAX = 2 * STATE_VALUE_BYTES_MAX + MULTIPART_OVERHEAD_BYTES
"""A ``FunctionState`` with the largest value in base64, and the form around it."""


def function_state_json(entry: StateEntry) -> dict[str, Any]:
    """Pulsar's ``FunctionState`` (null fields left out, as Pulsar's REST writes them)."""
    body: dict[str, Any] = {"key": entry.key}
    if entry.number is not None:
        body["numberValue"] = entry.number
    elif entry.value is not None:
        try:
            body["stringValue"] = entry.value.decode("utf-8")
        except UnicodeDecodeError:
            body["byteValue"] = base64.b64encode(entry.value).decode("ascii")
    body["version"] = entry.version
    return body


def state_value_of(key: str, body: Any) -> bytes:
    """The bytes a ``FunctionState`` body stores under ``key``. Raises
    :class:`InvalidRequest` as Pulsar answers 400."""
    if not isinstance(body, dict):
        raise InvalidRequest("the state must be a FunctionState JSON object")
    if body.get("key") is not None and body["key"] != key:
        raise InvalidRequest("Path key doesn't match key in json")
    text, raw = body.get("stringValue"), body.get("byteValue")
    if text:  # Pulsar: a non-empty stringValue wins over byteValue
        if not isinstance(text, str):
            raise InvalidRequest("stringValue must be a string")
        return text.encode("utf-8")
    if raw is None:
        if text is not None:
            return b""
        raise InvalidRequest("Setting Counter values not supported in put state")
    if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return bytes(raw)
    if not isinstance(raw, str):
        raise InvalidRequest("byteValue must be base64 text")
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError:
        raise InvalidRequest("byteValue is not valid base64") from None


def add_state_routes(
    r: APIRouter,
    slot: ServiceSlot,
    fqfn: Callable[[str, str, str], str],
    kind_of: Callable[[str], ComponentKind],
) -> None:
    """The state and download routes on ``r`` (``fqfn`` checks a name, ``kind_of`` a
    ``{kinds}`` path segment; both raise what :func:`~magnetar.functions.rest._answer`
    turns into 400/404)."""
    # ``{kinds}`` (functions only) so that authorization treats these routes as the other
    # functions routes: tenant admin or the namespace's "functions" action.
    base = "/admin/v3/{kinds}/{tenant}/{namespace}/{name}"

    async def state_topic_of(kinds: str, tenant: str, namespace: str, name: str) -> tuple[Any, str]:
        if kind_of(kinds) is not ComponentKind.FUNCTION:
            raise FunctionNotFound(f"{kinds} have no state (functions do)")
        service = await slot.get()
        service.get(fqfn(tenant, namespace, name), ComponentKind.FUNCTION)  # 404 if unknown
        return service.worker.client, state_topic_name(tenant, namespace, name)

    @r.get(base + "/state/{key}", summary="A key of a function's state")
    async def query(kinds: str, tenant: str, namespace: str, name: str, key: str) -> Response:
        async def run() -> Response:
            from magnetar.functions.state_topic import query_state  # the client library

            client, topic = await state_topic_of(kinds, tenant, namespace, name)
            entry = await query_state(client, topic, key)
            if entry is None:
                raise FunctionNotFound(f"key '{key}' doesn't exist.")
            return json_response(function_state_json(entry))

        return await _answer(run)

    @r.post(base + "/state/{key}", summary="Store a value in a function's state")
    async def put(
        kinds: str, tenant: str, namespace: str, name: str, key: str, request: Request
    ) -> Response:
        async def run() -> Response:
            from magnetar.functions.state_topic import put_state  # the client library

            client, topic = await state_topic_of(kinds, tenant, namespace, name)
            content_type = request.headers.get("content-type", "")
            raw = await read_body(request, STATE_BODY_BYTES_MAX)
            if content_type.startswith("multipart/form-data"):
                part = parse_form(content_type, raw).get("state")
                if part is None:
                    raise InvalidRequest("the form has no state part")
                raw = part[1]
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise InvalidRequest(f"the state is not valid JSON: {exc}") from None
            try:
                await put_state(client, topic, key, state_value_of(key, body))
            except StateError as exc:
                raise InvalidRequest(str(exc)) from None
            return Response(status_code=204)

        return await _answer(run)

    @r.get(base + "/download", summary="The package")
    async def download(kinds: str, tenant: str, namespace: str, name: str) -> Response:
        async def run() -> Response:
            from magnetar.functions.package_store import fetch_package  # the client library

            kind = kind_of(kinds)
            service = await slot.get()
            record = service.get(fqfn(tenant, namespace, name), kind)
            if record.package is None:
                raise FunctionNotFound(f"{name} has no uploaded package (a builtin connector)")
            with tempfile.TemporaryDirectory(prefix="magnetar-download-") as tmp:
                path = await fetch_package(
                    service.worker.client, service.config.packages_topic, record.package, Path(tmp)
                )
                data = await asyncio.to_thread(path.read_bytes)
            safe = record.package.file_name.replace('"', "_")
            return Response(
                data,
                media_type="application/octet-stream",
                headers={"Content-Disposition": f'attachment; filename="{safe}"'},
            )

        return await _answer(run)
