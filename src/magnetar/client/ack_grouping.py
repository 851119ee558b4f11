"""Acknowledgement grouping, sans I/O: acks in, ACK commands out.

Individual acks are collected and sent together, every ``group_time_ms`` (the shell calls
:meth:`flush` on a timer) or as soon as ``group_max_size`` are pending; a cumulative ack
keeps only the highest position. For a message inside a batch:

* with ``batch_index_ack_enabled`` off (the official default) the entry is acked only once
  every message of the batch was acked, so the broker never sees partial batches;
* with it on, a partial ack is sent with ``ack_set`` (bit set = still unacked), which the
  broker ANDs into what it stores.

A cumulative ack on a message in the middle of a batch acks up to the previous entry (the
batch is redelivered later) unless batch-index acks are on.

:func:`ack_positions` says which positions acknowledging a message covers (every chunk of
a chunked message).
"""

from __future__ import annotations

from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.protocol import Ack, AckType
from magnetar.protocol import MessageId as WireMessageId


def _ack_set(remaining: int, batch_size: int) -> tuple[int, ...]:
    """Java ``BitSet.toLongArray()`` of the still-unacked indexes, as signed int64 words."""
    words = []
    for start in range(0, batch_size, 64):
        word = (remaining >> start) & 0xFFFFFFFFFFFFFFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    while words and words[-1] == 0:
        words.pop()
    return tuple(words)


class AckGroupingTracker:
    """Pending acks of one consumer. ``group_max_size`` bounds the pending individual acks."""

    def __init__(
        self,
        consumer_id: int,
        *,
        group_max_size: int = 1000,
        batch_index_ack_enabled: bool = False,
    ) -> None:
        self.consumer_id = consumer_id
        self.group_max_size = group_max_size
        self.batch_index_ack_enabled = batch_index_ack_enabled
        self._individual: dict[tuple[int, int], WireMessageId] = {}
        self._cumulative: WireMessageId | None = None
        # (ledger, entry) -> bit set of batch indexes not yet acked (bit i set = pending)
        self._batches: dict[tuple[int, int], int] = {}

    @property
    def pending(self) -> int:
        return len(self._individual) + (self._cumulative is not None)

    def add_individual(
        self, ledger_id: int, entry_id: int, batch_index: int = -1, batch_size: int = 0
    ) -> bool:
        """Record an individual ack. Returns True when the group is full (flush now)."""
        key = (ledger_id, entry_id)
        if batch_index >= 0 and batch_size > 1:
            remaining = self._batches.get(key)
            if remaining is None:
                remaining = (1 << batch_size) - 1
            remaining &= ~(1 << batch_index)
            if remaining:
                self._batches[key] = remaining
                if not self.batch_index_ack_enabled:
                    return False
                self._individual[key] = WireMessageId(
                    ledger_id, entry_id, ack_set=_ack_set(remaining, batch_size)
                )
                return len(self._individual) >= self.group_max_size
            self._batches.pop(key, None)
        self._individual[key] = WireMessageId(ledger_id, entry_id)
        return len(self._individual) >= self.group_max_size

    def add_cumulative(
        self, ledger_id: int, entry_id: int, batch_index: int = -1, batch_size: int = 0
    ) -> None:
        """Record a cumulative ack up to and including the position."""
        if batch_index >= 0 and batch_size > 1 and batch_index < batch_size - 1:
            if self.batch_index_ack_enabled:
                remaining = ((1 << batch_size) - 1) & ~((1 << (batch_index + 1)) - 1)
                target = WireMessageId(ledger_id, entry_id, ack_set=_ack_set(remaining, batch_size))
            else:
                target = WireMessageId(ledger_id, entry_id - 1)
        else:
            target = WireMessageId(ledger_id, entry_id)
        current = self._cumulative
        if current is None or target.position >= current.position:
            self._cumulative = target
        # Everything at or below the target is covered now.
        for key in [k for k in self._batches if k <= (ledger_id, entry_id - 1)]:
            del self._batches[key]
        for key in [k for k in self._individual if k <= target.position]:
            del self._individual[key]

    def flush(self) -> list[Ack]:
        """The ACK commands to send now (possibly none); the tracker is emptied."""
        acks: list[Ack] = []
        if self._cumulative is not None:
            c = self._cumulative
            acks.append(
                Ack(consumer_id=self.consumer_id, ack_type=AckType.Cumulative, message_id=(c,))
            )
            self._cumulative = None
        if self._individual:
            acks.append(
                Ack(
                    consumer_id=self.consumer_id,
                    ack_type=AckType.Individual,
                    message_id=tuple(self._individual.values()),
                )
            )
            self._individual = {}
        return acks

    def clear(self) -> None:
        """Forget pending acks and partial batches (after a seek or an unsubscribe)."""
        self._individual.clear()
        self._batches.clear()
        self._cumulative = None


def ack_positions(message: Message | MessageId) -> list[tuple[int, int, int, int]]:
    """``(ledger_id, entry_id, batch_index, batch_size)`` of every entry acknowledging
    ``message`` acknowledges: one, or each chunk of a chunked message (given a bare
    chunked message id, only its first and last chunk: the ids between are not known)."""
    if isinstance(message, Message):
        if message.chunk_ids:
            return [(c.ledger_id(), c.entry_id(), -1, 0) for c in message.chunk_ids]
        mid = message.message_id()
    else:
        mid = message
        first = mid.first_chunk_message_id()
        if first is not None:
            return [
                (first.ledger_id(), first.entry_id(), -1, 0),
                (mid.ledger_id(), mid.entry_id(), -1, 0),
            ]
    return [(mid.ledger_id(), mid.entry_id(), mid.batch_index(), mid.batch_size())]
