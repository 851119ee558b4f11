"""Reading Pulsar's policy JSON: field checks shared by every policy family.

Each reader returns the value with the expected type or raises :class:`PolicyError`, whose
message names the field, so a malformed admin value is refused with a one-line reason.
"""

from __future__ import annotations

import json
from typing import Any

from magnetar.common.errors import MetadataError


class PolicyError(MetadataError):
    """A stored policy value that is not valid JSON of the expected shape."""


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PolicyError(f"{what} must be a JSON object")
    return value


def json_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(f"{what} must be an integer, got {value!r}")
    return value


def opt_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    return None if value is None else json_int(value, key)


def opt_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise PolicyError(f"{key} must be a string")
    return value


def opt_bool(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise PolicyError(f"{key} must be true or false")
    return value


def json_value(data: bytes, what: str) -> Any:
    """The JSON value a stored node holds (empty bytes: ``{}``)."""
    try:
        return json.loads(data) if data.strip() else {}
    except ValueError as exc:
        raise PolicyError(f"{what} are not JSON: {exc}") from exc


def json_bytes(value: dict[str, Any]) -> bytes:
    """``value`` as stored: canonical JSON (sorted keys)."""
    return json.dumps(value, sort_keys=True).encode()
