"""The replicator's rules, without I/O: one topic, one remote cluster.

Inputs, in the order the shell sees them: entries read from the local cursor
(:meth:`ReplicatorCore.on_entry`), the remote's receipts (:meth:`ReplicatorCore.on_receipt`)
and a lost connection (:meth:`ReplicatorCore.on_disconnect`). Outputs: whether and with which
sequence id to send an entry (:class:`Forward`), and the position the durable cursor may
move its mark-delete to.

Rules:

* **Loop guard.** An entry whose metadata carries ``replicated_from`` came from another
  cluster: it is never forwarded (replication is one hop; a full mesh needs no relaying).
* **Targets.** An empty ``replicate_to`` replicates everywhere; otherwise only to the
  clusters it names, so ``["__local__"]`` (the official client's ``disable_replication``)
  keeps the message in its own cluster.
* **Sequence ids.** An entry at ``(ledger, entry)`` is sent with sequence id
  ``ledger << 32 | entry`` (:func:`sequence_id_of`): increasing with the position, so the
  remote's deduplication, keyed on the replicator's fixed producer name, refuses an entry
  sent again after a restart, a reconnection or a change of owner. A new connection sends
  every entry after the mark-delete again rather than skipping up to the last sequence id
  the remote reports: that id counts entries the remote accepted, not stored, and one whose
  write then fails at the remote would be skipped for good. The remote answers a resend of a
  stored entry with its receipt and one still being written with an error (sent again later).
* **Cursor.** The mark-delete position moves only over entries that are done: forwarded
  and receipted by the remote, or skipped by the rules above. Receipts arrive in send order.
* **Bounds.** At most ``in_flight_max`` entries are read and not yet done
  (:attr:`ReplicatorCore.can_read`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.managed_ledger.position import Position

LOCAL_ONLY = "__local__"
"""The ``replicate_to`` entry that keeps a message in its own cluster."""

ENTRY_BITS = 32
"""Bits of the entry id in a replicated sequence id (ledger id above them)."""


def sequence_id_of(position: Position) -> int:
    """The sequence id the remote deduplicates an entry at ``position`` by."""
    assert 0 <= position.entry_id < 1 << ENTRY_BITS, position
    return position.ledger_id << ENTRY_BITS | position.entry_id


def should_forward(
    remote: str, replicated_from: str | None, replicate_to: Sequence[str], *, marker: bool = False
) -> bool:
    """Whether a message goes to ``remote`` (the loop guard and ``replicate_to``;
    ``marker``: a broker's marker entry that stays in its cluster, i.e. any but the
    replicated subscriptions' ones, which follow the message rules)."""
    if replicated_from is not None or marker:
        return False
    return not replicate_to or remote in replicate_to


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the entry at ``position`` with ``sequence_id``."""

    position: Position
    sequence_id: int


@dataclass(slots=True)
class _Read:
    position: Position
    sequence_id: int
    done: bool
    publish_ms: int


class ReplicatorCore:
    """The bookkeeping of one replicator (see the module docstring). Not thread-safe."""

    def __init__(self, remote: str, in_flight_max: int = 1000) -> None:
        assert in_flight_max > 0
        self.remote = remote
        self.in_flight_max = in_flight_max
        self._reads: deque[_Read] = deque()
        self.mark_delete: Position | None = None
        """The furthest position all entries up to which are done (None: none yet)."""

    @property
    def can_read(self) -> bool:
        """Whether the shell may read more entries."""
        return len(self._reads) < self.in_flight_max

    @property
    def in_flight(self) -> int:
        """Entries read and not yet done."""
        return len(self._reads)

    @property
    def oldest_publish_ms(self) -> int | None:
        """Publish time of the oldest entry read and not yet done (None: none), the
        replication delay's start."""
        for read in self._reads:
            if not read.done:
                return read.publish_ms
        return None

    def on_entry(
        self,
        position: Position,
        replicated_from: str | None,
        replicate_to: Sequence[str],
        *,
        marker: bool = False,
        publish_ms: int = 0,
    ) -> Forward | None:
        """An entry read from the cursor, in log order: what to send, or None (skipped;
        the cursor may pass it once everything before it is done, :meth:`advance`)."""
        seq = sequence_id_of(position)
        forward = should_forward(self.remote, replicated_from, replicate_to, marker=marker)
        self._reads.append(_Read(position, seq, not forward, publish_ms))
        return Forward(position, seq) if forward else None

    def on_receipt(self, sequence_id: int) -> Position | None:
        """The remote stored (or, deduplicating, already held) the entry sent with
        ``sequence_id``. Returns the new mark-delete position when it moved."""
        for read in self._reads:
            if read.sequence_id == sequence_id:
                read.done = True
                break
        return self.advance()

    def advance(self) -> Position | None:
        """Moves the mark-delete over the done entries at the front; returns the new
        position when it moved (call after :meth:`on_entry` too: skipped entries)."""
        moved = False
        reads = self._reads
        while reads and reads[0].done:
            self.mark_delete = reads.popleft().position
            moved = True
        return self.mark_delete if moved else None

    def on_disconnect(self) -> Position | None:
        """The remote producer is gone: entries not done are forgotten (the shell reads
        again after the mark-delete position). Returns that position (None: from the
        cursor's own)."""
        self._reads.clear()
        return self.mark_delete
