"""A history of client operations under faults, checked as a whole at the end (Jepsen's way).

Threads of a test record what they invoked and what came of it: a send and then its receipt
(the message id) or its error; a receive by a consumer of a subscription; an acknowledgement.
:meth:`History.check` then verifies the promises of docs/reliability.md against the whole
history:

* every message with a receipt is in the read-back exactly once (``dedup=True``) or at least
  once (``dedup=False``);
* per producer, the receipted messages appear in the read-back in the order they were sent
  (first occurrences; a redelivered duplicate may come later);
* no message acknowledged by one consumer of a subscription is delivered to a later consumer
  of that subscription (one opened after the acknowledging one: a restart, a failover) —
  a durable mark-delete is never undone; likewise none at or before a mark-delete position
  read from the cursor's stored state (:meth:`History.durable_mark`) is delivered to a
  consumer of that subscription opened after it was read (receipts must then be
  ``(ledger, entry)`` tuples, which order as positions do).

:meth:`History.check_stored` checks the topic as its ledgers hold it (read from the bookies
after the run, in the managed ledger's order): never two writers at once. Each ledger has
one writer (the broker that created it), and a new owner fences the old owner's ledger
before writing its own; a message acknowledged by a broker that kept writing after that
(a fenced ledger, or a ledger the topic's metadata never listed) is not at its receipt's
position, and a late write of the old owner would put a producer's sequence ids out of order.

A message is named by ``(producer, payload)``: payloads must be unique per producer. The
checker is pure (no I/O, no clock) and thread-safe: recording order is the history's order.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Send:
    """One send's invocation and, once known, its outcome."""

    producer: str
    payload: str
    index: int
    """Position among this producer's sends (its order)."""
    receipt: object | None = None
    """The message id, once acknowledged to the producer."""
    error: str | None = None


@dataclass(frozen=True)
class StoredEntry:
    """One message as the topic's ledgers hold it (unbatched: one message an entry)."""

    ledger: int
    entry: int
    producer: str
    sequence: int
    payload: str


@dataclass
class Consumer:
    """One consumer of a subscription, opened at ``opened`` (position in the history)."""

    subscription: str
    opened: int
    received: list[tuple[str, str]] = field(default_factory=list)
    acked: set[tuple[str, str]] = field(default_factory=set)
    positions: dict[tuple[str, str], object] = field(default_factory=dict)
    """Where each message was delivered from, when the receiver said."""


class History:
    """Operations recorded from any thread; :meth:`check` lists what broke a promise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sends: dict[tuple[str, str], Send] = {}
        self._per_producer: Counter[str] = Counter()
        self._consumers: list[Consumer] = []
        self._marks: list[tuple[int, str, tuple[int, int]]] = []
        self._events = 0

    # Recording ------------------------------------------------------------------------

    def invoke_send(self, producer: str, payload: str) -> Send:
        """A send of ``payload`` by ``producer`` begins; answer it with :meth:`receipt` or
        :meth:`failed`. Raises :class:`ValueError` for a payload this producer sent before."""
        with self._lock:
            key = (producer, payload)
            if key in self._sends:
                raise ValueError(f"payload {payload!r} of {producer!r} is not unique")
            send = Send(producer, payload, self._per_producer[producer])
            self._per_producer[producer] += 1
            self._sends[key] = send
            self._events += 1
            return send

    def receipt(self, send: Send, message_id: object) -> None:
        with self._lock:
            send.receipt = message_id
            self._events += 1

    def failed(self, send: Send, error: str) -> None:
        """The send ended in ``error``: the message may or may not be stored."""
        with self._lock:
            send.error = error
            self._events += 1

    def open_consumer(self, subscription: str) -> Consumer:
        """A consumer of ``subscription`` opens; it is later than every consumer before it."""
        with self._lock:
            consumer = Consumer(subscription, self._events)
            self._consumers.append(consumer)
            self._events += 1
            return consumer

    def received(
        self, consumer: Consumer, producer: str, payload: str, position: object = None
    ) -> None:
        """``consumer`` received the message, delivered from ``position`` (a
        ``(ledger, entry)`` tuple) if given; else its receipt's position is assumed."""
        with self._lock:
            consumer.received.append((producer, payload))
            if position is not None:
                consumer.positions[(producer, payload)] = position
            self._events += 1

    def acked(self, consumer: Consumer, producer: str, payload: str) -> None:
        """``consumer`` acknowledged the message (the broker answered the acknowledgement,
        or the test made it durable by other means)."""
        with self._lock:
            consumer.acked.add((producer, payload))
            self._events += 1

    def durable_mark(self, subscription: str, position: tuple[int, int]) -> None:
        """``subscription``'s cursor was read from storage with its mark-delete at
        ``position``: consumers opened from now on must not receive anything up to it."""
        with self._lock:
            self._marks.append((self._events, subscription, position))
            self._events += 1

    # Queries ----------------------------------------------------------------------------

    def receipted(self) -> list[Send]:
        """Sends acknowledged to their producer, in recording order of invocation."""
        with self._lock:
            return [s for s in self._sends.values() if s.receipt is not None]

    def unanswered(self) -> list[Send]:
        with self._lock:
            return [s for s in self._sends.values() if s.receipt is None and s.error is None]

    # Checking ---------------------------------------------------------------------------

    def check(self, read_back: Consumer, *, dedup: bool) -> list[str]:
        """What broke a promise, one line each (empty: the history is valid). ``read_back``
        received the whole topic (e.g. a subscription made before the first send that
        acknowledges nothing); every consumer recorded is checked for redeliveries."""
        with self._lock:
            problems: list[str] = []
            receipted = {k for k, s in self._sends.items() if s.receipt is not None}
            counts = Counter(read_back.received)
            lost = sorted(k for k in receipted if counts[k] == 0)
            if lost:
                problems.append(f"{len(lost)} receipted but never read back: {_names(lost)}")
            if dedup:
                twice = sorted(k for k, n in counts.items() if n > 1)
                if twice:
                    problems.append(
                        f"{len(twice)} read back more than once with deduplication on: "
                        f"{_names(twice)}"
                    )
            unknown = sorted(k for k in counts if k not in self._sends)
            if unknown:
                problems.append(f"{len(unknown)} read back but never sent: {_names(unknown)}")
            problems.extend(self._order_problems(read_back, receipted))
            problems.extend(self._redeliveries())
            return problems

    def check_stored(self, stored: list[StoredEntry], *, dedup: bool) -> list[str]:
        """What the stored topic breaks, one line each (empty: one writer at a time).
        ``stored`` is every entry of the topic's ledgers, in the managed ledger's order;
        receipts must be ``(ledger, entry)`` tuples. Checked: every receipted message is
        stored at its receipt's position (a ``(-1, -1)`` receipt, Pulsar's answer to a
        duplicate, only somewhere); per producer, sequence ids never go back along the
        stored order (strictly increase with ``dedup``: a re-sent message stored twice is a
        duplicate, which the read-back check reports without deduplication)."""
        with self._lock:
            problems: list[str] = []
            at = {(e.ledger, e.entry): (e.producer, e.payload) for e in stored}
            where = {(e.producer, e.payload): (e.ledger, e.entry) for e in stored}
            misplaced = sorted(
                k for k, s in self._sends.items()
                if s.receipt is not None and at.get(s.receipt) != k  # type: ignore[call-overload]
                and (_known(s.receipt) or k not in where)
            )  # fmt: skip
            if misplaced:
                shown = ", ".join(
                    f"{p}/{m} receipted at {self._sends[(p, m)].receipt}, stored at "
                    f"{where.get((p, m))}" for p, m in misplaced[:5]
                )  # fmt: skip
                problems.append(
                    f"{len(misplaced)} receipted at a position the topic does not hold them at "
                    f"(a second writer): {shown}"
                )
            if dedup:
                twice = sorted(k for k, n in Counter((e.producer, e.payload) for e in stored).items()
                               if n > 1)  # fmt: skip
                if twice:
                    problems.append(
                        f"{len(twice)} stored more than once with deduplication on: {_names(twice)}"
                    )
            last: dict[str, StoredEntry] = {}
            for e in stored:
                before = last.get(e.producer)
                if before is not None and (
                    e.sequence < before.sequence or (dedup and e.sequence == before.sequence)
                ):
                    problems.append(
                        f"producer {e.producer!r}: sequence {e.sequence} at {e.ledger}:{e.entry} "
                        f"stored after {before.sequence} at {before.ledger}:{before.entry} "
                        f"(interleaved writers)"
                    )
                if before is None or e.sequence > before.sequence:
                    last[e.producer] = e
            return problems

    def _order_problems(self, read_back: Consumer, receipted: set[tuple[str, str]]) -> list[str]:
        last: dict[str, Send] = {}
        seen: set[tuple[str, str]] = set()
        problems = []
        for key in read_back.received:
            if key in seen or key not in receipted:
                continue
            seen.add(key)
            send = self._sends[key]
            before = last.get(send.producer)
            if before is not None and before.index > send.index:
                problems.append(
                    f"producer {send.producer!r}: {send.payload!r} read back after "
                    f"{before.payload!r}, sent later"
                )
            else:
                last[send.producer] = send
        return problems

    def _redeliveries(self) -> list[str]:
        problems = []
        for i, earlier in enumerate(self._consumers):
            for later in self._consumers[i + 1 :]:
                if later.subscription != earlier.subscription:
                    continue
                again = sorted(earlier.acked.intersection(later.received))
                if again:
                    problems.append(
                        f"subscription {later.subscription!r}: {len(again)} acknowledged, "
                        f"then delivered to a later consumer: {_names(again)}"
                    )
        for at, subscription, mark in self._marks:
            for consumer in self._consumers:
                if consumer.subscription != subscription or consumer.opened < at:
                    continue
                behind = sorted(
                    k for k in set(consumer.received)
                    if k in self._sends
                    and _at_or_before(consumer.positions.get(k, self._sends[k].receipt), mark)
                )  # fmt: skip
                if behind:
                    problems.append(
                        f"subscription {subscription!r}: {len(behind)} delivered to a later "
                        f"consumer at or before the durable mark-delete {mark}: {_names(behind)}"
                    )
        return problems


def _known(receipt: object) -> bool:
    """False for Pulsar's ``-1:-1`` receipt: a duplicate the broker recognised, stored
    earlier at a position it does not name."""
    return not (isinstance(receipt, tuple) and receipt[0] < 0)


def _at_or_before(position: object, mark: tuple[int, int]) -> bool:
    """``position`` is a known position at or before ``mark`` (a ``-1:-1`` receipt, a
    recognised duplicate's, names no position and is never before anything)."""
    return isinstance(position, tuple) and _known(position) and position <= mark


def _names(keys: list[tuple[str, str]], limit: int = 10) -> str:
    shown = ", ".join(f"{p}/{m}" for p, m in keys[:limit])
    return shown + (" ..." if len(keys) > limit else "")
