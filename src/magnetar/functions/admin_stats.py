"""Reading a topic's stats from the broker's admin REST API, without blocking the loop.

``GET {admin_url}/admin/v2/{domain}/{tenant}/{ns}/{local}/stats`` (local name URL-quoted),
run in a worker thread with the stdlib (stats are read rarely: membership queries only).
Every failure raises :class:`~magnetar.functions.errors.MembershipUnavailable` naming the
URL and the cause.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.common.names import TopicName
from magnetar.functions.errors import MembershipUnavailable

TopicStatsReader = Callable[[str], Awaitable[Any]]
"""Reads a topic's stats (the admin API's TopicStats object) by topic name; raises
:class:`~magnetar.functions.errors.MembershipUnavailable` when it cannot. The default is
:func:`fetch_topic_stats` on the worker's admin URL; a worker inside a broker's process
reads them in-process (an HTTP request to its own process took ~2 ms of the event loop
it shares with the broker, once a second)."""


def topic_stats_url(admin_url: str, topic: str) -> str:
    """The stats URL of ``topic`` (any spelling :class:`TopicName` accepts)."""
    name = TopicName.parse(topic)
    local = urllib.parse.quote(name.local_name, safe="")
    return (
        f"{admin_url.rstrip('/')}/admin/v2/{name.domain.value}/{name.tenant}/"
        f"{name.namespace}/{local}/stats"
    )


def _get_json(url: str, timeout_s: float, headers: dict[str, str]) -> Any:
    req = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise MembershipUnavailable(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise MembershipUnavailable(f"GET {url}: {exc}") from None
    except ValueError as exc:
        raise MembershipUnavailable(f"GET {url}: answer is not JSON: {exc}") from None


async def fetch_topic_stats(
    admin_url: str, topic: str, timeout_ms: int, headers: dict[str, str] | None = None
) -> Any:
    """The topic's stats as parsed JSON (``headers``: e.g. ``Authorization``). Raises
    MembershipUnavailable."""
    url = topic_stats_url(admin_url, topic)
    return await asyncio.to_thread(_get_json, url, timeout_ms / 1000, headers or {})
