"""The few admin REST calls an instance makes on its topics, without blocking the loop:
turning deduplication on for an effectively-once output and compacting the state topic.
Failures raise :class:`FunctionsWorkerError` naming the call and the cause."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from magnetar.admin_client import AdminClient, AdminError
from magnetar.common.clock import Clock
from magnetar.functions.errors import FunctionsWorkerError

ADMIN_CALL_TIMEOUT_MS = 10_000
DEDUP_ENABLE_TIMEOUT_MS = 30_000
"""How long an instance waits for the broker to apply deduplication to its output."""
DEDUP_POLL_INTERVAL_MS = 100

T = TypeVar("T")


async def _call(what: str, call: Callable[[], T]) -> T:
    try:
        return await asyncio.to_thread(call)
    except AdminError as exc:
        raise FunctionsWorkerError(f"{what}: {exc}") from None


def _client(admin_url: str, headers: dict[str, str] | None) -> AdminClient:
    return AdminClient(admin_url, timeout_s=ADMIN_CALL_TIMEOUT_MS / 1000, headers=headers)


async def enable_deduplication(
    admin_url: str,
    topic: str,
    partitions: list[str],
    clock: Clock,
    headers: dict[str, str] | None = None,
) -> None:
    """Set the topic's ``deduplicationEnabled`` policy and wait (bounded) until every one of
    ``partitions`` (the topic itself when not partitioned) reports it in force."""
    admin = _client(admin_url, headers)
    await _call(
        f"enabling deduplication on {topic}", lambda: admin.set_topic_deduplication(topic, True)
    )
    deadline_s = clock.monotonic_s() + DEDUP_ENABLE_TIMEOUT_MS / 1000
    for partition in partitions:
        while True:
            stats = await _call(f"stats of {partition}", partial(admin.topic_stats, partition))
            if stats.get("deduplicationStatus") == "Enabled":
                break
            if clock.monotonic_s() > deadline_s:
                raise FunctionsWorkerError(
                    f"deduplication on {partition} not in force after {DEDUP_ENABLE_TIMEOUT_MS} ms"
                )
            await clock.sleep(DEDUP_POLL_INTERVAL_MS / 1000)


async def trigger_compaction(
    admin_url: str, topic: str, headers: dict[str, str] | None = None
) -> None:
    admin = _client(admin_url, headers)
    await _call(f"compacting {topic}", lambda: admin.trigger_compaction(topic))
