"""The maintenance planner's decisions, from plain ledger lists and cursor states (no
storage, no clock but the ``now_ms`` given)."""

from __future__ import annotations

from dataclasses import replace

from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import CursorState
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.maintenance import (
    backlog_quota_on,
    eviction_step,
    inactive_too_long,
    ledgers_to_delete,
    over_backlog_quota,
    rollover_due,
    ttl_search_start,
    ttl_target,
)
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.retention import keeps_nothing_consumed

CONFIG = ManagedLedgerConfig(
    ledger_entries_max=100,
    ledger_size_max_bytes=10_000,
    ledger_age_min_ms=1_000,
    ledger_age_max_ms=60_000,
    ledger_inactive_rollover_ms=5_000,
)


def log_of(*segments: LedgerSegment) -> LedgerList:
    return LedgerList(segments)


def closed(ledger_id: int, entries: int, last_add_ms: int, size: int = 0) -> LedgerSegment:
    return LedgerSegment(
        ledger_id,
        entries=entries,
        size_bytes=size or entries * 10,
        messages=entries,
        created_ms=0,
        closed_ms=last_add_ms,
        last_add_ms=last_add_ms,
    )


def test_rollover_by_entries_and_size_waits_for_the_minimum_age() -> None:
    full = LedgerSegment(1, entries=100, size_bytes=500, messages=100, created_ms=0)
    assert not rollover_due(full, 999, CONFIG)
    assert rollover_due(full, 1_000, CONFIG)
    big = replace(full, entries=3, messages=3, size_bytes=10_000)
    assert rollover_due(big, 1_000, CONFIG)
    assert not rollover_due(replace(full, entries=99, messages=99), 50_000, CONFIG)
    assert not rollover_due(None, 1_000, CONFIG)


def test_rollover_by_age_needs_an_entry() -> None:
    young = LedgerSegment(1, entries=1, size_bytes=1, messages=1, created_ms=0)
    assert not rollover_due(young, 59_999, CONFIG)
    assert rollover_due(young, 60_000, CONFIG)
    assert not rollover_due(LedgerSegment(1, created_ms=0), 600_000, CONFIG)
    assert not rollover_due(young, 600_000, replace(CONFIG, ledger_age_max_ms=0))


def test_an_inactive_ledger_rolls_only_if_it_holds_entries() -> None:
    used = LedgerSegment(1, entries=2, size_bytes=2, messages=2, last_add_ms=10_000)
    assert not inactive_too_long(used, 14_999, CONFIG)
    assert inactive_too_long(used, 15_000, CONFIG)
    assert not inactive_too_long(LedgerSegment(1, last_add_ms=0), 60_000, CONFIG)
    assert not inactive_too_long(used, 60_000, replace(CONFIG, ledger_inactive_rollover_ms=0))


def test_ttl_searches_after_the_slowest_cursor_or_the_expired_ledgers() -> None:
    marks = [Position(3, 4), Position(2, 9), Position(3, 0)]
    assert ttl_search_start(None, marks) == Position(2, 9)
    assert ttl_search_start(Position(2, 5), marks) == Position(2, 9)
    assert ttl_search_start(Position(3, 7), marks) == Position(3, 7)


def test_ttl_target_moves_forward_only() -> None:
    ledgers = log_of(closed(1, 10, 100), LedgerSegment(2, entries=5, messages=5, created_ms=0))
    after = Position(1, 3)
    # the first entry not expired is (2, 2): everything up to (2, 1) expired
    assert ttl_target(ledgers, None, after, Position(2, 2)) == Position(2, 1)
    assert ttl_target(ledgers, Position(1, 9), after, Position(2, 0)) == Position(1, 9)
    # nothing kept after the search start: the whole log expired
    assert ttl_target(ledgers, None, after, None) == Position(2, 4)
    # the first kept entry is right after the start: nothing new expired
    assert ttl_target(ledgers, None, after, Position(1, 4)) is None


def test_backlog_quota_by_size_and_by_age() -> None:
    ledgers = log_of(closed(1, 10, 1_000, size=1_000), closed(2, 10, 5_000, size=1_000))
    cursor = CursorState("c", ledgers, Position(1, -1))
    by_size = replace(CONFIG, backlog_quota_size_bytes=1_500)
    assert backlog_quota_on(by_size)
    assert over_backlog_quota(cursor, ledgers, 0, by_size)
    cursor.ack_cumulative(Position(1, 4))  # 1 500 bytes left
    assert not over_backlog_quota(cursor, ledgers, 0, by_size)
    by_age = replace(CONFIG, backlog_quota_time_ms=2_000)
    assert not over_backlog_quota(cursor, ledgers, 3_000, by_age)
    assert over_backlog_quota(cursor, ledgers, 3_001, by_age)
    assert not backlog_quota_on(CONFIG)
    assert not over_backlog_quota(cursor, ledgers, 10**9, CONFIG)


def test_eviction_skips_whole_ledgers_but_never_the_current_one() -> None:
    current = LedgerSegment(3, entries=4, messages=4, created_ms=0)
    ledgers = log_of(closed(1, 10, 1_000), closed(2, 10, 2_000), current)
    cursor = CursorState("c", ledgers, Position(1, 2))
    assert eviction_step(cursor, ledgers) == Position(1, 9)
    cursor.ack_cumulative(Position(1, 9))
    assert eviction_step(cursor, ledgers) == Position(2, 9)
    cursor.ack_cumulative(Position(2, 9))
    assert eviction_step(cursor, ledgers) is None


def test_trimming_follows_the_slowest_durable_cursor_and_retention() -> None:
    ledgers = log_of(closed(1, 10, 1_000), closed(2, 10, 2_000), closed(3, 10, 3_000))
    none_kept = replace(CONFIG, retention_time_ms=0, retention_size_bytes=0)
    assert ledgers_to_delete(ledgers, [Position(2, 9), Position(1, 9)], 10_000, none_kept) == [1]
    assert ledgers_to_delete(ledgers, [Position(2, 9)], 10_000, none_kept) == [1, 2]
    # no durable cursor: everything but the current ledger counts as consumed
    assert ledgers_to_delete(ledgers, [], 10_000, none_kept) == [1, 2]
    kept = replace(CONFIG, retention_time_ms=-1, retention_size_bytes=-1)
    assert ledgers_to_delete(ledgers, [], 10_000, kept) == []
    by_time = replace(CONFIG, retention_time_ms=8_500, retention_size_bytes=-1)
    assert ledgers_to_delete(ledgers, [], 10_000, by_time) == [1]


def test_which_retention_keeps_nothing_consumed() -> None:
    assert keeps_nothing_consumed(0, 0)
    assert keeps_nothing_consumed(0, -1)
    assert keeps_nothing_consumed(-1, 0)
    assert keeps_nothing_consumed(60_000, 0)
    assert not keeps_nothing_consumed(-1, -1)
    assert not keeps_nothing_consumed(60_000, 1024)
