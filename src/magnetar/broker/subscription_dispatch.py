"""Handing the entries a subscription's shell has read to its consumers: who gets which
entry.

These are the dispatch steps of :class:`~magnetar.broker.subscription_state.SubscriptionState`
(the bookkeeping they read and update: its consumers and their permits, the type's core,
the redelivery and delayed-delivery trackers, the replay set). Like the state, they do no
I/O: each consumer is sent its entries through its
:class:`~magnetar.broker.subscription_state.DispatchConsumer` port, and a step adds what it
sent to a :class:`Dispatched` for the shell to charge to the dispatch rates.

* Exclusive/Failover: :func:`send_single_active` sends runs as they were read to the active
  consumer (the shell picks it with ``SubscriptionState.single_active_target``).
* Shared, the common case: :func:`dispatch_runs_shared` lets the ring pick a consumer per
  group of consecutive entries and sends each group as one run.
* Shared and Key_Shared otherwise: :func:`dispatch_items`, entry by entry (delayed entries
  held back, the ring or the router picks, the max-unacked limits applied).

What no consumer takes goes to the replay set.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.broker.delayed_delivery import DelayedDeliveryFull
from magnetar.broker.key_shared import sticky_key, sticky_key_hash
from magnetar.broker.subscription_state import C, SubscriptionState
from magnetar.managed_ledger.entry_run import EntryRun
from magnetar.managed_ledger.position import Position
from magnetar.protocol import Entry, ProtocolError

DELIVER_AT_TIME_TAG = b"\x98\x01"
"""The key of MessageMetadata's ``deliver_at_time`` (field 19, varint) as it appears on
the wire."""


class DispatchItem:
    """An entry on its way to a consumer."""

    __slots__ = ("ack_set", "data", "key_hash", "messages", "position")

    def __init__(self, position: Position, data: bytes, messages: int | None = None) -> None:
        self.position = position
        self.data = data
        self.messages = 0 if messages is None else messages
        """0 until known (from the log's cache, or by :func:`prepare`)."""
        self.ack_set: list[int] | None = None
        self.key_hash = 0
        """Key_Shared's sticky key hash; -1 for an entry read for replay (its
        ``deliver_at_time`` was checked already)."""


class Dispatched:
    """What one dispatch step sent (the shell charges it to the dispatch rates)."""

    __slots__ = ("entries", "messages", "size_bytes")

    def __init__(self) -> None:
        self.messages = 0
        self.size_bytes = 0
        self.entries = 0

    def add(self, messages: int, size_bytes: int, entries: int) -> None:
        self.messages += messages
        self.size_bytes += size_bytes
        self.entries += entries


def _popcount(words: Sequence[int]) -> int:
    return sum(bin(w & 0xFFFFFFFFFFFFFFFF).count("1") for w in words)


def prepare(state: SubscriptionState[C], item: DispatchItem) -> bool:
    """Fill message count, ack set and key hash; False for an unparsable entry. The
    metadata is parsed only when needed: the count of an entry appended by this broker
    comes with it (it was parsed on publish)."""
    if state.router is not None or not item.messages:
        try:
            md = Entry(item.data).metadata
            item.messages = md.num_messages
            if state.router is not None:
                item.key_hash = sticky_key_hash(
                    sticky_key(md.ordering_key, md.partition_key, md.partition_key_b64_encoded)
                )
        except ProtocolError:
            return False
    ack_set = state.cursor.batch_ack_set(item.position)
    if ack_set is not None:
        item.ack_set = ack_set
        item.messages = _popcount(ack_set)
    return True


def send_single_active(
    state: SubscriptionState[C], consumer: C, runs: list[EntryRun], sent: Dispatched
) -> None:
    """Exclusive/Failover: send ``runs`` (read in log order) to ``consumer``. Entries
    appended by this broker come with their message count; without partly acknowledged
    batches a run of them goes out as it was read (no object per entry)."""
    plain = not state.cursor.partial_batches
    for run in runs:
        if plain and run.counts_known:
            m, b = consumer.send_run(run.positions, run.data, run.messages)  # type: ignore[arg-type]
            sent.add(m, b, len(run))
        else:
            _send_prepared(state, consumer, run, sent)


def _send_prepared(
    state: SubscriptionState[C], consumer: C, run: EntryRun, sent: Dispatched
) -> None:
    """Send a run whose entries need preparing (message counts to parse, partly
    acknowledged batches): entries without an ack set still go in runs, in log order
    (unparsable entries are skipped)."""
    positions: list[Position] = []
    data: list[bytes] = []
    counts: list[int] = []
    for pos, entry, count in zip(run.positions, run.data, run.messages, strict=True):
        item = DispatchItem(pos, entry, count)
        if not prepare(state, item):
            continue
        sent.entries += 1
        if item.ack_set is None:
            positions.append(pos)
            data.append(entry)
            counts.append(item.messages)
            continue
        m, b = consumer.send_run(positions, data, counts)
        sent.add(m + item.messages, b + len(entry), 0)
        positions, data, counts = [], [], []
        consumer.send(pos, entry, item.messages, 0, item.ack_set)
    m, b = consumer.send_run(positions, data, counts)
    sent.add(m, b, 0)


def dispatch_runs_shared(
    state: SubscriptionState[C], runs: list[EntryRun], limits_set: bool, sent: Dispatched
) -> bool:
    """Shared, the common case: entries with known message counts, no partly
    acknowledged batch, no ``deliver_at_time``, no max-unacked limit (``limits_set``
    False). The ring picks a consumer per group of consecutive entries and each group
    goes out as one run; what no consumer takes waits for replay. False (nothing done)
    when the round needs the per-entry path (:func:`dispatch_items`)."""
    if limits_set or state.cursor.partial_batches:
        return False
    if len(runs) == 1:
        positions, data, counts = runs[0].positions, runs[0].data, runs[0].messages
    else:
        positions, data, counts = [], [], []
        for run in runs:
            positions += run.positions
            data += run.data
            counts += run.messages
    if not all(counts):
        return False  # counts to parse (entries read from bookies)
    # deliver_at_time's tag: where these bytes appear nowhere in the entries none has
    # the field (where they do, maybe in a payload, the per-entry path parses the
    # metadata). One search over the joined bytes: a generator would be a call per entry.
    if state.delayed is not None and DELIVER_AT_TIME_TAG in b"".join(data):
        return False
    assert state.ring is not None
    known: list[int] = counts  # type: ignore[assignment]  # all(counts): no None
    tracker = state.tracker
    assigned = 0
    for uid, indexes in state.ring.assign(known):
        if not indexes:
            continue
        lo, hi = indexes[0], indexes[-1] + 1
        assigned = hi
        consumer = state.consumers.get(uid)
        if consumer is None:  # not expected: the ring holds the subscription's consumers
            for p in positions[lo:hi]:
                state.add_replay(p, 0)
            continue
        group = positions[lo:hi]
        rcs = list(map(tracker.count, group)) if len(tracker) else None
        m, b = consumer.send_run(group, data[lo:hi], known[lo:hi], rcs)
        sent.add(m, b, hi - lo)
    for p in positions[assigned:]:
        state.add_replay(p, 0)
    return True


def _hold_delayed(state: SubscriptionState[C], items: list[DispatchItem]) -> list[DispatchItem]:
    """Prepare ``items`` and keep back those with a future ``deliver_at_time``."""
    ready: list[DispatchItem] = []
    delayed = state.delayed
    now_cutoff = None
    for item in items:
        from_replay = item.key_hash == -1
        if not prepare(state, item):
            continue
        if delayed is not None and not from_replay and DELIVER_AT_TIME_TAG in item.data:
            at = Entry(item.data).metadata.deliver_at_time
            if at is not None:
                if now_cutoff is None:
                    now_cutoff = delayed.cutoff_ms()
                if at > now_cutoff:
                    try:
                        if delayed.add(item.position, at):
                            continue
                    except DelayedDeliveryFull:
                        state.add_replay(item.position, item.key_hash)
                        continue
        ready.append(item)
    return ready


def dispatch_items(
    state: SubscriptionState[C],
    items: list[DispatchItem],
    *,
    replay: bool,
    limit_per_consumer: int,
    limit_per_subscription: int,
    sent: Dispatched,
) -> bool:
    """Shared/Key_Shared, entry by entry: hold back delayed entries, let the ring or
    the router pick a consumer per entry, and send what the max-unacked limits (per
    message; 0 = none) allow; the rest waits for replay. ``replay`` says the items
    were read from the replay set. True when something was assigned (Shared) or sent
    (Key_Shared)."""
    ready = _hold_delayed(state, items)
    if not ready:
        return False
    limit_c, limit_s = limit_per_consumer, limit_per_subscription
    total = sum(c.pending.messages for c in state.consumers.values()) if limit_s > 0 else 0
    if state.ring is not None:
        groups = state.ring.assign([i.messages for i in ready])
        assigned = set()
        for uid, indexes in groups:
            consumer = state.consumers.get(uid)
            for i in indexes:
                item = ready[i]
                assigned.add(i)
                if (
                    consumer is None
                    or (limit_c > 0 and consumer.pending.messages >= limit_c)
                    or (limit_s > 0 and total >= limit_s)
                ):
                    state.add_replay(item.position, 0)
                    continue
                total += item.messages
                sent.add(item.messages, len(item.data), 1)
                consumer.send(
                    item.position,
                    item.data,
                    item.messages,
                    state.tracker.count(item.position),
                    item.ack_set,
                )
        for i, item in enumerate(ready):
            if i not in assigned:
                state.add_replay(item.position, 0)
        return bool(assigned)
    router = state.router
    assert router is not None
    permits = {
        c.uid: c.permits
        for c in state.consumers.values()
        if c.permits > 0 and not c.blocked_on_unacked
    }
    by_pos: dict[tuple[int, int], DispatchItem] = {i.position: i for i in ready}
    routed = router.route(
        [(i.position, i.key_hash) for i in ready],
        permits,
        replay,
        set(state.replay.values()),
    )
    any_sent = False
    for uid, positions in routed.by_consumer.items():
        consumer = state.consumers.get(uid)
        for routed_pos in positions:
            item = by_pos[routed_pos]
            pos = item.position
            if (
                consumer is None
                or (limit_c > 0 and consumer.pending.messages >= limit_c)
                or (limit_s > 0 and total >= limit_s)
            ):
                state.add_replay(pos, item.key_hash)
                continue
            total += item.messages
            sent.add(item.messages, len(item.data), 1)
            consumer.send(pos, item.data, item.messages, state.tracker.count(pos), item.ack_set)
            any_sent = True
    for deferred in routed.deferred:
        item = by_pos[deferred]
        state.add_replay(item.position, item.key_hash)
    return any_sent
