"""Response shapes shared by the routes: JSON with a body, 204 without."""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response


def json_response(body: Any, status: int = 200) -> Response:
    """``body`` as JSON (``null`` answers 204, as Pulsar's JAX-RS does for a null value)."""
    if body is None:
        return no_content()
    return Response(
        json.dumps(body, separators=(",", ":")).encode(),
        status_code=status,
        media_type="application/json",
    )


def no_content() -> Response:
    return Response(status_code=204)


def error_response(status: int, reason: str) -> Response:
    return Response(
        json.dumps({"reason": reason}).encode(), status_code=status, media_type="application/json"
    )
