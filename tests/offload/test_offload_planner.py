"""The maintenance planner's offload rules, pure: which closed ledgers move, when bookie
copies go, the retry backoff."""

from __future__ import annotations

from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.ledger_list import LedgerList, LedgerSegment
from magnetar.managed_ledger.maintenance import (
    OFFLOAD_RETRY_DELAY_MAX_MS,
    bookie_copies_to_delete,
    ledgers_to_offload,
    offload_retry_delay_ms,
)
from magnetar.managed_ledger.offload import OffloadContext
from magnetar.managed_ledger.position import Position

NOW = 1_000_000


def _log(*sizes: int, offloaded: int = 0) -> LedgerList:
    """Closed ledgers 1..n of ``sizes`` (the first ``offloaded`` of them offloaded at NOW - 10),
    then the open ledger 99 of 100 bytes."""
    segments = [
        LedgerSegment(i + 1, entries=1, size_bytes=size, closed_ms=NOW - 1000 * (len(sizes) - i))
        for i, size in enumerate(sizes)
    ]
    for seg in segments[:offloaded]:
        seg.offload = OffloadContext("u", complete=True, timestamp_ms=NOW - 10)
    segments.append(LedgerSegment(99, entries=1, size_bytes=100))
    return LedgerList(segments)


def test_nothing_moves_while_both_thresholds_are_off() -> None:
    assert ledgers_to_offload(_log(500, 500), NOW, ManagedLedgerConfig(), None) == []


def test_the_size_threshold_moves_the_oldest_until_the_rest_fits() -> None:
    config = ManagedLedgerConfig(offload_threshold_bytes=700)
    # 500 + 300 + 200 + 100 (open) = 1100 on bookies: the oldest (500) brings it to 600
    assert ledgers_to_offload(_log(500, 300, 200), NOW, config, None) == [1]
    zero = ManagedLedgerConfig(offload_threshold_bytes=0)
    assert ledgers_to_offload(_log(500, 300, 200), NOW, zero, None) == [1, 2, 3]
    assert ledgers_to_offload(_log(500, 300, 200, offloaded=2), NOW, zero, None) == [3]


def test_the_age_threshold_moves_ledgers_closed_long_enough_ago() -> None:
    config = ManagedLedgerConfig(offload_threshold_ms=2000)
    assert ledgers_to_offload(_log(1, 1, 1), NOW, config, None) == [1, 2]


def test_a_manual_request_moves_the_closed_ledgers_before_its_ledger() -> None:
    log = _log(1, 1, 1)
    assert ledgers_to_offload(log, NOW, ManagedLedgerConfig(), Position(3, 0)) == [1, 2]
    assert ledgers_to_offload(log, NOW, ManagedLedgerConfig(), Position(99, 5)) == [1, 2, 3]


def test_bookie_copies_go_once_the_lag_has_passed_after_completion() -> None:
    log = _log(1, 1, 1, offloaded=2)
    assert bookie_copies_to_delete(log, NOW, ManagedLedgerConfig(offload_deletion_lag_ms=0)) == [
        1,
        2,
    ]
    assert bookie_copies_to_delete(log, NOW, ManagedLedgerConfig(offload_deletion_lag_ms=11)) == []
    log.segments[0].offload = OffloadContext("u", complete=False)  # an unfinished attempt
    assert bookie_copies_to_delete(log, NOW, ManagedLedgerConfig(offload_deletion_lag_ms=0)) == [2]


def test_retries_back_off_doubling_up_to_a_minute() -> None:
    assert [offload_retry_delay_ms(n) for n in range(5)] == [0, 1000, 2000, 4000, 8000]
    assert offload_retry_delay_ms(50) == OFFLOAD_RETRY_DELAY_MAX_MS
