"""What the driver asks the broker's admin REST API (``admin_url``), blocking.

The binary protocol has no request for a topic's ledger list, and admission control needs
it: ledger ids are not contiguous, so the entries between two positions in different
ledgers are only known from ``GET …/internalStats`` (``ledgers[]``: ``ledgerId``,
``entries``). The sink asks ``GET …/stats`` (``deduplicationStatus``) to check that its
exactly-once writes are deduplicated.

Requests carry the options' authentication (``Authorization: Bearer <token>`` or
``Basic``) and time out after :data:`REQUEST_TIMEOUT_S`. Failures raise
:class:`AdminRequestError` naming the URL and the cause.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.spark.options import SourceOptions
from magnetar.spark.topic_catalog import SparkSourceError

REQUEST_TIMEOUT_S = 30.0

Ledgers = list[tuple[int, int]]
"""``(ledger id, entries)`` of a topic's ledgers, oldest first."""


class AdminRequestError(SparkSourceError):
    """An admin REST request failed (unreachable, refused, not found, bad answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def auth_headers(opts: SourceOptions) -> dict[str, str]:
    """The ``Authorization`` header for the options' credentials (none without)."""
    if opts.auth_token is not None:
        return {"Authorization": f"Bearer {opts.auth_token}"}
    if opts.auth_basic is not None:
        user, password = opts.auth_basic
        raw = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {raw}"}
    return {}


def topic_path(full_name: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` with the local name URL-quoted."""
    domain, _, rest = full_name.partition("://")
    tenant, namespace, local = rest.split("/", 2)
    return f"{domain}/{tenant}/{namespace}/{urllib.parse.quote(local, safe='')}"


def get_json(opts: SourceOptions, path: str) -> Any:
    """``GET admin_url + path`` as JSON. Raises AdminRequestError."""
    if opts.admin_url is None:
        raise AdminRequestError("admin_url is not set")
    url = opts.admin_url.rstrip("/") + path
    req = urllib.request.Request(url, headers={"Accept": "application/json", **auth_headers(opts)})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise AdminRequestError(f"GET {url}: HTTP {exc.code} {exc.reason}", exc.code) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise AdminRequestError(f"GET {url}: {exc}") from exc
    except ValueError as exc:
        raise AdminRequestError(f"GET {url}: not JSON: {exc}") from exc


def topic_ledgers(opts: SourceOptions, partition: str) -> Ledgers:
    """The ledger list of one partition (or non-partitioned topic). Raises AdminRequestError."""
    stats = get_json(opts, f"/admin/v2/{topic_path(partition)}/internalStats")
    try:
        return [(int(led["ledgerId"]), int(led["entries"])) for led in stats["ledgers"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise AdminRequestError(f"internalStats of {partition}: no usable ledgers[]") from exc


def deduplication_enabled(opts: SourceOptions, topic: str) -> bool | None:
    """Whether the broker deduplicates what is written to ``topic`` (broker flag, namespace
    or topic policy, as the topic stats' ``deduplicationStatus`` reports it; a partitioned
    topic is judged by its partition 0). ``None`` when the topic does not exist yet."""
    meta = get_json(opts, f"/admin/v2/{topic_path(topic)}/partitions")
    partitions = int(meta.get("partitions", 0)) if isinstance(meta, dict) else 0
    target = f"{topic}-partition-0" if partitions > 0 else topic
    try:
        stats = get_json(opts, f"/admin/v2/{topic_path(target)}/stats")
    except AdminRequestError as exc:
        if exc.status == 404:
            return None
        raise
    return bool(isinstance(stats, dict) and stats.get("deduplicationStatus") == "Enabled")
