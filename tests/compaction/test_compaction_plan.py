"""The sans-IO compaction core against a naive model: one message per key (the latest),
tombstones and keyless messages gone, log order kept, batches rebuilt from survivors;
compacting in two rounds (the first round's output, then the rest) equals one round."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.compactor import CompactionPlan
from magnetar.managed_ledger.position import Position
from magnetar.protocol import CompressionType

from .messages import Msg, batch_entry, open_entry, single_entry

KEYS = [None, "a", "b", "c", "d", "e"]
CODECS = [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD,
          CompressionType.SNAPPY]  # fmt: skip

msgs = st.builds(
    Msg,
    st.sampled_from(KEYS),
    st.one_of(st.just(b""), st.binary(min_size=1, max_size=20)),
    st.sampled_from([False, False, False, True]),  # null_value: a tombstone with a payload
)
entries = st.lists(
    st.tuples(st.booleans(), st.sampled_from(CODECS), st.lists(msgs, min_size=1, max_size=6)),
    min_size=1,
    max_size=30,
)

Log = list[tuple[Position, bytes]]


def build_log(spec: list[tuple[bool, CompressionType, list[Msg]]]) -> tuple[Log, list[Msg]]:
    log: Log = []
    flat: list[Msg] = []
    for i, (batched, codec, ms) in enumerate(spec):
        pos = Position(3 + i // 7, i % 7)  # several ledgers
        if batched:
            log.append((pos, batch_entry(ms, codec)))
            flat.extend(ms)
        else:
            log.append((pos, single_entry(ms[0], codec)))
            flat.append(ms[0])
    return log, flat


def compact(log: Log) -> Log:
    plan = CompactionPlan()
    for pos, data in log:
        plan.observe(pos, data)
    out: Log = []
    for pos, data in log:
        kept = plan.retain(pos, data)
        if kept is not None:
            out.append((pos, kept))
    return out


def expected(flat: list[Msg]) -> list[Msg]:
    latest: dict[str, int] = {}
    for i, m in enumerate(flat):
        if m.key is None:
            continue
        if m.tombstone:
            latest.pop(m.key, None)
        else:
            latest[m.key] = i
    keep = set(latest.values())
    return [m for i, m in enumerate(flat) if i in keep]


def delivered(log: Log) -> list[Msg]:
    return [m for _, data in log for m in open_entry(data)]


@settings(max_examples=150, deadline=None)
@given(entries)
def test_one_message_per_key_latest_wins(
    spec: list[tuple[bool, CompressionType, list[Msg]]],
) -> None:
    log, flat = build_log(spec)
    out = compact(log)
    assert delivered(out) == expected(flat)
    positions = [p for p, _ in out]
    assert positions == sorted(positions)
    keys = [m.key for m in delivered(out)]
    assert len(keys) == len(set(keys))


@settings(max_examples=100, deadline=None)
@given(entries, st.integers(min_value=0, max_value=30))
def test_incremental_compaction_equals_one_pass(
    spec: list[tuple[bool, CompressionType, list[Msg]]], split: int
) -> None:
    log, flat = build_log(spec)
    split = min(split, len(log))
    first = compact(log[:split])
    again = compact(first + log[split:])
    assert delivered(again) == expected(flat)
    assert again == compact(log)


def test_unchanged_entries_are_kept_byte_for_byte() -> None:
    a = single_entry(Msg("a", b"1"))
    b = batch_entry([Msg("b", b"2"), Msg("c", b"3")], CompressionType.LZ4)
    log = [(Position(1, 0), a), (Position(1, 1), b)]
    assert compact(log) == log


def test_tombstones_by_empty_payload_and_null_value() -> None:
    log = [
        (Position(1, 0), single_entry(Msg("a", b"1"))),
        (Position(1, 1), single_entry(Msg("b", b"2"))),
        (Position(1, 2), single_entry(Msg("a", b""))),
        (Position(1, 3), batch_entry([Msg("b", b"x", null_value=True), Msg("c", b"3")])),
    ]
    assert delivered(compact(log)) == [Msg("c", b"3")]


def test_unparsable_entries_are_kept_whole() -> None:
    log = [(Position(1, 0), b"\x00\x00"), (Position(1, 1), single_entry(Msg("a", b"1")))]
    assert compact(log) == log


def test_keyless_messages_are_dropped_unless_retained() -> None:
    log = [(Position(1, 0), single_entry(Msg(None, b"1")))]
    assert compact(log) == []
    plan = CompactionPlan(retain_null_key=True)
    plan.observe(*log[0])
    assert plan.retain(*log[0]) == log[0][1]
