"""What the driver asks the broker's admin REST API (``admin_url``), blocking.

The binary protocol has no request for a topic's ledger list, and admission control needs
it: ledger ids are not contiguous, so the entries between two positions in different
ledgers are only known from ``GET …/internalStats`` (``ledgers[]``: ``ledgerId``,
``entries``). A batch read that reads offloaded ledgers from the object store plans from
``GET …/internal-info`` (each ledger's offload context). The sink asks ``GET …/stats`` (``deduplicationStatus``) to check that its
exactly-once writes are deduplicated.

Requests go through :class:`magnetar.admin_client.AdminClient` (``admin_url`` may list
several hosts, tried in turn), carry the options' authentication (``Authorization: Bearer
<token>`` or ``Basic``) and time out after :data:`REQUEST_TIMEOUT_S`. Failures raise
:class:`AdminRequestError` naming the request and the cause (``status``: the HTTP status).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, TypeVar

from magnetar.admin_client import AdminClient, AdminError, AdminHttpError
from magnetar.admin_client.client import topic_path
from magnetar.spark.offload_plan import InternalInfoError, LedgerInfo, parse_internal_info
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


def admin_client(opts: SourceOptions) -> AdminClient:
    """The admin client of the options (``admin_url`` may list several hosts). Raises
    AdminRequestError when ``admin_url`` is unset or malformed."""
    if opts.admin_url is None:
        raise AdminRequestError("admin_url is not set")
    try:
        return AdminClient(opts.admin_url, timeout_s=REQUEST_TIMEOUT_S, headers=auth_headers(opts))
    except AdminError as exc:
        raise AdminRequestError(str(exc)) from exc


T = TypeVar("T")


def _ask(what: str, call: Callable[..., T], *args: Any) -> T:
    try:
        return call(*args)
    except AdminHttpError as exc:
        raise AdminRequestError(f"{what}: {exc}", exc.status) from exc
    except AdminError as exc:
        raise AdminRequestError(f"{what}: {exc}") from exc


def topic_ledgers(opts: SourceOptions, partition: str) -> Ledgers:
    """The ledger list of one partition (or non-partitioned topic). Raises AdminRequestError."""
    admin = admin_client(opts)
    stats = _ask(f"internalStats of {partition}", admin.topic_internal_stats, partition)
    try:
        return [(int(led["ledgerId"]), int(led["entries"])) for led in stats["ledgers"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise AdminRequestError(f"internalStats of {partition}: no usable ledgers[]") from exc


def topic_ledger_infos(opts: SourceOptions, partition: str) -> list[LedgerInfo]:
    """One partition's ledgers with their offload state, from ``internal-info``. Raises
    AdminRequestError."""
    admin = admin_client(opts)
    what = f"internal-info of {partition}"
    info = _ask(what, admin.get, topic_path(partition, "internal-info"))
    try:
        return parse_internal_info(info)
    except InternalInfoError as exc:
        raise AdminRequestError(f"{what}: {exc}") from exc


def deduplication_enabled(opts: SourceOptions, topic: str) -> bool | None:
    """Whether the broker deduplicates what is written to ``topic`` (broker flag, namespace
    or topic policy, as the topic stats' ``deduplicationStatus`` reports it; a partitioned
    topic is judged by its partition 0). ``None`` when the topic does not exist yet."""
    admin = admin_client(opts)
    partitions = _ask(f"partitions of {topic}", admin.partitions, topic)
    target = f"{topic}-partition-0" if partitions > 0 else topic
    try:
        stats = _ask(f"stats of {target}", admin.topic_stats, target)
    except AdminRequestError as exc:
        if exc.status == 404:
            return None
        raise
    return bool(stats.get("deduplicationStatus") == "Enabled")
