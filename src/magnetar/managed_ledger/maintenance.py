"""The maintenance planner: what a round of background work should do. Sans-IO.

Inputs are the ledger list, cursor states, the time and the config; outputs are decisions
(roll over or not, how far message TTL moves cursors, which cursors are over their
backlog quota, which ledgers to delete). :class:`ManagedLedger.maintain` carries them out
(the reads of TTL's binary search, the metadata writes and deletions).

Rules:

* **Rollover** when the current ledger holds entries and is ``ledger_age_max_ms`` old; or,
  once it is ``ledger_age_min_ms`` old, when it reached ``ledger_entries_max`` entries or
  ``ledger_size_max_bytes`` bytes; or when it holds entries and took none for
  ``ledger_inactive_rollover_ms`` (an empty ledger never rolls for inactivity).
* **Message TTL**: whole ledgers last appended to more than ``message_ttl_ms`` ago expire
  (:func:`~magnetar.managed_ledger.retention.ledgers_expired_by_ttl`); a search by publish
  time from the slowest cursor (or past those ledgers) may move the target further, never
  back. Every cursor behind the target moves to it.
* **Backlog quota**: a durable cursor is over it when its backlog is larger than
  ``backlog_quota_size_bytes``, or its oldest unacknowledged entry is in a ledger last
  appended to more than ``backlog_quota_time_ms`` ago.
* **Trimming**: :func:`~magnetar.managed_ledger.retention.ledgers_to_trim` against the
  slowest durable cursor (non-durable cursors hold nothing back).
* **Offload** (tiered storage): closed ledgers not yet offloaded move, oldest first, while
  the bytes not offloaded exceed ``offload_threshold_bytes``, and those closed longer than
  ``offload_threshold_ms`` ago; a manual request moves the closed ledgers before a position.
  A failed attempt is retried after :func:`offload_retry_delay_ms`. A bookie copy is deleted
  ``offload_deletion_lag_ms`` after its offload completed.
"""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.retention import ledgers_to_trim


def rollover_due(current: LedgerSegment | None, now_ms: int, config: ManagedLedgerConfig) -> bool:
    """Whether the open ledger ``current`` should roll over by age, entries or size."""
    if current is None:
        return False
    age_ms = now_ms - current.created_ms
    if age_ms >= config.ledger_age_max_ms > 0 and current.entries > 0:
        return True
    if age_ms < config.ledger_age_min_ms:
        return False
    return (
        current.entries >= config.ledger_entries_max
        or current.size_bytes >= config.ledger_size_max_bytes
    )


def inactive_too_long(
    current: LedgerSegment | None, now_ms: int, config: ManagedLedgerConfig
) -> bool:
    """Whether the open ledger ``current`` holds entries and took none for
    ``ledger_inactive_rollover_ms`` (0 or less: never)."""
    inactive_ms = config.ledger_inactive_rollover_ms
    if current is None or inactive_ms <= 0 or current.entries <= 0:
        return False
    return now_ms - current.last_add_ms >= inactive_ms


def ttl_search_start(ledger_target: Position | None, mark_deletes: Iterable[Position]) -> Position:
    """Where TTL's search by publish time starts: after the slowest cursor, or after the
    whole ledgers that expired (``ledger_target``) when that is further. ``mark_deletes``
    must not be empty."""
    after = min(mark_deletes)
    if ledger_target is not None and ledger_target > after:
        return ledger_target
    return after


def ttl_target(
    ledgers: LedgerList,
    ledger_target: Position | None,
    after: Position,
    first_kept: Position | None,
) -> Position | None:
    """The last expired entry: ``ledger_target`` (whole ledgers), moved further when the
    search from ``after`` found ``first_kept`` (the first entry not expired; ``None``:
    every entry after ``after`` expired). ``None``: nothing expired."""
    newest = ledgers.last_confirmed if first_kept is None else ledgers.previous_position(first_kept)
    if newest > after and (ledger_target is None or newest > ledger_target):
        return newest
    return ledger_target


def over_backlog_quota(
    state: CursorState, ledgers: LedgerList, now_ms: int, config: ManagedLedgerConfig
) -> bool:
    """Whether a cursor's backlog is over the size or time quota (both off: never)."""
    limit = config.backlog_quota_size_bytes
    if limit >= 0 and ledgers.size_between(state.mark_delete, ledgers.last_confirmed) > limit:
        return True
    time_limit = config.backlog_quota_time_ms
    if time_limit >= 0:
        first = ledgers.get(state.first_unacked()[0])
        # every entry of a ledger last appended to at T is at least now - T old
        if first is not None and first.entries > 0:
            return now_ms - first.last_add_ms > time_limit
    return False


def backlog_quota_on(config: ManagedLedgerConfig) -> bool:
    return config.backlog_quota_size_bytes >= 0 or config.backlog_quota_time_ms >= 0


def eviction_step(state: CursorState, ledgers: LedgerList) -> Position | None:
    """Where an over-quota cursor evicting its backlog acknowledges up to next: the end of
    the ledger of its oldest unacknowledged entry; ``None`` when that is the current ledger
    (never evicted) or not in the log."""
    segment = ledgers.get(state.first_unacked()[0])
    if segment is None or segment is ledgers.last_segment:
        return None
    return Position(segment.ledger_id, segment.entries - 1)


def ledgers_to_delete(
    ledgers: LedgerList,
    durable_mark_deletes: Iterable[Position],
    now_ms: int,
    config: ManagedLedgerConfig,
) -> list[int]:
    """Ids of the ledgers trimming deletes, oldest first (see the module docstring)."""
    slowest = min(durable_mark_deletes, default=None)
    return ledgers_to_trim(
        ledgers, slowest, now_ms, config.retention_time_ms, config.retention_size_bytes
    )


OFFLOAD_RETRY_DELAY_MAX_MS = 60_000


def ledgers_to_offload(
    ledgers: LedgerList, now_ms: int, config: ManagedLedgerConfig, up_to: Position | None
) -> list[int]:
    """Ids of the closed, not yet offloaded ledgers to offload now, oldest first: those the
    thresholds pick (both off: none), and those before ``up_to``'s ledger (a manual request;
    None: none)."""
    closed = [s for s in ledgers if s.closed_ms is not None and not s.offloaded]
    picked: set[int] = set()
    if up_to is not None:
        picked.update(s.ledger_id for s in closed if s.ledger_id < up_to[0])
    limit = config.offload_threshold_bytes
    if limit >= 0:
        remaining = sum(s.size_bytes for s in ledgers if not s.offloaded)
        for seg in closed:
            if remaining <= limit:
                break
            picked.add(seg.ledger_id)
            remaining -= seg.size_bytes
    age_ms = config.offload_threshold_ms
    if age_ms >= 0:
        picked.update(
            s.ledger_id
            for s in closed
            if s.closed_ms is not None and now_ms - s.closed_ms >= age_ms
        )
    return [s.ledger_id for s in closed if s.ledger_id in picked]


def bookie_copies_to_delete(
    ledgers: LedgerList, now_ms: int, config: ManagedLedgerConfig
) -> list[int]:
    """Ids of the offloaded ledgers whose bookie copy is due for deletion: offload complete
    (durably: the caller records it before this sees it) ``offload_deletion_lag_ms`` ago."""
    return [
        s.ledger_id
        for s in ledgers
        if s.offload is not None
        and s.offload.complete
        and not s.offload.bookkeeper_deleted
        and now_ms - s.offload.timestamp_ms >= config.offload_deletion_lag_ms
    ]


def offload_retry_delay_ms(failures: int) -> int:
    """The wait before the next attempt after ``failures`` failed ones in a row: 1 s,
    doubling, at most :data:`OFFLOAD_RETRY_DELAY_MAX_MS`."""
    if failures <= 0:
        return 0
    delay_ms: int = 1000 << min(failures - 1, 16)
    return min(delay_ms, OFFLOAD_RETRY_DELAY_MAX_MS)
