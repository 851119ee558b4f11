"""Which parts of a partition's range a batch read takes straight from the object store (sans-IO).

The driver asks one partition's ``GET …/internal-info`` (Pulsar's ``ManagedLedgerInfo``:
``ledgerInfo[]`` with ``ledgerId``, ``entries``, ``size`` and, once offloaded, an
``offloadContext`` with the attempt's ``uuid`` and ``complete``) and splits the range
``(start, end]`` into consecutive :class:`Segment` s:

* each ledger whose offload is complete becomes one segment read by an executor from the
  object store (several for a ledger larger than ``split_bytes``, split by entry ranges of
  about that many bytes), without the broker;
* each run of other ledgers (not offloaded, offload incomplete, the open ledger, or ledgers
  the list does not show yet) becomes one segment read through the broker.

Segments cover the range exactly, in order: segment ``k + 1`` holds the messages after
segment ``k``'s end. The first keeps the range's own start (so its data-loss check is the
broker path's); a later segment starts "before entry ``f`` of its first ledger" (position
``(ledger, f - 1, -1)``), and a broker segment names that entry as where its reader opens.

A range whose start lies in a ledger the list no longer shows (trimmed) is one broker
segment: the broker path judges what is lost.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.spark.offsets import Position

SPLIT_BYTES_DEFAULT = 128 * 1024 * 1024
"""Bytes of an offloaded ledger per Spark partition (Spark's ``maxPartitionBytes``)."""


class InternalInfoError(ValueError):
    """An ``internal-info`` answer without a usable ``ledgerInfo[]``."""


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """One ledger of a topic as ``internal-info`` lists it."""

    ledger_id: int
    entries: int
    size_bytes: int
    offload_uuid: str | None = None
    """The uuid of the ledger's complete offload (None: not offloaded, or not complete)."""


@dataclass(frozen=True, slots=True)
class OffloadedEntries:
    """Entries ``first..last`` of an offloaded ledger, to read from the object store."""

    ledger_id: int
    uuid: str
    first_entry_id: int
    last_entry_id: int


@dataclass(frozen=True, slots=True)
class Segment:
    """Messages after ``start`` through ``end``; read from ``offloaded`` when set, else
    through the broker, with its reader opened at ``open_at`` (``(ledger, entry)``,
    inclusive) when set, else as the broker path opens it at ``start``."""

    start: Position
    end: Position
    offloaded: OffloadedEntries | None = None
    open_at: tuple[int, int] | None = None


def _uuid_of(context: Mapping[str, Any]) -> str | None:
    text = context.get("uuid")
    if isinstance(text, str) and text:
        return text
    msb, lsb = context.get("uidMsb"), context.get("uidLsb")
    if isinstance(msb, int) and isinstance(lsb, int) and (msb or lsb):
        mask = (1 << 64) - 1
        return str(uuid_module.UUID(int=((msb & mask) << 64) | (lsb & mask)))
    return None


def parse_internal_info(info: Any) -> list[LedgerInfo]:
    """The ledgers of an ``internal-info`` answer, by ledger id. Raises InternalInfoError."""
    try:
        raw = info["ledgerInfo"]
        out = []
        for led in raw:
            context = led.get("offloadContext") or {}
            complete = bool(context.get("complete"))
            out.append(
                LedgerInfo(
                    int(led["ledgerId"]),
                    int(led.get("entries") or 0),
                    int(led.get("size") or 0),
                    _uuid_of(context) if complete else None,
                )
            )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InternalInfoError(f"no usable ledgerInfo[] ({exc!r})") from None
    return sorted(out, key=lambda x: x.ledger_id)


def _entry_splits(first: int, last: int, ledger: LedgerInfo, split_bytes: int) -> list[int]:
    """First entry ids of the pieces of ``first..last`` of about ``split_bytes`` each."""
    count = last - first + 1
    per_entry = ledger.size_bytes / ledger.entries if ledger.entries > 0 else 0
    step = count if per_entry <= 0 else max(1, int(split_bytes // per_entry))
    return list(range(first, last + 1, step))


def plan_segments(
    start: Position,
    end: Position,
    ledgers: Sequence[LedgerInfo],
    split_bytes: int = SPLIT_BYTES_DEFAULT,
) -> list[Segment]:
    """The segments of ``(start, end]`` (``end`` a message that exists: ``entry_id >= 0``).
    ``ledgers`` by ledger id, fetched after ``end`` was; ``split_bytes`` > 0."""
    if end.sort_key() <= start.sort_key() or end.entry_id < 0:
        return []
    whole = [Segment(start, end)]
    known = {led.ledger_id: led for led in ledgers}
    if not start.is_earliest() and start.ledger_id not in known:
        return whole
    in_range = [
        led
        for led in ledgers
        if (start.is_earliest() or led.ledger_id >= start.ledger_id)
        and led.ledger_id <= end.ledger_id
    ]
    if not any(led.offload_uuid for led in in_range):
        return whole
    if end.ledger_id not in known:
        in_range.append(LedgerInfo(end.ledger_id, end.entry_id + 1, 0))

    segments: list[Segment] = []
    broker_from: tuple[int, int] | None = None  # (ledger, first entry) of a broker run
    broker_to: Position | None = None

    def seg_start(ledger_id: int, first: int) -> Position:
        return start if not segments and broker_from is None else Position(ledger_id, first - 1)

    def close_broker_run() -> None:
        nonlocal broker_from, broker_to
        if broker_from is None or broker_to is None:
            return
        first_seg = not segments
        s = start if first_seg else Position(broker_from[0], broker_from[1] - 1)
        segments.append(Segment(s, broker_to, None, None if first_seg else broker_from))
        broker_from = broker_to = None

    for led in in_range:
        is_last = led.ledger_id == end.ledger_id
        # Read from the start's own entry (the data-loss check looks at it), as the broker does.
        first = max(start.entry_id, 0) if led.ledger_id == start.ledger_id else 0
        last = end.entry_id if is_last else led.entries - 1
        if led.offload_uuid is not None:
            last = min(last, led.entries - 1)
        if last < first:
            continue
        seg_end = end if is_last else Position(led.ledger_id, last)
        if led.offload_uuid is None:
            if broker_from is None:
                broker_from = (led.ledger_id, first)
            broker_to = seg_end
            continue
        close_broker_run()
        pieces = _entry_splits(first, last, led, split_bytes)
        for i, piece_first in enumerate(pieces):
            piece_last = pieces[i + 1] - 1 if i + 1 < len(pieces) else last
            s = seg_start(led.ledger_id, piece_first)
            read_first = max(s.entry_id, 0) if s.ledger_id == led.ledger_id else piece_first
            e = seg_end if piece_last == last else Position(led.ledger_id, piece_last)
            ref = OffloadedEntries(led.ledger_id, led.offload_uuid, read_first, piece_last)
            segments.append(Segment(s, e, ref))
    close_broker_run()
    return [s for s in segments if s.end.sort_key() > s.start.sort_key()]
