"""Reading request bodies: JSON values of an expected type, or a 400 ``BadRequest``.

Pulsar's admin clients send bare JSON values (``4``, ``true``, ``"FORWARD"``) as well as
objects, sometimes with no Content-Type; bodies are parsed here rather than by FastAPI's
models so every malformed body gets the same ``{"reason": ...}`` 400 answer.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from magnetar.admin.errors import BadRequest

BODY_SIZE_MAX_BYTES = 1024 * 1024
BODY_DEPTH_MAX = 32
"""Deepest nesting of arrays and objects accepted in a body (no admin body needs more than
three levels; deep nesting only exhausts recursion in whatever walks the value)."""

_MISSING = object()


async def read_json(request: Request, default: Any = _MISSING) -> Any:
    """The body as JSON; ``default`` for an empty body (400 when no default is given)."""
    raw = await request.body()
    if len(raw) > BODY_SIZE_MAX_BYTES:
        raise BadRequest(f"body larger than {BODY_SIZE_MAX_BYTES} bytes")
    if not raw.strip():
        if default is _MISSING:
            raise BadRequest("a JSON body is required")
        return default
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BadRequest(f"JSON body nested deeper than {BODY_DEPTH_MAX} levels") from None
    except ValueError as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from exc
    if _depth_exceeds(value, BODY_DEPTH_MAX):
        raise BadRequest(f"JSON body nested deeper than {BODY_DEPTH_MAX} levels")
    return value


def _depth_exceeds(value: Any, depth_max: int) -> bool:
    """Whether arrays/objects in ``value`` nest deeper than ``depth_max`` (iterative: the
    check itself must not recurse)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > depth_max:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return False


def as_int(value: Any, what: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (a JSON number, or a string of digits as some clients send)."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError as exc:
            raise BadRequest(f"{what} must be an integer") from exc
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{what} must be an integer, got {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise BadRequest(f"{what} must be >= {minimum}, got {value}")
    return value


def as_bool(value: Any, what: str) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise BadRequest(f"{what} must be true or false")
    return value


def as_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a JSON string")
    return value


def as_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return value


def as_str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{what} must be a list of strings")
    return value
