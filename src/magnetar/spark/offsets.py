"""Per-partition positions and the offsets Spark checkpoints (sans-IO).

A :class:`Position` is ``(ledger_id, entry_id, batch_index)``: one message of a partition
(``batch_index`` -1 stands for the whole entry, i.e. its last message). A streaming offset
maps each partition's full name to the position of the **last message already read**; a
micro-batch reads the messages after its start offset up to and including its end offset.
``EARLIEST`` (``-1:-1:-1``) is "before the first message".

Spark stores offsets as JSON; they are ``{"<partition name>": "<ledger>:<entry>:<batch>"}``
so a checkpoint's offsets can be read and edited by people.

User-given offsets (``starting_offsets`` / ``ending_offsets``) are ``earliest``, ``latest``
or JSON mapping partition names to ``"earliest"``, ``"latest"``, ``[ledger, entry]``,
``[ledger, entry, batch]`` or ``"ledger:entry[:batch]"``. Malformed input raises
:class:`OffsetsError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.common.errors import InvalidTopicName, MagnetarError
from magnetar.common.names import TopicName


class OffsetsError(MagnetarError):
    """Malformed or inconsistent offsets given by the user."""


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A message position in one partition; ordered as the broker orders messages, where
    ``batch_index`` -1 (the whole entry) sorts after every message of that entry."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    @property
    def entry(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)

    def is_earliest(self) -> bool:
        return self.ledger_id < 0

    def encode(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    @classmethod
    def decode(cls, text: str) -> Position:
        """``"ledger:entry[:batch]"``; raises OffsetsError."""
        try:
            parts = [int(p) for p in text.split(":")]
        except ValueError as exc:
            raise OffsetsError(f"bad position {text!r}: expected ledger:entry[:batch]") from exc
        if len(parts) not in (2, 3):
            raise OffsetsError(f"bad position {text!r}: expected ledger:entry[:batch]")
        return cls(*parts)

    def sort_key(self) -> tuple[int, int, int]:
        # -1 (whole entry) means "through the last message of the entry".
        b = self.batch_index
        return (self.ledger_id, self.entry_id, 1 << 31 if b < 0 else b)

    def after(self, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """Whether this position (a start, exclusive) comes before the given message."""
        if self.ledger_id < 0:
            return True
        if (ledger_id, entry_id) != self.entry:
            return (ledger_id, entry_id) > self.entry
        return self.batch_index >= 0 and batch_index > self.batch_index

    def covers(self, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """Whether the given message is at or before this position (an end, inclusive)."""
        if (ledger_id, entry_id) != self.entry:
            return (ledger_id, entry_id) < self.entry
        return self.batch_index < 0 or batch_index <= self.batch_index


EARLIEST = Position(-1, -1, -1)

Offsets = dict[str, Position]
"""Partition full name -> last message read."""


def encode_offsets(offsets: Offsets) -> dict[str, str]:
    """The JSON-ready form Spark checkpoints (keys sorted for stable comparison)."""
    return {name: offsets[name].encode() for name in sorted(offsets)}


def decode_offsets(raw: dict[str, Any]) -> Offsets:
    """Inverse of :func:`encode_offsets`; raises OffsetsError."""
    if not isinstance(raw, dict):
        raise OffsetsError(f"offsets must be a JSON object, got {type(raw).__name__}")
    return {str(name): Position.decode(str(value)) for name, value in raw.items()}


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """What the user asked for: ``earliest``/``latest`` for every partition (``default``),
    with explicit positions (or per-partition ``earliest``/``latest``) for some."""

    default: str
    explicit: dict[str, Position | str]

    def resolve(self, partition: str, last: Position) -> Position:
        """The position for ``partition`` whose last message is ``last``."""
        choice = self.explicit.get(partition, self.default)
        if isinstance(choice, Position):
            return choice
        return EARLIEST if choice == "earliest" else last


def parse_offset_spec(text: str | None, default: str) -> OffsetSpec:
    """Parse a ``starting_offsets`` / ``ending_offsets`` option. Raises OffsetsError."""
    if text is None or not text.strip():
        return OffsetSpec(default, {})
    text = text.strip()
    if text in ("earliest", "latest"):
        return OffsetSpec(text, {})
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetsError(
            f"offsets must be 'earliest', 'latest' or a JSON object of partition -> "
            f"message id; could not parse {text!r}: {exc}"
        ) from exc
    if not isinstance(raw, dict) or not raw:
        raise OffsetsError(f"offsets JSON must be a non-empty object, got {text!r}")
    explicit: dict[str, Position | str] = {}
    for name, value in raw.items():
        explicit[_full_partition_name(str(name))] = _parse_one(name, value)
    return OffsetSpec(default, explicit)


def _full_partition_name(name: str) -> str:
    try:
        return TopicName.parse(name).full_name
    except InvalidTopicName as exc:
        raise OffsetsError(f"invalid topic name in offsets: {exc}") from None


def _parse_one(name: str, value: Any) -> Position | str:
    if value in ("earliest", "latest"):
        return str(value)
    if isinstance(value, str):
        return Position.decode(value)
    if (
        isinstance(value, list)
        and len(value) in (2, 3)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return Position(*value)
    if isinstance(value, dict):
        try:
            return Position(int(value["ledger"]), int(value["entry"]), int(value.get("batch", -1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise OffsetsError(f"bad message id for {name!r}: {value!r}") from exc
    raise OffsetsError(
        f"bad message id for {name!r}: {value!r} (use 'earliest', 'latest', "
        f"[ledger, entry], [ledger, entry, batch] or 'ledger:entry:batch')"
    )


def crosses_ledgers(start: Position, last: Position) -> bool:
    """Whether the range after ``start`` through ``last`` may span more than one ledger
    (so capping it needs the ledger list)."""
    return start.ledger_id != last.ledger_id


def cap_end(
    start: Position,
    last: Position,
    entries_max: int | None,
    ledgers: Sequence[tuple[int, int]] | None = None,
) -> Position:
    """The end of the next range of one partition after ``start`` given its ``last``
    message, admitting at most ``entries_max`` entries (``None``: no cap).

    Inside one ledger entry ids are contiguous, so the cap is arithmetic. A range that
    crosses ledgers needs ``ledgers`` -- ``(ledger id, entries)`` oldest first, as the
    admin API's internal stats list them, fetched *after* ``last`` -- since ledger ids are
    not contiguous; ledgers listed with no entries are skipped, ledgers before ``start``'s
    (trimmed or not) are not counted. Without it such a range raises ValueError.

    A ``start`` inside an entry (batch index >= 0) counts that entry again: its remaining
    messages are read. If the ledger list does not reach ``last`` (stale), the end stays
    within what it lists; if it lists nothing after ``start``, the end is ``start``."""
    if last.sort_key() <= start.sort_key() or last.entry_id < 0:
        return start
    if entries_max is None:
        return last
    first_entry = start.entry_id if start.batch_index >= 0 else start.entry_id + 1
    if not crosses_ledgers(start, last):
        end_entry = first_entry + entries_max - 1
        return Position(last.ledger_id, end_entry, -1) if end_entry < last.entry_id else last
    if ledgers is None:
        raise ValueError("capping a range across ledgers needs the ledger list")
    budget = entries_max
    end = start
    for ledger_id, entries in sorted(ledgers):
        if ledger_id < start.ledger_id or ledger_id > last.ledger_id:
            continue
        begin = first_entry if ledger_id == start.ledger_id else 0
        stop = last.entry_id if ledger_id == last.ledger_id else entries - 1
        count = stop - begin + 1
        if count <= 0:
            continue
        if count >= budget:
            if ledger_id == last.ledger_id and begin + budget - 1 >= last.entry_id:
                return last
            return Position(ledger_id, begin + budget - 1, -1)
        budget -= count
        end = last if ledger_id == last.ledger_id else Position(ledger_id, stop, -1)
    return end
