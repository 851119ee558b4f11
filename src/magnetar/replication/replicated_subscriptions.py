"""Replicated subscriptions of one topic on its owner: the asyncio shell around
:class:`~magnetar.replication.subscription_snapshots.SubscriptionSnapshots` (Pulsar's
``ReplicatedSubscriptionsController``).

* **Tail.** Reads every entry appended to the topic's log from the moment it starts (from
  the entry cache: it keeps up with the writes): messages tell the core there is traffic,
  markers (written here or replicated in by a remote's replicator) go to the core.
* **Tick.** Every ``frequency_ms`` gives the core the replicators (connected or not) and
  the replicated subscriptions' mark-delete positions.
* **Effects.** Markers are appended to the log directly (no producer, no deduplication, not
  counted as messages in); subscription moves are cumulative acknowledgements of the cursor
  (created at the position if missing, flagged replicated).
* **No phantom backlog.** A marker appended at ``p`` is acknowledged at once on every cursor
  whose first unacknowledged entry is ``p`` (a subscription with nothing else to read,
  or a replicator the marker is not for), so markers never show as backlog of a caught-up
  subscription, with or without consumers. The dispatchers skip and acknowledge the others
  (:mod:`magnetar.broker.marker_filter`).

Started by :class:`~magnetar.replication.manager.ReplicationManager` for a topic that
replicates to at least one remote cluster, stopped when it no longer does or unloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from magnetar.broker.replicated_subscription import is_replicated, set_replicated
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError, ProtocolError
from magnetar.managed_ledger.position import Position
from magnetar.protocol.entry import Entry
from magnetar.protocol.markers import decode_marker, marker_entry
from magnetar.replication.persistent_replicator import CURSOR_PREFIX
from magnetar.replication.replicator import should_forward
from magnetar.replication.subscription_snapshots import (
    Effect,
    MoveSubscription,
    SubscriptionSnapshots,
    WriteMarker,
)

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic
    from magnetar.managed_ledger.managed_cursor import ManagedCursor
    from magnetar.replication.persistent_replicator import PersistentReplicator

log = logging.getLogger(__name__)

TAIL_READ_ENTRIES_MAX = 100


class ReplicatedSubscriptionsController:
    """The replicated subscriptions of ``topic`` in cluster ``local``; ``replicators``
    gives the topic's running replicators by remote cluster. :meth:`start`, then
    :meth:`stop`."""

    def __init__(
        self,
        topic: Topic,
        local: str,
        replicators: Callable[[], Mapping[str, PersistentReplicator]],
        clock: Clock,
        core: SubscriptionSnapshots | None = None,
    ) -> None:
        self.topic = topic
        self.local = local
        self._replicators = replicators
        self._clock = clock
        self.core = core or SubscriptionSnapshots(local, lambda: str(uuid.uuid4()))
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        assert not self._tasks, "started twice"
        self.topic.may_hold_markers = True
        loop = asyncio.get_running_loop()
        name = self.topic.full_name
        self._tasks = [
            loop.create_task(self._tail(), name=f"replsub-tail-{name}"),
            loop.create_task(self._ticks(), name=f"replsub-tick-{name}"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def replicated_positions(self) -> dict[str, Position]:
        """The replicated subscriptions' mark-delete positions by name."""
        return {
            name: cursor.state.mark_delete
            for name, cursor in self.topic.ml.cursors.items()
            if cursor.durable and is_replicated(cursor)
        }

    # --- the tick --------------------------------------------------------------------------

    async def _ticks(self) -> None:
        interval_s = self.core.frequency_ms / 1000
        while True:
            await self._clock.sleep(interval_s)
            await self._tick()

    async def _tick(self) -> None:
        replicators = self._replicators()
        effects = self.core.tick(
            self._clock.now_ms(),
            replicators.keys(),
            all(r.connected for r in replicators.values()),
            self.replicated_positions(),
        )
        await self._apply(effects)

    # --- the tail --------------------------------------------------------------------------

    async def _tail(self) -> None:
        ml = self.topic.ml
        ledgers = ml.ledgers
        after = ledgers.last_confirmed
        while True:
            try:
                await ml.wait_for_entry_after(after)
                first = ledgers.normalize(ledgers.next_position(after))
                last = ledgers.last_confirmed
                segment = ledgers.get(first.ledger_id)
                if segment is None:  # trimmed under a lagging tail: go on from the end
                    after = last
                    continue
                upto = last.entry_id if first.ledger_id == last.ledger_id else segment.entries - 1
                upto = min(upto, first.entry_id + TAIL_READ_ENTRIES_MAX - 1)
                datas = await ml.read_range(first.ledger_id, first.entry_id, upto, read_ahead=False)
            except MagnetarError as exc:  # the log closed or fenced: the topic goes too
                log.info("%s: replicated subscriptions stop: %s", self.topic.full_name, exc)
                return
            for i, data in enumerate(datas):
                after = Position(first.ledger_id, first.entry_id + i)
                await self._on_entry(after, data)

    async def _on_entry(self, position: Position, data: bytes) -> None:
        try:
            entry = Entry(data)
            metadata = entry.metadata
            marker_type = metadata.marker_type
            if marker_type is None:
                self.core.on_data()
                if self.core.start_due(self._clock.now_ms()):
                    await self._tick()  # the first snapshot of a burst at its start
                return
            marker = decode_marker(marker_type, bytes(entry.payload))
            replicated_from = metadata.replicated_from
        except ProtocolError as exc:
            log.warning("%s: entry %s unreadable: %s", self.topic.full_name, position, exc)
            return
        self._acknowledge_caught_up(position, replicated_from, metadata.replicate_to)
        if marker is None:
            return
        effects = self.core.on_marker(
            position,
            marker,
            replicated_from,
            self.topic.ml.ledgers.last_confirmed,
            self.replicated_positions(),
        )
        await self._apply(effects)

    def _acknowledge_caught_up(
        self, position: Position, replicated_from: str | None, replicate_to: tuple[str, ...]
    ) -> None:
        """Acknowledge the marker at ``position`` on the cursors for which it is the only
        entry left (see the module docstring), but not on a replicator that sends it."""
        for name, cursor in list(self.topic.ml.cursors.items()):
            if name.startswith(CURSOR_PREFIX) and should_forward(
                name[len(CURSOR_PREFIX) :], replicated_from, replicate_to
            ):
                continue
            if cursor.state.first_unacked() == position:
                cursor.ack_cumulative(position)

    # --- effects ---------------------------------------------------------------------------

    async def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            try:
                if isinstance(effect, WriteMarker):
                    data = marker_entry(effect.marker, self._clock.now_ms(), effect.replicate_to)
                    at = await self.topic.ml.add_entry(data, 1)
                    log.debug("%s: %s written at %s", self.topic.full_name, effect, at)
                elif isinstance(effect, MoveSubscription):
                    log.debug("%s: %s", self.topic.full_name, effect)
                    await self._move(effect)
            except MagnetarError as exc:  # the snapshot times out; the next one retries
                log.warning("%s: replicated subscriptions: %s", self.topic.full_name, exc)

    async def _move(self, move: MoveSubscription) -> None:
        topic = self.topic
        ml = topic.ml
        position = min(move.position, ml.ledgers.last_confirmed)
        sub = topic.subscriptions.get(move.subscription)
        cursor: ManagedCursor | None = sub.cursor if sub is not None else None
        if cursor is None:
            cursor = ml.cursors.get(move.subscription)
        if cursor is None:
            log.info("%s: creating replicated subscription %s at %s",
                     topic.full_name, move.subscription, position)  # fmt: skip
            cursor = await ml.open_cursor(
                move.subscription, start=ml.ledgers.next_position(position)
            )
            await set_replicated(cursor, True)
        elif cursor.durable and position > cursor.state.mark_delete:
            cursor.ack_cumulative(position)
