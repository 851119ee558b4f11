"""Reading a topic's stats from the broker's admin REST API, without blocking the loop.

:meth:`magnetar.admin_client.AdminClient.topic_stats` run in a worker thread (stats are
read rarely: membership queries only). Every failure raises
:class:`~magnetar.functions.errors.MembershipUnavailable` naming the topic and the cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.admin_client import AdminClient, AdminError, topic_path
from magnetar.functions.errors import MembershipUnavailable

TopicStatsReader = Callable[[str], Awaitable[Any]]
"""Reads a topic's stats (the admin API's TopicStats object) by topic name; raises
:class:`~magnetar.functions.errors.MembershipUnavailable` when it cannot. The default is
:func:`fetch_topic_stats` on the worker's admin URL; a worker inside a broker's process
reads them in-process (an HTTP request to its own process took ~2 ms of the event loop
it shares with the broker, once a second)."""


def topic_stats_url(admin_url: str, topic: str) -> str:
    """The stats URL of ``topic`` (any spelling :class:`TopicName` accepts) on one host."""
    return admin_url.rstrip("/") + topic_path(topic, "stats")


async def fetch_topic_stats(
    admin_url: str, topic: str, timeout_ms: int, headers: dict[str, str] | None = None
) -> Any:
    """The topic's stats as parsed JSON (``headers``: e.g. ``Authorization``). Raises
    MembershipUnavailable."""
    admin = AdminClient(admin_url, timeout_s=timeout_ms / 1000, headers=headers)
    try:
        return await asyncio.to_thread(admin.topic_stats, topic)
    except AdminError as exc:
        raise MembershipUnavailable(f"stats of {topic}: {exc}") from None
