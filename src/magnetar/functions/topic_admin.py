"""The few admin REST calls an instance makes on its topics, without blocking the loop:
turning deduplication on for an effectively-once output and compacting the state topic.
Failures raise :class:`FunctionsWorkerError` naming the URL and the cause."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.common.clock import Clock
from magnetar.common.names import TopicName
from magnetar.functions.admin_stats import topic_stats_url
from magnetar.functions.errors import FunctionsWorkerError

ADMIN_CALL_TIMEOUT_MS = 10_000
DEDUP_ENABLE_TIMEOUT_MS = 30_000
"""How long an instance waits for the broker to apply deduplication to its output."""
DEDUP_POLL_INTERVAL_MS = 100


def topic_url(admin_url: str, topic: str) -> str:
    name = TopicName.parse(topic)
    local = urllib.parse.quote(name.local_name, safe="")
    return (
        f"{admin_url.rstrip('/')}/admin/v2/{name.domain.value}/{name.tenant}/"
        f"{name.namespace}/{local}"
    )


def _call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=ADMIN_CALL_TIMEOUT_MS / 1000) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise FunctionsWorkerError(f"{method} {url}: HTTP {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FunctionsWorkerError(f"{method} {url}: {exc}") from None
    except ValueError as exc:
        raise FunctionsWorkerError(f"{method} {url}: answer is not JSON: {exc}") from None


async def enable_deduplication(
    admin_url: str,
    topic: str,
    partitions: list[str],
    clock: Clock,
    headers: dict[str, str] | None = None,
) -> None:
    """Set the topic's ``deduplicationEnabled`` policy and wait (bounded) until every one of
    ``partitions`` (the topic itself when not partitioned) reports it in force."""
    url = topic_url(admin_url, topic) + "/deduplicationEnabled"
    await asyncio.to_thread(_call, "POST", url, True, headers)
    deadline_s = clock.monotonic_s() + DEDUP_ENABLE_TIMEOUT_MS / 1000
    for partition in partitions:
        stats_url = topic_stats_url(admin_url, partition)
        while True:
            stats = await asyncio.to_thread(_call, "GET", stats_url, None, headers)
            if isinstance(stats, dict) and stats.get("deduplicationStatus") == "Enabled":
                break
            if clock.monotonic_s() > deadline_s:
                raise FunctionsWorkerError(
                    f"deduplication on {partition} not in force after {DEDUP_ENABLE_TIMEOUT_MS} ms"
                )
            await clock.sleep(DEDUP_POLL_INTERVAL_MS / 1000)


async def trigger_compaction(
    admin_url: str, topic: str, headers: dict[str, str] | None = None
) -> None:
    url = topic_url(admin_url, topic) + "/compaction"
    await asyncio.to_thread(_call, "PUT", url, None, headers)
