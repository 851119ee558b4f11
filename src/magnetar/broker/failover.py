"""Choosing the active consumer of an Exclusive or Failover subscription (reference §6.10).

Sans-IO: :class:`ActiveConsumerSelector` takes consumer arrivals, departures and timer
ticks (with the caller's clock reading ``now_ms``) and returns *effects*; the network
shell executes them in order. It never reads a clock itself.

The rule (Java ``AbstractDispatcherSingleActiveConsumer.pickAndScheduleActiveConsumer``):

1. sort consumers by ``priority_level`` ascending, then by name with Java
   ``String.compareTo`` (UTF-16 code-unit order); the sort is stable, so consumers with the
   same priority and name keep their arrival order;
2. narrow to the consumers sharing the best (lowest) priority level: ``N`` of them;
3. partitioned topic (partition index ``p >= 0``): active = ``sorted[p % N]``;
4. non-partitioned topic: a consistent-hash ring with 100 points per consumer,
   ``murmur3(utf8(name + str(j))) & 0x7fffffff -> i`` (a later point wins a collision);
   active = the ring point with the smallest key >= ``murmur3(utf8(topic)) & 0x7fffffff``,
   else the first point.

Effects when the active consumer changes (Java ``PersistentDispatcherSingleActiveConsumer
.scheduleReadOnActiveConsumer``):

* Exclusive, or Failover with a delay <= 0: at once :class:`RewindCursor`, then (Failover
  only) :class:`NotifyActiveConsumer` to every consumer, then :class:`StartDispatch`.
* Failover with a delay: :class:`ScheduleActivation` ``(now_ms + delay)``; dispatch is paused
  (``dispatch_paused``) until the caller calls :meth:`ActiveConsumerSelector.on_timer` at or
  after that time, which returns the same rewind/notify/dispatch sequence for whoever is
  active *then*. A switch while one is already scheduled does not postpone it. A call
  before that time returns the same :class:`ScheduleActivation` again, so an early timer
  re-arms instead of losing the activation.

When a consumer joins and the active one does not change, only the newcomer is told
(Failover only): ``NotifyActiveConsumer(newcomer, is_active=False)``, or ``True`` if it is
itself the (unchanged) active consumer. Exclusive subscriptions never produce
``NotifyActiveConsumer``. The shell must drop notifications for clients below protocol v12.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence

from magnetar.common.errors import ConsumerBusy, ConsumerNotFound
from magnetar.common.frozen_struct import frozen_struct
from magnetar.common.murmur3 import pulsar_hash, pulsar_hash_str

#: Points per consumer on the failover hash ring (Java CONSUMER_CONSISTENT_HASH_REPLICAS).
RING_POINTS_PER_CONSUMER = 100
#: Java ``activeConsumerFailoverDelayTimeMillis`` default.
DEFAULT_FAILOVER_DELAY_MS = 1000


class SingleActiveType(enum.Enum):
    EXCLUSIVE = "Exclusive"
    FAILOVER = "Failover"


@frozen_struct(kw_only=False)
class FailoverConsumer:
    """What the selector needs to know about a consumer. ``consumer_id`` must be unique
    within the subscription (the shell may use any unique integer, e.g. a broker-wide
    counter, since client consumer ids are only unique per connection)."""

    consumer_id: int
    name: str
    priority_level: int = 0


@frozen_struct(kw_only=False)
class RewindCursor:
    """Rewind the subscription cursor to the first unacked entry."""


@frozen_struct(kw_only=False)
class NotifyActiveConsumer:
    """Send ``ACTIVE_CONSUMER_CHANGE{consumer_id, is_active}`` to this consumer."""

    consumer_id: int
    is_active: bool


@frozen_struct(kw_only=False)
class StartDispatch:
    """Start (or resume) reading and dispatching entries to this, the active, consumer."""

    consumer_id: int


@frozen_struct(kw_only=False)
class ScheduleActivation:
    """Call :meth:`ActiveConsumerSelector.on_timer` once the clock reaches ``due_ms``."""

    due_ms: int


FailoverEffect = RewindCursor | NotifyActiveConsumer | StartDispatch | ScheduleActivation


def java_string_order_key(text: str) -> tuple[int, ...]:
    """A sort key ordering strings as Java ``String.compareTo`` does (UTF-16 code units).

    Python compares code points; the two orders differ for characters above U+FFFF, which
    Java sees as surrogate pairs (0xD800-0xDFFF) sorting *below* U+E000..U+FFFF.
    """
    raw = text.encode("utf-16-be", "surrogatepass")
    return tuple(int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2))


def sort_consumers(consumers: Sequence[FailoverConsumer]) -> list[FailoverConsumer]:
    """Stable sort by (priority_level, Java string order of name)."""
    return sorted(consumers, key=lambda c: (c.priority_level, java_string_order_key(c.name)))


def top_priority_count(sorted_consumers: Sequence[FailoverConsumer]) -> int:
    """How many leading consumers share the best priority level."""
    best = sorted_consumers[0].priority_level
    count = 0
    for consumer in sorted_consumers:
        if consumer.priority_level != best:
            break
        count += 1
    return count


def ring_index(names: Sequence[str], topic_name: str) -> int:
    """Index into ``names`` chosen by the consistent-hash ring for ``topic_name``."""
    if len(names) == 1:  # every point of the ring is the one consumer's
        return 0
    ring: dict[int, int] = {}
    for i, name in enumerate(names):
        for j in range(RING_POINTS_PER_CONSUMER):
            ring[pulsar_hash(f"{name}{j}".encode("utf-8", "replace"))] = i
    keys = sorted(ring)
    target = pulsar_hash_str(topic_name)
    pos = bisect.bisect_left(keys, target)
    return ring[keys[pos]] if pos < len(keys) else ring[keys[0]]


def choose_active_index(
    sorted_consumers: Sequence[FailoverConsumer],
    topic_name: str,
    partition_index: int,
    consistent_hashing_for_partitions: bool = False,
) -> int:
    """Index of the active consumer in an already sorted, non-empty consumer list."""
    if not sorted_consumers:
        raise ValueError("no consumers to choose from")
    n = top_priority_count(sorted_consumers)
    if partition_index >= 0 and not consistent_hashing_for_partitions:
        return partition_index % n
    return ring_index([c.name for c in sorted_consumers[:n]], topic_name)


class ActiveConsumerSelector:
    """Active-consumer state of one Exclusive or Failover subscription.

    ``topic_name`` is the full topic (partition) name, as hashed by Java; ``partition_index``
    is -1 for a non-partitioned topic.
    """

    __slots__ = (
        "_activation_due_ms",
        "_active",
        "_consistent_hashing",
        "_consumers",
        "_delay_ms",
        "_max_consumers",
        "_partition_index",
        "_sub_type",
        "_topic_name",
    )

    def __init__(
        self,
        topic_name: str,
        partition_index: int,
        sub_type: SingleActiveType,
        failover_delay_ms: int = DEFAULT_FAILOVER_DELAY_MS,
        consistent_hashing_for_partitions: bool = False,
        max_consumers: int = 0,
    ) -> None:
        self._topic_name = topic_name
        self._partition_index = partition_index
        self._sub_type = sub_type
        self._delay_ms = failover_delay_ms
        self._consistent_hashing = consistent_hashing_for_partitions
        self._max_consumers = max_consumers
        self._consumers: list[FailoverConsumer] = []
        self._active: FailoverConsumer | None = None
        self._activation_due_ms: int | None = None

    @property
    def consumers(self) -> list[FailoverConsumer]:
        """Consumers in selection order (a copy)."""
        return list(self._consumers)

    @property
    def active(self) -> FailoverConsumer | None:
        return self._active

    @property
    def dispatch_paused(self) -> bool:
        """True while a failover switch waits for its delay: send nothing, ignore FLOW-triggered
        reads and redelivery requests (Java ignores both while the rewind is pending)."""
        return self._activation_due_ms is not None

    @property
    def activation_due_ms(self) -> int | None:
        return self._activation_due_ms

    def add(self, consumer: FailoverConsumer, now_ms: int) -> list[FailoverEffect]:
        """Add a consumer and return the effects to run.

        Raises :class:`ConsumerBusy` on an Exclusive subscription that already has a
        consumer, or when ``max_consumers`` (> 0) is reached.
        """
        if any(c.consumer_id == consumer.consumer_id for c in self._consumers):
            raise ValueError(f"consumer id {consumer.consumer_id} already added")
        if self._sub_type is SingleActiveType.EXCLUSIVE and self._consumers:
            raise ConsumerBusy("Exclusive consumer is already connected")
        if self._max_consumers > 0 and len(self._consumers) >= self._max_consumers:
            raise ConsumerBusy("Subscription reached max consumers limit")
        self._consumers.append(consumer)
        if self._pick():
            return self._on_active_changed(now_ms)
        if self._sub_type is SingleActiveType.FAILOVER and self._active is not None:
            return [NotifyActiveConsumer(consumer.consumer_id, consumer is self._active)]
        return []

    def remove(self, consumer_id: int, now_ms: int) -> list[FailoverEffect]:
        """Remove a consumer; raises :class:`ConsumerNotFound` if it is not here."""
        for i, c in enumerate(self._consumers):
            if c.consumer_id == consumer_id:
                del self._consumers[i]
                break
        else:
            raise ConsumerNotFound(f"Consumer {consumer_id} was not connected")
        if not self._consumers:
            self._active = None
            self._activation_due_ms = None
            return []
        if self._pick():
            return self._on_active_changed(now_ms)
        return []

    def on_timer(self, now_ms: int) -> list[FailoverEffect]:
        """Fire a due delayed activation.

        Before the due time it returns ``[ScheduleActivation(due_ms)]`` again: the pending
        activation stays pending and the caller must arm its timer once more (a timer that
        fires early by the caller's clock must not leave dispatch paused for good). With no
        activation pending it returns ``[]``.
        """
        due_ms = self._activation_due_ms
        if due_ms is None:
            return []
        if now_ms < due_ms:
            return [ScheduleActivation(due_ms)]
        self._activation_due_ms = None
        return self._activate()

    def can_unsubscribe(self, consumer_id: int) -> bool:
        """Java ``canUnsubscribe``: the only consumer, and the active one."""
        return (
            len(self._consumers) == 1
            and self._active is not None
            and self._active.consumer_id == consumer_id
        )

    def _pick(self) -> bool:
        # Sorting the live list in place (stably) mirrors Java, where ties keep the order
        # left by earlier sorts plus arrival order for newcomers.
        self._consumers.sort(key=lambda c: (c.priority_level, java_string_order_key(c.name)))
        index = choose_active_index(
            self._consumers, self._topic_name, self._partition_index, self._consistent_hashing
        )
        selected = self._consumers[index]
        if selected is self._active:
            return False
        self._active = selected
        return True

    def _on_active_changed(self, now_ms: int) -> list[FailoverEffect]:
        if self._sub_type is not SingleActiveType.FAILOVER or self._delay_ms <= 0:
            return self._activate()
        if self._activation_due_ms is not None:
            return []
        self._activation_due_ms = now_ms + self._delay_ms
        return [ScheduleActivation(self._activation_due_ms)]

    def _activate(self) -> list[FailoverEffect]:
        active = self._active
        if active is None:
            return []
        effects: list[FailoverEffect] = [RewindCursor()]
        if self._sub_type is SingleActiveType.FAILOVER:
            effects.extend(
                NotifyActiveConsumer(c.consumer_id, c is active) for c in self._consumers
            )
        effects.append(StartDispatch(active.consumer_id))
        return effects
