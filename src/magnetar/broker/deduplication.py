"""Per-producer-name message deduplication (reference §6.4; Java ``MessageDeduplication``).

State: two maps keyed by producer name, ``pushed`` (highest sequence id accepted for
writing) and ``persisted`` (highest sequence id known stored).

Per SEND, with ``seq = sequence_id`` and ``highest = max(highest_sequence_id, seq)``:

* ``seq <= pushed[name]`` and ``seq <= persisted[name]`` → :attr:`DupStatus.DUP`: store
  nothing, reply SEND_RECEIPT with ledgerId = entryId = -1 at once;
* ``seq <= pushed[name]`` otherwise → :attr:`DupStatus.UNKNOWN`: reply SEND_ERROR
  PersistenceError (the client reconnects, re-sends, and the retry is then a DUP);
* else → :attr:`DupStatus.NOT_DUP`: ``pushed[name] = highest``; store the entry and, once
  stored, call :meth:`DeduplicationState.record_persisted` (``persisted[name] = highest``).

Chunks: only the last chunk (``chunk_id == num_chunks - 1``) is checked and recorded;
earlier chunks always pass (all chunks share one sequence id).

If a write fails, call :meth:`DeduplicationState.reset_pushed` (Java
``resetHighestSequenceIdPushed``): ``pushed`` falls back to ``persisted`` so the client's
re-sends are not refused as UNKNOWN forever.

``last_sequence_id(name)`` (for PRODUCER_SUCCESS) is ``pushed[name]`` or -1.

Durability: :meth:`DeduplicationState.snapshot` serialises ``persisted`` (bounded to
``max_producers_in_snapshot`` names, in name order as Java's TreeMap) for the caller to
store with the position it covers (Java keeps it in a cursor's mark-delete properties).
After a restart, :meth:`DeduplicationState.restore` loads it and the caller replays the
entries written after that position through :meth:`DeduplicationState.replay_entry`.
Restored producers count as inactive from the restore time.

Inactive producers (disconnected for longer than ``producer_inactivity_timeout_ms``,
default 6 h as Java's ``brokerDeduplicationProducerInactivityTimeoutMinutes=360``) are
forgotten by :meth:`DeduplicationState.purge_inactive`, which the owner calls periodically
(the broker's topic does it every snapshot interval). Unlike Java, a producer inactive for
less than the timeout stays in the inactivity map until it expires or reconnects. Each call
does bounded work: the inactivity map is kept in the order producers went inactive, so a
purge pops expired names from its front and stops at the first live one or after
``max_names`` (the rest go at the next call). Without purging, a client that makes up a new
producer name per task (the Spark sink does, per task and micro-batch) grows the state
forever.

The snapshot holds at most ``max_producers_in_snapshot`` names (Java's
``brokerDeduplicationMaxNumberOfProducers``, 10 000): connected producers first, then the
most recently inactive ones, so the names a restart forgets are the longest idle.
"""

from __future__ import annotations

import enum
import json

from magnetar.common.clock import Clock

DEFAULT_PRODUCER_INACTIVITY_TIMEOUT_MS = 360 * 60 * 1000
#: Java ``brokerDeduplicationMaxNumberOfProducers`` default.
DEFAULT_MAX_PRODUCERS_IN_SNAPSHOT = 10_000
#: Names :meth:`DeduplicationState.purge_inactive` forgets per call at most.
DEFAULT_PURGE_NAMES_MAX = 1_000
_SNAPSHOT_VERSION = 1


class DupStatus(enum.Enum):
    NOT_DUP = "NotDup"
    DUP = "Dup"
    UNKNOWN = "Unknown"


class SnapshotError(ValueError):
    """A deduplication snapshot could not be decoded (corrupt or from a newer version)."""


def is_checked_send(chunk_id: int | None, num_chunks: int | None) -> bool:
    """Whether a SEND takes part in dedup: every non-chunk, and the last chunk of a message."""
    if chunk_id is None or num_chunks is None:
        return True
    return chunk_id == num_chunks - 1


class DeduplicationState:
    """Dedup bookkeeping of one topic. Not thread-safe: owned by the topic's task."""

    def __init__(
        self,
        clock: Clock,
        producer_inactivity_timeout_ms: int = DEFAULT_PRODUCER_INACTIVITY_TIMEOUT_MS,
        max_producers_in_snapshot: int = DEFAULT_MAX_PRODUCERS_IN_SNAPSHOT,
    ) -> None:
        self._clock = clock
        self._inactivity_timeout_ms = producer_inactivity_timeout_ms
        self._snapshot_max = max_producers_in_snapshot
        self._pushed: dict[str, int] = {}
        self._persisted: dict[str, int] = {}
        # Insertion order = order of going inactive (oldest first): purges pop the front.
        self._inactive_since_ms: dict[str, int] = {}

    # -- publish path -------------------------------------------------------------------

    def check(
        self,
        producer_name: str,
        sequence_id: int,
        highest_sequence_id: int = 0,
        chunk_id: int | None = None,
        num_chunks: int | None = None,
    ) -> DupStatus:
        """Classify a SEND; on NOT_DUP it also advances ``pushed`` (see module docstring)."""
        if not is_checked_send(chunk_id, num_chunks):
            return DupStatus.NOT_DUP
        highest = max(highest_sequence_id, sequence_id)
        pushed = self._pushed.get(producer_name)
        if pushed is not None and sequence_id <= pushed:
            persisted = self._persisted.get(producer_name)
            if persisted is not None and sequence_id <= persisted:
                return DupStatus.DUP
            return DupStatus.UNKNOWN
        self._pushed[producer_name] = highest
        return DupStatus.NOT_DUP

    def record_persisted(
        self,
        producer_name: str,
        sequence_id: int,
        highest_sequence_id: int = 0,
        chunk_id: int | None = None,
        num_chunks: int | None = None,
    ) -> None:
        """The entry of a NOT_DUP send is stored."""
        if not is_checked_send(chunk_id, num_chunks):
            return
        self._persisted[producer_name] = max(highest_sequence_id, sequence_id)

    def reset_pushed(self) -> None:
        """A write failed: forget sequence ids pushed but not persisted."""
        self._pushed = dict(self._persisted)

    def last_sequence_id(self, producer_name: str) -> int:
        """``last_sequence_id`` for PRODUCER_SUCCESS: highest pushed, or -1."""
        return self._pushed.get(producer_name, -1)

    def persisted_sequence_id(self, producer_name: str) -> int:
        return self._persisted.get(producer_name, -1)

    # -- producer activity ---------------------------------------------------------------

    def producer_added(self, producer_name: str) -> None:
        self._inactive_since_ms.pop(producer_name, None)

    def producer_removed(self, producer_name: str) -> None:
        """A producer of this name disconnected (names that never sent are not tracked)."""
        if producer_name not in self._pushed and producer_name not in self._persisted:
            return
        self._inactive_since_ms.pop(producer_name, None)  # to the back: newest inactive
        self._inactive_since_ms[producer_name] = self._clock.now_ms()

    def purge_inactive(self, max_names: int = DEFAULT_PURGE_NAMES_MAX) -> list[str]:
        """Forget producers inactive longer than the timeout, at most ``max_names`` of them
        (oldest first); returns their names in that order."""
        cutoff_ms = self._clock.now_ms() - self._inactivity_timeout_ms
        inactive = self._inactive_since_ms
        expired: list[str] = []
        for name, since_ms in inactive.items():
            if since_ms >= cutoff_ms or len(expired) >= max_names:
                break
            expired.append(name)
        for name in expired:
            del inactive[name]
            self._pushed.pop(name, None)
            self._persisted.pop(name, None)
        return expired

    @property
    def producer_count(self) -> int:
        return len(self._pushed.keys() | self._persisted.keys())

    @property
    def inactive_producer_count(self) -> int:
        """Producers waiting to be purged (disconnected, or restored and not back yet)."""
        return len(self._inactive_since_ms)

    # -- durability ---------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The persisted map as bytes (deterministic; at most ``max_producers_in_snapshot``
        names: connected producers by name, then the most recently inactive ones)."""
        persisted = self._persisted
        inactive = self._inactive_since_ms
        limit = self._snapshot_max
        if len(persisted) <= limit:
            names = list(persisted)
        else:
            names = sorted(n for n in persisted if n not in inactive)[:limit]
            for name in reversed(inactive):
                if len(names) >= limit:
                    break
                if name in persisted:
                    names.append(name)
        names.sort()
        body = {"v": _SNAPSHOT_VERSION, "persisted": {n: persisted[n] for n in names}}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot; raises :class:`SnapshotError` on bad input."""
        try:
            body = json.loads(data.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotError(f"undecodable dedup snapshot: {exc}") from exc
        if not isinstance(body, dict) or body.get("v") != _SNAPSHOT_VERSION:
            raise SnapshotError("unsupported dedup snapshot version")
        persisted = body.get("persisted")
        if not isinstance(persisted, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in persisted.items()
        ):
            raise SnapshotError("malformed dedup snapshot")
        self._persisted = dict(persisted)
        self._pushed = dict(persisted)
        now_ms = self._clock.now_ms()
        self._inactive_since_ms = {name: now_ms for name in persisted}

    def replay_entry(
        self, producer_name: str, sequence_id: int, highest_sequence_id: int = 0
    ) -> None:
        """Recovery: account for a stored entry written after the snapshot position.

        The caller passes the entry's ``MessageMetadata`` values and must skip non-last
        chunks itself (use :func:`is_checked_send`).
        """
        value = max(highest_sequence_id, sequence_id)
        self._pushed[producer_name] = value
        self._persisted[producer_name] = value
        self._inactive_since_ms.setdefault(producer_name, self._clock.now_ms())
