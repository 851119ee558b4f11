"""Planning a batch read over offloaded and not-offloaded ledgers (pure)."""

from __future__ import annotations

import pytest

from magnetar.offload.settings import OffloadDriverConfig
from magnetar.spark.offload_plan import (
    InternalInfoError,
    LedgerInfo,
    OffloadedEntries,
    Segment,
    parse_internal_info,
    plan_segments,
)
from magnetar.spark.offsets import EARLIEST, Position
from magnetar.spark.options import OptionsError, parse_options


def _info(ledgers: list[dict[str, object]]) -> dict[str, object]:
    return {"ledgerInfo": ledgers, "cursors": {}}


def test_internal_info_gives_complete_offloads_only() -> None:
    info = _info(
        [
            {"ledgerId": 7, "entries": 10, "size": 1000, "timestamp": 1},
            {
                "ledgerId": 3,
                "entries": 5,
                "size": 500,
                "offloadContext": {"uuid": "u-3", "complete": True, "bookkeeperDeleted": True},
            },
            {"ledgerId": 5, "entries": 4, "size": 40, "offloadContext": {"complete": False}},
            {
                "ledgerId": 9,
                "entries": 2,
                "size": 20,
                "offloadContext": {"uidMsb": 1, "uidLsb": -1, "complete": True},
            },
        ]
    )
    assert parse_internal_info(info) == [
        LedgerInfo(3, 5, 500, "u-3"),
        LedgerInfo(5, 4, 40, None),
        LedgerInfo(7, 10, 1000, None),
        LedgerInfo(9, 2, 20, "00000000-0000-0001-ffff-ffffffffffff"),
    ]
    with pytest.raises(InternalInfoError):
        parse_internal_info({"cursors": {}})


def test_without_offloaded_ledgers_the_range_is_one_broker_segment() -> None:
    ledgers = [LedgerInfo(1, 10, 100), LedgerInfo(2, 0, 0)]
    end = Position(2, 4)
    assert plan_segments(EARLIEST, end, ledgers) == [Segment(EARLIEST, end)]


def test_offloaded_ledgers_are_direct_segments_and_the_rest_one_broker_run() -> None:
    ledgers = [
        LedgerInfo(1, 10, 100, "a"),
        LedgerInfo(2, 0, 0, "z"),  # empty: nothing to read
        LedgerInfo(3, 5, 50, "b"),
        LedgerInfo(4, 6, 60),
        LedgerInfo(6, 2, 20),
        LedgerInfo(8, 0, 0),  # the open ledger, entries not yet counted
    ]
    end = Position(8, 3)
    assert plan_segments(EARLIEST, end, ledgers) == [
        Segment(EARLIEST, Position(1, 9), OffloadedEntries(1, "a", 0, 9)),
        Segment(Position(3, -1), Position(3, 4), OffloadedEntries(3, "b", 0, 4)),
        Segment(Position(4, -1), end, None, (4, 0)),
    ]


def test_a_start_inside_an_offloaded_ledger_is_read_from_its_own_entry() -> None:
    ledgers = [LedgerInfo(1, 10, 100, "a"), LedgerInfo(2, 10, 100, "b"), LedgerInfo(3, 3, 30)]
    start = Position(1, 4, 2)
    end = Position(2, 5)
    assert plan_segments(start, end, ledgers) == [
        Segment(start, Position(1, 9), OffloadedEntries(1, "a", 4, 9)),
        Segment(Position(2, -1), end, OffloadedEntries(2, "b", 0, 5)),
    ]


def test_a_broker_run_between_offloaded_ledgers_ends_with_its_last_ledger() -> None:
    ledgers = [LedgerInfo(1, 4, 40), LedgerInfo(2, 4, 40, "b"), LedgerInfo(3, 4, 40)]
    start = Position(1, 1)
    end = Position(3, 1)
    assert plan_segments(start, end, ledgers) == [
        Segment(start, Position(1, 3)),
        Segment(Position(2, -1), Position(2, 3), OffloadedEntries(2, "b", 0, 3)),
        Segment(Position(3, -1), end, None, (3, 0)),
    ]


def test_a_large_offloaded_ledger_is_split_by_entry_ranges() -> None:
    ledgers = [LedgerInfo(1, 10, 1000, "a")]  # 100 bytes an entry
    segments = plan_segments(EARLIEST, Position(1, 9), ledgers, split_bytes=400)
    assert segments == [
        Segment(EARLIEST, Position(1, 3), OffloadedEntries(1, "a", 0, 3)),
        # later pieces read the entry before theirs too (the data-loss check sees it exists)
        Segment(Position(1, 3), Position(1, 7), OffloadedEntries(1, "a", 3, 7)),
        Segment(Position(1, 7), Position(1, 9), OffloadedEntries(1, "a", 7, 9)),
    ]


def test_a_start_in_a_ledger_no_longer_listed_leaves_the_range_to_the_broker() -> None:
    ledgers = [LedgerInfo(5, 10, 100, "a")]
    start = Position(2, 3)
    end = Position(5, 9)
    assert plan_segments(start, end, ledgers) == [Segment(start, end)]


def test_an_end_past_the_list_is_read_through_the_broker() -> None:
    ledgers = [LedgerInfo(1, 3, 30, "a")]
    end = Position(4, 0)
    assert plan_segments(EARLIEST, end, ledgers) == [
        Segment(EARLIEST, Position(1, 2), OffloadedEntries(1, "a", 0, 2)),
        Segment(Position(4, -1), end, None, (4, 0)),
    ]


def test_segments_cover_exactly_the_range() -> None:
    """Every (ledger, entry) of the range is in exactly one segment, whatever the mix."""
    ledgers = [LedgerInfo(i, 7, 700, "u" if i % 3 else None) for i in range(1, 12)]
    for start in [EARLIEST, Position(1, 0), Position(2, 6), Position(4, 3, 1)]:
        for end in [Position(11, 6), Position(6, 0), Position(4, 3)]:
            segments = plan_segments(start, end, ledgers, split_bytes=250)
            for led in range(1, 12):
                for e in range(7):
                    for b in (0, 1):
                        want = start.after(led, e, b) and end.covers(led, e, b)
                        got = [
                            s
                            for s in segments
                            if s.start.after(led, e, b) and s.end.covers(led, e, b)
                        ]
                        assert len(got) == (1 if want else 0), (start, end, led, e, b)
                        if got and got[0].offloaded is not None:
                            ref = got[0].offloaded
                            assert ref.ledger_id == led
                            assert ref.first_entry_id <= e <= ref.last_entry_id


def test_offload_options_name_the_store_and_can_turn_direct_reads_off() -> None:
    base = {"service_url": "pulsar://h:6650", "topic": "t"}
    s3 = {"offload.driver": "aws-s3", "offload.bucket": "b", "offload.endpoint": "http://s3:9000"}
    opts = parse_options({**base, **s3, "offload.region": "eu-1", "offload.splitBytes": "1000"})
    assert opts.offload == OffloadDriverConfig(
        "aws-s3", bucket="b", region="eu-1", endpoint="http://s3:9000"
    )
    assert opts.offload_split_bytes == 1000
    assert parse_options({**base, **s3, "offload.directRead": "false"}).offload is None
    assert parse_options(base).offload is None
    with pytest.raises(OptionsError, match="needs a directory"):
        parse_options({**base, "offload.driver": "filesystem"})
    with pytest.raises(OptionsError, match="offload driver 'tape'"):
        parse_options({**base, "offload.driver": "tape"})
