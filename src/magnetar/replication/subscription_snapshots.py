"""Replicated subscriptions (Pulsar's PIP-33) without I/O: one topic's snapshots of the
clusters' logs, and the subscription updates they allow.

A *snapshot* ties a position of the local log to a position of every remote cluster's log
such that every message at or before the remote position is, in the local log, before the
local position. A replicated subscription whose mark-delete position passes a snapshot's
local position has consumed everything the remote position covers, so the remote clusters
may move their subscription of that name to their position (an *update*).

Inputs (the shell, :mod:`magnetar.replication.replicated_subscriptions`, gives them in log
order): :meth:`SubscriptionSnapshots.on_data` for each message appended to the local log,
:meth:`SubscriptionSnapshots.on_marker` for each marker appended (written here or replicated
in), :meth:`SubscriptionSnapshots.tick` about once per ``frequency_ms``. Outputs:
:class:`WriteMarker` (append a marker entry to the local log) and :class:`MoveSubscription`.

Rules (Pulsar's ``ReplicatedSubscriptionsController`` and ``…SnapshotBuilder``):

* **Start.** A tick starts a snapshot (writes a REQUEST marker, replicated to every remote)
  only when the topic has at least one replicated subscription, every replicator is
  connected, and a message was appended since the last snapshot started: while there is
  traffic about once a second, and none without, so an idle topic gets no markers (Pulsar
  users see phantom backlog from markers written to idle topics: apache/pulsar #6437, #22926).
  At most ``pending_max`` snapshots are pending.
* **Respond.** A REQUEST from another cluster is answered with a RESPONSE marker carrying
  this log's last position, replicated to the asking cluster only.
* **Complete.** When every remote answered (with more than one remote: twice, a second
  REQUEST going out after the first round, so messages exchanged between the remotes
  meanwhile are covered), the SNAPSHOT marker is written locally (never replicated); its
  local position is where the last RESPONSE was stored. A snapshot not complete within
  ``timeout_ms`` is dropped (counted in :attr:`SubscriptionSnapshots.timed_out_total`), and
  the next tick may start another.
* **Cache.** Each SNAPSHOT marker read from the log is cached for every replicated
  subscription whose mark-delete position is before its local position, at most
  ``cache_max`` per subscription (the oldest dropped first).
* **Update.** At a tick, a replicated subscription whose mark-delete position passed
  cached snapshots gets one UPDATE marker (replicated to every remote) with the newest of
  them; those snapshots leave the cache.
* **Apply.** An UPDATE from another cluster naming this cluster moves the subscription of
  that name to the given position (the shell creates it if missing, never moves it back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from magnetar.managed_ledger.position import Position
from magnetar.protocol.markers import (
    Marker,
    Pair,
    Snapshot,
    SnapshotRequest,
    SnapshotResponse,
    Update,
)

SNAPSHOT_FREQUENCY_MS = 1000
"""Pulsar's ``replicatedSubscriptionsSnapshotFrequencyMillis``."""
SNAPSHOT_TIMEOUT_MS = 30_000
"""Pulsar's ``replicatedSubscriptionsSnapshotTimeoutSeconds`` (30)."""
SNAPSHOT_CACHE_MAX = 10
"""Pulsar's ``replicatedSubscriptionsSnapshotMaxCachedPerSubscription``."""
PENDING_SNAPSHOTS_MAX = 30


@dataclass(frozen=True, slots=True)
class WriteMarker:
    """Append ``marker`` to the local log, replicated to ``replicate_to`` (empty: every
    remote)."""

    marker: Marker
    replicate_to: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MoveSubscription:
    """Move ``subscription``'s mark-delete position to ``position`` (creating the
    subscription there if missing; never backwards)."""

    subscription: str
    position: Position


Effect = WriteMarker | MoveSubscription


class SnapshotCache:
    """The completed snapshots one replicated subscription has not passed yet, in log
    order, at most ``max_snapshots`` (Pulsar's ``ReplicatedSubscriptionSnapshotCache``)."""

    def __init__(self, max_snapshots: int = SNAPSHOT_CACHE_MAX) -> None:
        assert max_snapshots > 0
        self.max_snapshots = max_snapshots
        self._snapshots: list[Snapshot] = []

    def __len__(self) -> int:
        return len(self._snapshots)

    def add(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (ignored unless after every kept one); the oldest goes when
        full."""
        snapshots = self._snapshots
        if snapshots and snapshot.local_position <= snapshots[-1].local_position:
            return
        snapshots.append(snapshot)
        if len(snapshots) > self.max_snapshots:
            del snapshots[0]

    def advanced(self, mark_delete: Position) -> Snapshot | None:
        """The newest snapshot at or before ``mark_delete`` (None: none); it and the older
        ones leave the cache."""
        snapshots = self._snapshots
        passed = 0
        while passed < len(snapshots) and snapshots[passed].local_position <= mark_delete:
            passed += 1
        if not passed:
            return None
        newest = snapshots[passed - 1]
        del snapshots[:passed]
        return newest


@dataclass(slots=True)
class _Pending:
    """One snapshot being built."""

    snapshot_id: str
    start_ms: int
    remotes: frozenset[str]
    rounds_left: int
    missing: set[str]
    responses: dict[str, Pair] = field(default_factory=dict)


class SubscriptionSnapshots:
    """The replicated-subscription rules of one topic in cluster ``local`` (see the module
    docstring). ``new_id`` gives snapshot ids (unique across clusters and restarts: the
    shell passes a random UUID source). Not thread-safe."""

    def __init__(
        self,
        local: str,
        new_id: Callable[[], str],
        *,
        frequency_ms: int = SNAPSHOT_FREQUENCY_MS,
        timeout_ms: int = SNAPSHOT_TIMEOUT_MS,
        cache_max: int = SNAPSHOT_CACHE_MAX,
        pending_max: int = PENDING_SNAPSHOTS_MAX,
    ) -> None:
        assert frequency_ms > 0 and timeout_ms > 0 and pending_max > 0
        self.local = local
        self._new_id = new_id
        self.frequency_ms = frequency_ms
        self.timeout_ms = timeout_ms
        self.cache_max = cache_max
        self.pending_max = pending_max
        self._pending: dict[str, _Pending] = {}
        self._data_since_start = False
        """A message was appended since the last snapshot started (or one timed out)."""
        self._last_start_ms: int | None = None
        self._caches: dict[str, SnapshotCache] = {}
        self.timed_out_total = 0
        self.completed_total = 0

    @property
    def pending(self) -> int:
        """Snapshots started and neither complete nor timed out."""
        return len(self._pending)

    def cached(self, subscription: str) -> int:
        """Snapshots cached for ``subscription``."""
        cache = self._caches.get(subscription)
        return 0 if cache is None else len(cache)

    def on_data(self) -> None:
        """A message (not a marker) was appended to the local log."""
        self._data_since_start = True

    def start_due(self, now_ms: int) -> bool:
        """Whether a tick now would start a snapshot on time grounds: data came and none
        started within ``frequency_ms``. The shell then ticks at once rather than at its
        next timer tick, so the first snapshot of a burst of traffic is taken at its start:
        a consumer that acknowledged a whole short burst before the timer's first tick had
        no snapshot behind its position, and the other clusters never moved its
        subscription."""
        return self._data_since_start and (
            self._last_start_ms is None or now_ms - self._last_start_ms >= self.frequency_ms
        )

    def tick(
        self,
        now_ms: int,
        remotes: Iterable[str],
        all_connected: bool,
        replicated: Mapping[str, Position],
    ) -> list[Effect]:
        """Time passed: drop timed-out snapshots, write the updates the replicated
        subscriptions' mark-delete positions (``replicated``: name -> position) allow, and
        start a snapshot if the rules say so (``remotes``: the clusters replicated to;
        ``all_connected``: whether each replicator is connected)."""
        for snapshot_id, pending in list(self._pending.items()):
            if now_ms - pending.start_ms >= self.timeout_ms:
                del self._pending[snapshot_id]
                self.timed_out_total += 1
                self._data_since_start = True  # what it would have covered is not
        for name in [n for n in self._caches if n not in replicated]:
            del self._caches[name]
        effects: list[Effect] = []
        for name, mark_delete in sorted(replicated.items()):
            cache = self._caches.get(name)
            snapshot = None if cache is None else cache.advanced(mark_delete)
            if snapshot is not None:
                effects.append(WriteMarker(Update(name, dict(snapshot.clusters))))
        targets = frozenset(remotes) - {self.local}
        if (
            targets
            and replicated
            and all_connected
            and self.start_due(now_ms)
            and len(self._pending) < self.pending_max
        ):
            snapshot_id = self._new_id()
            self._pending[snapshot_id] = _Pending(
                snapshot_id,
                now_ms,
                targets,
                2 if len(targets) > 1 else 1,
                set(targets),
            )
            self._data_since_start = False
            self._last_start_ms = now_ms
            effects.append(WriteMarker(SnapshotRequest(snapshot_id, self.local)))
        return effects

    def on_marker(
        self,
        position: Position,
        marker: Marker,
        replicated_from: str | None,
        last_position: Position,
        replicated: Mapping[str, Position],
    ) -> list[Effect]:
        """``marker`` was appended at ``position`` (``replicated_from``: the cluster it came
        from, None if written here); ``last_position`` is the log's last position now,
        ``replicated`` the replicated subscriptions' mark-delete positions."""
        if isinstance(marker, SnapshotRequest):
            if replicated_from is None or marker.source_cluster == self.local:
                return []  # our own request, on its way out
            response = SnapshotResponse(
                marker.snapshot_id, self.local, (last_position.ledger_id, last_position.entry_id)
            )
            return [WriteMarker(response, (marker.source_cluster,))]
        if isinstance(marker, SnapshotResponse):
            return self._on_response(position, marker)
        if isinstance(marker, Snapshot):
            if replicated_from is None:
                self._cache(marker, replicated)
            return []
        if replicated_from is None:
            return []  # our own update, on its way out
        pair = marker.clusters.get(self.local)
        if pair is None:
            return []
        return [MoveSubscription(marker.subscription, Position(*pair))]

    def _on_response(self, position: Position, response: SnapshotResponse) -> list[Effect]:
        pending = self._pending.get(response.snapshot_id)
        if pending is None or response.cluster not in pending.missing:
            return []  # late (timed out), or a second answer to the same round
        pending.missing.discard(response.cluster)
        pending.responses.setdefault(response.cluster, response.position)
        if pending.missing:
            return []
        pending.rounds_left -= 1
        if pending.rounds_left > 0:
            pending.missing = set(pending.remotes)
            return [WriteMarker(SnapshotRequest(pending.snapshot_id, self.local))]
        del self._pending[pending.snapshot_id]
        self.completed_total += 1
        snapshot = Snapshot(
            pending.snapshot_id, (position.ledger_id, position.entry_id), dict(pending.responses)
        )
        return [WriteMarker(snapshot, (self.local,))]

    def _cache(self, snapshot: Snapshot, replicated: Mapping[str, Position]) -> None:
        for name, mark_delete in replicated.items():
            if mark_delete >= Position(*snapshot.local_position):
                continue
            cache = self._caches.get(name)
            if cache is None:
                cache = self._caches[name] = SnapshotCache(self.cache_max)
            cache.add(snapshot)
