"""Trimming decisions: which ledgers no cursor and no retention policy still needs. Sans-IO.

A ledger may be deleted when (1) it is not the current (last) ledger, (2) every durable
cursor's mark-delete position is at or past its last entry, and (3) the retention policy
lets it go: its age (since it was closed) exceeds ``retention_time_ms`` OR the retained size
without it still exceeds ``retention_size_bytes``. ``-1`` disables a limit (keep forever);
``0`` keeps nothing that is consumed. Ledgers are considered oldest first and trimming stops
at the first one that must stay, so the log remains a contiguous suffix.
"""

from __future__ import annotations

from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position


def ledgers_to_trim(
    ledgers: LedgerList,
    slowest_mark_delete: Position | None,
    now_ms: int,
    retention_time_ms: int,
    retention_size_bytes: int,
) -> list[int]:
    """Ids of the ledgers to delete, oldest first. ``slowest_mark_delete`` is the smallest
    mark-delete position among durable cursors (``None``: no durable cursor)."""
    segments = ledgers.segments
    if len(segments) <= 1 or (retention_time_ms < 0 and retention_size_bytes < 0):
        return []
    total_size = ledgers.total_size_bytes
    size_deleted = 0
    out: list[int] = []
    for s in segments[:-1]:
        consumed = slowest_mark_delete is None or slowest_mark_delete >= Position(
            s.ledger_id, s.entries - 1
        )
        if not consumed:
            break
        age_ms = now_ms - (s.closed_ms if s.closed_ms is not None else s.created_ms)
        expired = retention_time_ms >= 0 and age_ms >= retention_time_ms
        over_size = retention_size_bytes >= 0 and total_size - size_deleted > retention_size_bytes
        if not (expired or over_size or s.entries == 0):
            break
        out.append(s.ledger_id)
        size_deleted += s.size_bytes
    return out


def keeps_nothing_consumed(retention_time_ms: int, retention_size_bytes: int) -> bool:
    """Whether the retention policy lets every consumed ledger go as soon as it is closed
    (a time or size limit of 0). With no durable cursor every entry counts as consumed, so
    under such a policy a topic without a subscription loses its messages at the next
    rollover, restart or failover (Pulsar's rule)."""
    return retention_time_ms == 0 or retention_size_bytes == 0


def ledgers_expired_by_ttl(ledgers: LedgerList, now_ms: int, ttl_ms: int) -> Position | None:
    """The last entry of the newest ledger whose every entry is older than the TTL (its last
    append was more than ``ttl_ms`` ago); cursors behind it move past it. Granularity is
    one ledger: entries are opaque, so their own publish times are not consulted."""
    if ttl_ms < 0:
        return None
    target: Position | None = None
    for s in ledgers.segments:
        if s.entries == 0:
            continue
        if now_ms - s.last_add_ms < ttl_ms:
            break
        target = Position(s.ledger_id, s.entries - 1)
    return target
