"""Producer access modes of one topic (reference §6.2; Java ``AbstractTopic.addProducer``,
``incrementTopicEpochIfNeeded``, ``internalAddProducer``, ``handleProducerRemoved``).

Sans-IO: :class:`ProducerAccess` takes admission requests and departures and returns
results/effects; the shell turns them into PRODUCER_SUCCESS / ERROR / CLOSE_PRODUCER frames
and persists the topic epoch (:attr:`ProducerAccess.topic_epoch`) before replying.

Rules, in the order they are checked:

* **Shared**: refused with :class:`ProducerBusy` while an exclusive producer holds the topic
  or exclusive producers wait. A second producer with the **same name** is refused with
  :class:`ProducerBusy`, unless it is the *successor* of the registered one (same
  connection, same producer id, larger client ``epoch``: a reconnect on the same
  connection), which replaces it (effect: :class:`CloseProducer` of the old one, without
  telling the client).
* **Exclusive**: refused with :class:`ProducerFenced` if it presents a ``topic_epoch``
  older than the topic's, or if any producer is connected or waiting.
* **WaitForExclusive**: a stale ``topic_epoch`` is refused with :class:`ProducerFenced`
  *before* anything else (Java queues first and checks the epoch only when the topic is
  free, so a producer fenced by ExclusiveWithFencing that re-registers while the new holder
  is connected would sit in the queue and its client's sends would hang until they time
  out). Otherwise, if any producer is connected, the request is queued (FIFO, at most
  ``waiting_max``, else :class:`ProducerBusy`; Java's queue is unbounded) and the result is
  ``ready=False`` (reply ``PRODUCER_SUCCESS{producer_ready=false}`` now); when the holder
  leaves, the head of the queue becomes the holder (effect :class:`ProducerReady` → second
  PRODUCER_SUCCESS with the same request id, ready=true), or fails with
  :class:`FailWaitingProducer` if its epoch went stale meanwhile. The head of the queue is
  promoted whenever the topic has no connected producer left (Java promotes only when an
  *exclusive* holder leaves, so a producer queued behind Shared producers would wait
  forever there). Queued producers do not count as connected producers: the shell's
  ``max_producers_per_topic`` check counts connected ones only, as Java's
  ``isProducersExceeded`` (its counter grows in ``internalAddProducer``, which runs once a
  queued producer is promoted).
* **ExclusiveWithFencing**: a stale ``topic_epoch`` is refused with :class:`ProducerFenced`
  (checked first here: Java fences the current producers before this check, so a stale
  re-registration would knock out the new holder; we refuse it without side effects).
  Otherwise every connected producer is closed (:class:`CloseProducer` with
  ``notify_client=True`` → CLOSE_PRODUCER; their re-registration then carries the old,
  stale epoch) and every waiting producer fails (:class:`FailWaitingProducer`,
  ProducerFenced "Fenced out"), and the newcomer becomes the holder.

Topic epoch: a new exclusive holder that presents ``topic_epoch`` sets the topic's epoch to
it; otherwise the epoch is incremented (starting from -1, so the first is 0). The reply
carries :attr:`ProducerAccess.topic_epoch` (also for Shared producers once an epoch exists,
as Java does).

Producers are identified by :class:`ProducerKey` (connection id, producer id).
"""

from __future__ import annotations

import enum

from magnetar.common.errors import MagnetarError, ProducerBusy, ProducerFenced
from magnetar.common.frozen_struct import frozen_struct

DEFAULT_WAITING_PRODUCERS_MAX = 1_000
"""Bound of the WaitForExclusive queue of one topic (Java has none)."""


class AccessMode(enum.IntEnum):
    """Wire ``ProducerAccessMode``."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


@frozen_struct(kw_only=False)
class ProducerKey:
    connection_id: int
    producer_id: int


@frozen_struct(kw_only=False)
class ProducerRequest:
    """A PRODUCER command, reduced to what admission needs.

    ``epoch`` is the client's reconnect counter (``CommandProducer.epoch``);
    ``topic_epoch`` is ``CommandProducer.topic_epoch`` if present.
    """

    key: ProducerKey
    name: str
    access_mode: AccessMode = AccessMode.Shared
    epoch: int = 0
    topic_epoch: int | None = None


@frozen_struct(kw_only=False)
class CloseProducer:
    """Close this producer. ``notify_client``: send CLOSE_PRODUCER (fencing) or not (replaced)."""

    key: ProducerKey
    notify_client: bool


@frozen_struct(kw_only=False)
class FailWaitingProducer:
    """A queued WaitForExclusive producer is refused: reply ERROR with ``error``'s code."""

    key: ProducerKey
    error: MagnetarError


@frozen_struct(kw_only=False)
class ProducerReady:
    """A queued producer now holds the topic: send PRODUCER_SUCCESS{producer_ready=true}."""

    key: ProducerKey
    topic_epoch: int


ProducerEffect = CloseProducer | FailWaitingProducer | ProducerReady


@frozen_struct(kw_only=False)
class Admission:
    """Outcome of :meth:`ProducerAccess.add`: ``ready`` False means queued (WaitForExclusive)."""

    ready: bool
    topic_epoch: int | None
    effects: tuple[ProducerEffect, ...] = ()


_NO_WAITING: list[ProducerRequest] = []
"""The wait queue of every producer access with none waiting (never added to)."""


class ProducerAccess:
    """Who may produce on one topic. ``topic_epoch`` restores the persisted epoch, if any."""

    __slots__ = (
        "_exclusive_name",
        "_producers",
        "_topic_epoch",
        "_waiting",
        "_waiting_max",
    )

    def __init__(
        self, topic_epoch: int | None = None, waiting_max: int = DEFAULT_WAITING_PRODUCERS_MAX
    ) -> None:
        self._topic_epoch = topic_epoch
        self._waiting_max = waiting_max
        self._producers: dict[str, ProducerRequest] = {}
        self._exclusive_name: str | None = None
        self._waiting: list[ProducerRequest] = _NO_WAITING
        """Queued WaitForExclusive requests (rarely any: the shared empty list, never added
        to, until the first; a deque is 760 B empty)."""

    @property
    def topic_epoch(self) -> int | None:
        return self._topic_epoch

    @property
    def exclusive_producer_name(self) -> str | None:
        return self._exclusive_name

    @property
    def has_exclusive_producer(self) -> bool:
        return self._exclusive_name is not None

    @property
    def producers(self) -> dict[str, ProducerKey]:
        """Connected producers by name (a copy)."""
        return {name: req.key for name, req in self._producers.items()}

    @property
    def waiting(self) -> list[ProducerKey]:
        """Queued WaitForExclusive producers, head first."""
        return [req.key for req in self._waiting]

    def add(self, req: ProducerRequest) -> Admission:
        """Admit a producer; raises :class:`ProducerBusy` or :class:`ProducerFenced`."""
        mode = req.access_mode
        busy_exclusive = self._exclusive_name is not None or bool(self._waiting)
        if mode is AccessMode.Shared:
            if busy_exclusive:
                raise ProducerBusy(
                    f"Topic has an existing exclusive producer: {self._exclusive_name}"
                )
            replaced = self._check_name(req)
            self._producers[req.name] = req
            closed = (CloseProducer(replaced, notify_client=False),) if replaced else ()
            return Admission(True, self._topic_epoch, closed)

        if mode is AccessMode.Exclusive:
            self._check_stale(req)
            if busy_exclusive:
                raise ProducerFenced(
                    f"Topic has an existing exclusive producer: {self._exclusive_name}"
                )
            if self._producers:
                raise ProducerFenced("Topic has existing shared producers")
            self._become_exclusive(req)
            return Admission(True, self._topic_epoch)

        if mode is AccessMode.WaitForExclusive:
            # Stale first: a fenced producer re-registering must be refused, not queued
            # (queued, its client would wait for a turn that fencing meant it never gets).
            self._check_stale(req)
            if self._exclusive_name is not None or self._producers:
                if len(self._waiting) >= self._waiting_max:
                    raise ProducerBusy(
                        f"Topic reached max waiting exclusive producers limit ({self._waiting_max})"
                    )
                if self._waiting is _NO_WAITING:
                    self._waiting = []
                self._waiting.append(req)
                return Admission(False, None)
            self._become_exclusive(req)
            return Admission(True, self._topic_epoch)

        if mode is AccessMode.ExclusiveWithFencing:
            self._check_stale(req)
            effects: list[ProducerEffect] = [
                FailWaitingProducer(w.key, ProducerFenced("Fenced out")) for w in self._waiting
            ]
            self._waiting.clear()
            effects.extend(
                CloseProducer(p.key, notify_client=True) for p in self._producers.values()
            )
            self._producers.clear()
            self._exclusive_name = None
            self._become_exclusive(req)
            return Admission(True, self._topic_epoch, tuple(effects))

        raise ValueError(f"Invalid producer access mode: {mode!r}")

    def remove(self, key: ProducerKey) -> list[ProducerEffect]:
        """A producer closed or its connection dropped (also for queued ones).

        If it held the topic exclusively, the head of the wait queue takes over
        (:class:`ProducerReady`). Unknown keys are ignored.
        """
        for i, waiting in enumerate(self._waiting):
            if waiting.key == key:
                del self._waiting[i]
                return []
        name = next((n for n, r in self._producers.items() if r.key == key), None)
        if name is None:
            return []
        del self._producers[name]
        if name == self._exclusive_name:
            self._exclusive_name = None
        return self._promote()

    def _promote(self) -> list[ProducerEffect]:
        """The topic has no connected producer: the head of the queue takes it. A waiting
        producer whose ``topic_epoch`` went stale meanwhile would be refused instead (not
        reachable today: the epoch moves only while nobody waits; kept as a guard)."""
        effects: list[ProducerEffect] = []
        while not self._producers and self._waiting:
            nxt = self._waiting.pop(0)
            try:
                self._check_stale(nxt)
            except ProducerFenced as exc:
                effects.append(FailWaitingProducer(nxt.key, exc))
                continue
            epoch = self._become_exclusive(nxt)
            effects.append(ProducerReady(nxt.key, epoch))
        return effects

    def _check_name(self, req: ProducerRequest) -> ProducerKey | None:
        existing = self._producers.get(req.name)
        if existing is None:
            return None
        if existing.key == req.key and req.epoch > existing.epoch:
            return existing.key
        raise ProducerBusy(f"Producer with name '{req.name}' is already connected to topic")

    def _check_stale(self, req: ProducerRequest) -> None:
        current = -1 if self._topic_epoch is None else self._topic_epoch
        if req.topic_epoch is not None and req.topic_epoch < current:
            raise ProducerFenced(
                f"Topic epoch has already moved. Current epoch: {current}, "
                f"Producer epoch: {req.topic_epoch}"
            )

    def _become_exclusive(self, req: ProducerRequest) -> int:
        self._check_name(req)
        if req.topic_epoch is not None:
            epoch = req.topic_epoch
        else:
            epoch = (-1 if self._topic_epoch is None else self._topic_epoch) + 1
        self._topic_epoch = epoch
        self._exclusive_name = req.name
        self._producers[req.name] = req
        return epoch
