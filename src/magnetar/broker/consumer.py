"""A consumer attached to a subscription: permits, entries sent but not yet acknowledged.

The consumer never reads storage; its subscription's dispatcher hands it entries and it
writes MESSAGE frames (stored entry bytes, uncopied) to its connection.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from itertools import repeat, takewhile
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from magnetar.broker.stats import ConsumerMeters
from magnetar.managed_ledger.position import Position
from magnetar.protocol import (
    ConsumerStatsResponse,
    MessageId,
    SubType,
    encode_message,
    encode_message_at,
    encode_messages_at,
)

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection
    from magnetar.broker.subscription import Subscription

NO_METADATA: Final[Mapping[str, str]] = MappingProxyType({})
"""The properties of a consumer whose client gave none (one shared, read-only mapping: an
empty dict per consumer is ~64 bytes on a broker holding thousands of idle ones)."""

_uids = itertools.count(1)

SUB_TYPE_NAMES = {
    SubType.Exclusive: "Exclusive",
    SubType.Shared: "Shared",
    SubType.Failover: "Failover",
    SubType.Key_Shared: "Key_Shared",
}


_dict_get = dict.get
_dict_set = dict.__setitem__
_dict_pop = dict.pop
_dict_update = dict.update


class PendingEntries(dict[Position, int]):
    """Entries sent and not acknowledged (position -> message count), with the total
    message count kept up to date (for the max-unacked-messages limits).

    Runs of entries come and go in one call each (:meth:`add_run`, :meth:`remove_up_to`,
    :meth:`remove_many`). :attr:`ordered` says whether the keys ascend in insertion order
    (an Exclusive/Failover consumer gets entries in log order), which lets a cumulative
    acknowledgement drop a prefix instead of scanning every pending entry."""

    __slots__ = ("_last", "messages", "ordered")

    def __init__(self) -> None:
        super().__init__()
        self.messages = 0
        self.ordered = True
        self._last: Position | None = None
        """The last key added (maybe removed since): while ordered, no key is above it."""

    # dict's own methods called directly: super() costs a lookup per call (hot path)
    def __setitem__(self, position: Position, messages: int) -> None:
        last = self._last
        if last is not None and position <= last:
            self.ordered = False
        self._last = position
        self.messages += messages - _dict_get(self, position, 0)
        _dict_set(self, position, messages)

    def __delitem__(self, position: Position) -> None:
        self.messages -= _dict_pop(self, position)

    def pop(self, position: Position, default: int | None = None) -> int | None:  # type: ignore[override]
        messages = _dict_pop(self, position, None)
        if messages is None:
            return default
        self.messages -= messages
        return messages

    def clear(self) -> None:
        super().clear()
        self.messages = 0
        self.ordered = True
        self._last = None

    def add_run(self, positions: list[Position], counts: list[int], messages: int) -> None:
        """Remember a run of sent entries; ``messages`` is ``sum(counts)``. Positions
        ascend within the run."""
        if not positions:
            return
        size_before = len(self)
        last = self._last
        if last is not None and positions[0] <= last:
            self.ordered = False
        self._last = positions[-1]
        _dict_update(self, zip(positions, counts, strict=True))
        if len(self) == size_before + len(positions):
            self.messages += messages
        else:  # some were pending already (sent again): count afresh
            self.messages = sum(self.values())

    def remove_up_to(self, position: Position) -> None:
        """Forget every entry at or before ``position`` (a cumulative acknowledgement)."""
        if not self:
            return
        if self.ordered:
            if next(reversed(self)) <= position:
                self.clear()
                return
            # the prefix at or before ``position``, found in C loops without listing the
            # rest (a cumulative ack every few entries over thousands pending)
            head = list(takewhile(position.__ge__, self))
            cut = len(head)
            if not cut:
                return
            # the cheaper side: drop the prefix, or keep the suffix in a fresh table (no
            # tuple per entry; a cumulative ack every few thousand messages over 20 000
            # pending took 2-3 ms rebuilding it through items())
            if cut <= len(self) - cut:
                self.messages -= sum(map(_dict_pop, repeat(self), head))
            else:
                keys = list(self)
                counts = list(self.values())
                self.messages -= sum(counts[:cut])
                dict.clear(self)
                _dict_update(self, zip(keys[cut:], counts[cut:], strict=True))
            return
        for p in [p for p in self if p <= position]:
            del self[p]

    def remove_many(self, positions: Iterable[Position]) -> None:
        """Forget ``positions`` (those not pending are ignored)."""
        # dict.pop mapped in C: no Python call per position
        self.messages -= sum(filter(None, map(_dict_pop, repeat(self), positions, repeat(None))))


class Consumer:
    """``consumer_id`` on ``connection``. ``uid`` is unique in the broker and keys the
    consumer in the dispatch cores (client ids are only unique per connection)."""

    # Slots: one per topic on a broker holding thousands of idle topics.
    __slots__ = (
        "auto_consume",
        "blocked_on_unacked",
        "bytes_out_counter",
        "closed",
        "connected_since_ms",
        "connection",
        "consumer_epoch",
        "consumer_id",
        "metadata",
        "meters",
        "msg_out_counter",
        "name",
        "pending",
        "permits",
        "priority_level",
        "sub_type",
        "subscription",
        "subscription_meters",
        "uid",
    )

    def __init__(
        self,
        subscription: Subscription,
        connection: ServerConnection,
        consumer_id: int,
        name: str,
        priority_level: int,
        sub_type: SubType,
        consumer_epoch: int | None,
        metadata: dict[str, str] | None = None,
        auto_consume: bool = False,
    ) -> None:
        self.subscription = subscription
        self.auto_consume = auto_consume
        """Subscribed with the AUTO_CONSUME schema: it reads whatever the topic holds, so it
        does not keep a topic from counting as idle for the next subscriber's schema."""
        self.metadata: Mapping[str, str] = metadata if metadata else NO_METADATA
        """The client's consumer properties (SUBSCRIBE's ``metadata``), shown in stats."""
        self.connection = connection
        self.consumer_id = consumer_id
        self.uid = next(_uids)
        self.name = name
        self.priority_level = priority_level
        self.sub_type = sub_type
        self.consumer_epoch = consumer_epoch
        self.permits = 0
        self.pending = PendingEntries()
        """Entries sent and not acknowledged -> their message count."""
        self.blocked_on_unacked = False
        """Set when the unacked messages reached the limit; cleared at half the limit
        (kept by :meth:`SubscriptionState.unacked_gate
        <magnetar.broker.subscription_state.SubscriptionState.unacked_gate>`)."""
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        clock = subscription.topic.service.clock
        self.connected_since_ms = clock.now_ms()
        sampler = subscription.topic.service.meter_sampler
        self.meters = ConsumerMeters(clock, sampler)
        self.subscription_meters = subscription.topic.meters_of_subscription(subscription.name)
        self.closed = False

    def send(
        self,
        position: Position,
        data: bytes,
        messages: int,
        redelivery_count: int,
        ack_set: list[int] | None,
    ) -> None:
        """Write one MESSAGE frame and remember the entry as unacknowledged."""
        self.pending[position] = messages
        self.permits -= messages
        self.msg_out_counter += messages
        self.bytes_out_counter += len(data)
        meters = self.meters
        meters.msg_out.record(messages, len(data))  # sampled: also its last_record_ms
        meters.entries_out += 1
        self.subscription_meters.msg_out.record(messages, len(data))
        partition = self.subscription.topic.partition_index
        if ack_set is None and self.consumer_epoch is None:
            # The common case: no MessageId object, no optional fields.
            frame = encode_message_at(
                self.consumer_id, position[0], position[1], partition, data, redelivery_count
            )
        else:
            frame = encode_message(
                self.consumer_id,
                MessageId(position[0], position[1], partition),
                redelivery_count,
                data,
                ack_set,
                consumer_epoch=self.consumer_epoch,
            )
        self.connection.write_buffers(frame)

    def send_run(
        self,
        positions: list[Position],
        data: list[bytes],
        counts: list[int],
        redelivery_counts: list[int] | None = None,
    ) -> tuple[int, int]:
        """Write the MESSAGE frames of a run of entries (no ack sets) with one write, and
        remember them as unacknowledged; ``counts`` are their message counts,
        ``redelivery_counts`` None for all 0. Same frames and bookkeeping as :meth:`send`
        per entry, with the counters, meters and pending entries updated once per run.
        Returns ``(messages, bytes)`` sent."""
        if not positions:
            return 0, 0
        sizes = list(map(len, data))
        messages = sum(counts)
        size_bytes = sum(sizes)
        self.pending.add_run(positions, counts, messages)
        self.permits -= messages
        self.msg_out_counter += messages
        self.bytes_out_counter += size_bytes
        meters = self.meters
        meters.msg_out.record(messages, size_bytes)
        meters.entries_out += len(positions)
        self.subscription_meters.msg_out.record(messages, size_bytes)
        partition = self.subscription.topic.partition_index
        if self.consumer_epoch is None:
            frames = encode_messages_at(
                self.consumer_id, partition, positions, data, sizes, redelivery_counts
            )
        else:
            frames = []
            for i, (position, entry) in enumerate(zip(positions, data, strict=True)):
                frames += encode_message(
                    self.consumer_id,
                    MessageId(position[0], position[1], partition),
                    0 if redelivery_counts is None else redelivery_counts[i],
                    entry,
                    consumer_epoch=self.consumer_epoch,
                )
        self.connection.write_buffers(frames)
        return messages, size_bytes

    def stats_response(self, request_id: int) -> ConsumerStatsResponse:
        sub = self.subscription
        return ConsumerStatsResponse(
            request_id=request_id,
            msg_rate_out=0.0,
            msg_throughput_out=0.0,
            msg_rate_redeliver=0.0,
            consumer_name=self.name,
            available_permits=max(self.permits, 0),
            unacked_messages=self.pending.messages,
            blocked_consumer_on_unacked_msgs=self.blocked_on_unacked,
            address=self.connection.address,
            connected_since=str(self.connected_since_ms),
            type=SUB_TYPE_NAMES[sub.sub_type],
            msg_rate_expired=0.0,
            msg_backlog=sub.backlog_messages,
            message_ack_rate=0.0,
        )
