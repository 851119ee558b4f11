"""A read's SENDs taken a slice per event-loop turn, and what followed them kept in order.

A client with a full window of SENDs in flight delivers them in one read. Taken all at once,
the whole window is appended before the journal's writer gets any of it, its sync starts
only when the last SEND is handled, and every receipt waits for that one sync: the client,
the broker and the disk take turns. Taken a slice at a time (at most
:data:`SLICE_SENDS` SENDs per loop turn), the first slice's sync runs on the other core
while the broker handles the next slice, and its receipts go out while the rest is still
being appended, so the client sends again sooner.

Only a read in which some producer has more than a slice of SENDs is sliced. Slices are cut
from producers' runs (each producer's consecutive SENDs, as the connection groups them per
topic): a run longer than a slice is cut, shorter runs are packed whole, never split across
slices, so a read spread over many topics keeps one append per topic. A read of many
producers' short runs (a client spreading its window over many topics) is taken whole in
one turn: slicing it gained no overlap worth having, cost a loop turn and a pause and
resume of reading per slice, and left the reads after it smaller, so each topic got more,
shorter runs (about a third more broker CPU per message over 100 topics on 8 connections;
``docs/perf-log.md``).
Everything the read held after a deferred slice (other frames, further SEND runs, later
reads) waits behind it in :class:`ReadBacklog`, in stream order, and the connection reads
no more until the backlog is empty.

Big SENDs need no slicing to fill a window (500 entries of 10 KB are 5 MB in 20 reads
of 256 KB, each under a slice), but uvloop reads a socket up to 32 times per readiness
event, so the whole window was decoded in one turn all the same. A connection therefore
also stops reading for two loop turns after every :data:`TURN_READ_BYTES` it has read: the
first hands what was read to the bookie, the second lets the journal's flusher start its
sync, and reading goes on while the disk works.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from magnetar.protocol.frame import SendRun

SLICE_SENDS = 128
"""At most this many SENDs of one read are handled per event-loop turn."""
TURN_READ_BYTES = 1024 * 1024
"""After this many bytes read, a connection stops reading for two event-loop turns."""


def producer_runs(sends: SendRun) -> list[SendRun]:
    """``sends`` cut where the producer changes: each producer's consecutive SENDs."""
    runs: list[SendRun] = []
    start = 0
    n = len(sends)
    while start < n:
        pid = sends[start][0][0]
        end = start + 1
        while end < n and sends[end][0][0] == pid:
            end += 1
        runs.append(sends if start == 0 and end == n else sends[start:end])
        start = end
    return runs


class _OfTopic(Protocol):
    @property
    def topic(self) -> object: ...


def by_topic(run: SendRun, producer_of: Callable[[int], _OfTopic]) -> Iterable[SendRun]:
    """``run``'s SENDs grouped by their producer's topic, each group in stream order.
    ``producer_of`` raises for an unknown producer id; then none of the run is taken."""
    groups: dict[object, SendRun] = {}
    sends: SendRun = []
    pid = -1  # producer ids are unsigned
    for send in run:
        if send[0][0] != pid:
            pid = send[0][0]
            topic = producer_of(pid).topic
            found = groups.get(topic)
            if found is None:
                found = groups[topic] = []
            sends = found
        sends.append(send)
    return groups.values()


def plan_read(
    run: SendRun, producer_of: Callable[[int], _OfTopic]
) -> tuple[list[SendRun], list[list[SendRun]]]:
    """What of a read's SENDs is handed over now and what waits for later loop turns:
    ``(now, later)``, ``now`` as producers' runs (grouped by topic, each producer's
    consecutive SENDs), ``later`` as slices of such runs. Only a read in which some
    producer has more than :data:`SLICE_SENDS` SENDs has a ``later``. Raises (through
    ``producer_of``) before anything is planned when a producer is unknown."""
    pid = run[0][0][0]
    if all(send[0][0] == pid for send in run):
        producer_of(pid)
        runs = [run]
    else:
        runs = [r for sends in by_topic(run, producer_of) for r in producer_runs(sends)]
    if len(run) <= SLICE_SENDS or max(map(len, runs)) <= SLICE_SENDS:
        return runs, []
    first, *rest = send_slices(runs)
    return first, rest


def send_slices(runs: list[SendRun], size: int = SLICE_SENDS) -> list[list[SendRun]]:
    """``runs`` (each one producer's consecutive SENDs, in the order to hand them over) cut
    into slices of at most ``size`` SENDs: a run longer than ``size`` is cut into pieces of
    ``size`` (the last one shorter), shorter runs are packed whole, in order."""
    if size < 1:
        raise ValueError(f"slice size must be at least 1, not {size}")
    slices: list[list[SendRun]] = []
    current: list[SendRun] = []
    filled = 0
    for run in runs:
        n = len(run)
        if filled + n <= size:
            current.append(run)
            filled += n
            continue
        if current:
            slices.append(current)
            current, filled = [], 0
        start = 0
        while n - start > size:
            slices.append([run[start : start + size]])
            start += size
        current, filled = [run[start:] if start else run], n - start
    if current:
        slices.append(current)
    return slices


TurnHandler = Callable[[Any], bool]
"""Handles one deferred item; returns whether that used up the loop turn (a slice of SENDs
was handled)."""


class ReadBacklog:
    """Work of a read deferred to later loop turns, in stream order: ``handler(arg)`` pairs
    run by :meth:`run_turn` until a handler says it used up the turn."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[tuple[TurnHandler, object]] = deque()

    def __bool__(self) -> bool:
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def append(self, handler: TurnHandler, arg: object) -> None:
        """Queue ``handler(arg)`` after everything queued."""
        self._items.append((handler, arg))

    def run_turn(self) -> None:
        """Run queued items in order until one's handler says it used up the turn. What a
        handler queues goes before the items queued after its own (it came earlier in the
        stream). An exception from a handler propagates; the items after it stay queued."""
        while self._items:
            handler, arg = self._items.popleft()
            rest, self._items = self._items, deque()
            try:
                used = handler(arg)
            finally:
                self._items.extend(rest)
            if used:
                return

    def clear(self) -> None:
        self._items.clear()
