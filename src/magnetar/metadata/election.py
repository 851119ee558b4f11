"""Leader election recipes on any :class:`~magnetar.metadata.store.MetadataStore`.

:class:`LeaderElection` — the Kafka-controller pattern. Candidates race to create the
ephemeral node ``<path>`` (holding their id) in one multi with a compare-and-set increment of
the persistent ``<path>_epoch`` node. The epoch is the epoch node's version, so exactly one
candidate wins each epoch and epochs strictly increase across every change of leader.
Followers watch ``<path>`` and race again when it disappears (the leader's session ended or
it resigned). The leader stamps its writes with :meth:`LeaderElection.fenced_multi`, which
adds a version check on the epoch node: once anyone else has won, the deposed leader's
writes fail with :class:`FencedByEpoch` (or :class:`SessionExpired` from its own store).

What a leader may assume, by session state (see :mod:`magnetar.metadata.store`):
CONNECTED — it leads; SUSPENDED — it may have been deposed: pause (``is_leader`` is False)
until CONNECTED or LOST; LOST — it is deposed (``wait_deposed`` returns).

:class:`SequentialElection` — the BookKeeper auditor pattern: every candidate creates an
ephemeral sequential node under a directory; the lowest sequence leads; each other candidate
watches only its predecessor, so a departure wakes one candidate, not all (no herd).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Sequence

from magnetar.metadata import path as paths
from magnetar.metadata.notifications import NotificationStream, SessionStateStream
from magnetar.metadata.store import (
    MUST_NOT_EXIST,
    BadVersion,
    CheckOp,
    CreateOp,
    EventType,
    FencedByEpoch,
    MetadataStore,
    MetadataStoreError,
    NodeExists,
    NotFound,
    Op,
    OpResult,
    SessionExpired,
    SessionState,
    SetOp,
)

CAMPAIGN_ROUNDS_MAX = 1000
"""Bound on lost races in one campaign before giving up with :class:`MetadataStoreError`
(each round needs another candidate to win and then lose leadership, so it is never hit in
practice; it turns a logic bug into an error instead of a spin)."""


async def _wait_absent(store: MetadataStore, stream: NotificationStream, path: str) -> None:
    """Return once ``path`` does not exist; ``stream`` must cover ``path`` and be ready.
    Raises :class:`SessionExpired` if the session ends meanwhile."""
    while await store.exists(path) is not None:
        async for event in stream:
            if event.path == path and event.type is EventType.DELETED:
                break
        else:
            raise SessionExpired("the session ended while waiting")


class Leadership(enum.Enum):
    FOLLOWER = "FOLLOWER"
    LEADER = "LEADER"
    SUSPENDED = "SUSPENDED"
    """Was leader; the connection is down. Do not act until LEADER again or DEPOSED."""
    DEPOSED = "DEPOSED"
    """Was leader; lost the session or the leader node. This election object is done."""


async def fenced_multi(
    store: MetadataStore, epoch_path: str, epoch: int, ops: Sequence[Op]
) -> list[OpResult]:
    """Apply ``ops`` atomically only if ``epoch`` is still the current epoch at ``epoch_path``.

    Returns the results of ``ops`` (the added check is not included). Raises
    :class:`FencedByEpoch` if a newer epoch exists, otherwise what ``multi`` raises (with
    ``op_index`` relative to ``ops``)."""
    try:
        results = await store.multi([CheckOp(epoch_path, epoch), *ops])
    except MetadataStoreError as exc:
        if exc.op_index == 0 and isinstance(exc, BadVersion | NotFound):
            raise FencedByEpoch(f"epoch {epoch} at {epoch_path} was superseded") from exc
        if exc.op_index is not None:
            exc.op_index -= 1
        raise
    return results[1:]


class LeaderElection:
    """Kafka-controller election at ``path`` for one candidate (see module docstring).

    One object per candidate and per session; after DEPOSED make a new one (on a new store
    if the session was lost). Not re-entrant: one :meth:`campaign` at a time.
    """

    def __init__(self, store: MetadataStore, path: str, candidate_id: bytes) -> None:
        self.store = store
        self.path = paths.validate(path)
        if self.path == "/":
            raise ValueError("the election node cannot be /")
        self.epoch_path = self.path + "_epoch"
        self.candidate_id = bytes(candidate_id)
        self.epoch: int | None = None
        self._state = Leadership.FOLLOWER
        self._deposed = asyncio.Event()
        self._monitor: asyncio.Task[None] | None = None

    @property
    def leadership(self) -> Leadership:
        return self._state

    @property
    def is_leader(self) -> bool:
        """True only while leading with a connected session."""
        return self._state is Leadership.LEADER

    async def current_leader(self) -> tuple[bytes, int] | None:
        """(leader id, epoch) as stored now, or ``None`` when nobody leads."""
        try:
            leader = await self.store.get(self.path)
            epoch = await self.store.get(self.epoch_path)
        except NotFound:
            return None
        return leader.value, epoch.stat.version

    async def campaign(self) -> int:
        """Compete until this candidate leads; return its epoch.

        Raises :class:`SessionExpired` if the session is lost first, and
        :class:`MetadataStoreError` for store failures (callers retry ConnectionLoss)."""
        if self._state is not Leadership.FOLLOWER:
            raise RuntimeError(f"campaign() in state {self._state.value}")
        with contextlib.suppress(NodeExists):
            await self.store.put(self.epoch_path, b"0", MUST_NOT_EXIST)
        for _ in range(CAMPAIGN_ROUNDS_MAX):
            stream = self.store.notifications(self.path)
            won = False
            try:
                await stream.wait_ready()
                epoch_now = (await self.store.get(self.epoch_path)).stat.version
                try:
                    await self.store.multi(
                        [
                            SetOp(self.epoch_path, str(epoch_now + 1).encode(), epoch_now),
                            CreateOp(self.path, self.candidate_id, ephemeral=True),
                        ]
                    )
                except NodeExists:
                    await _wait_absent(self.store, stream, self.path)
                    continue
                except BadVersion:
                    continue  # another candidate moved the epoch: look again
                won = True
                self.epoch = epoch_now + 1
                self._state = Leadership.LEADER
                self._monitor = asyncio.create_task(
                    self._watch_leadership(stream), name=f"leadership-{self.path}"
                )
                return self.epoch
            finally:
                if not won:
                    stream.close()
        raise MetadataStoreError(f"election at {self.path}: no result after many rounds")

    async def _watch_leadership(self, stream: NotificationStream) -> None:
        states = self.store.session_states()
        state_task = asyncio.create_task(self._follow_states(states))
        try:
            async for event in stream:
                if event.path == self.path and event.type in (
                    EventType.DELETED,
                    EventType.MODIFIED,
                ):
                    mine = await self._still_mine()
                    if not mine:
                        break
        except MetadataStoreError:
            pass  # the store failed under us: deposed is the safe conclusion
        finally:
            stream.close()
            states.close()
            state_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await state_task
            self._depose()

    async def _follow_states(self, states: SessionStateStream) -> None:
        async for state in states:
            if state is SessionState.SUSPENDED and self._state is Leadership.LEADER:
                self._state = Leadership.SUSPENDED
            elif state is SessionState.CONNECTED and self._state is Leadership.SUSPENDED:
                if await self._still_mine():
                    self._state = Leadership.LEADER
            elif state is SessionState.LOST:
                break
        self._depose()
        if self._monitor is not None and self._monitor is not asyncio.current_task():
            self._monitor.cancel()

    async def _still_mine(self) -> bool:
        try:
            stat = await self.store.exists(self.path)
        except MetadataStoreError:
            return self._state is not Leadership.DEPOSED
        return stat is not None and stat.ephemeral_owner == self.store.session_id

    def _depose(self) -> None:
        if self._state in (Leadership.LEADER, Leadership.SUSPENDED):
            self._state = Leadership.DEPOSED
        self._deposed.set()

    async def wait_deposed(self) -> None:
        """Return once this leader is deposed (session LOST, or its node deleted)."""
        await self._deposed.wait()

    async def fenced_multi(self, epoch: int, ops: Sequence[Op]) -> list[OpResult]:
        """:func:`fenced_multi` on this election's epoch node (see there)."""
        return await fenced_multi(self.store, self.epoch_path, epoch, ops)

    async def resign(self) -> None:
        """Give up leadership (delete the leader node if it is still ours). Idempotent."""
        if self._state in (Leadership.LEADER, Leadership.SUSPENDED):
            with contextlib.suppress(NotFound, SessionExpired):
                stat = await self.store.exists(self.path)
                if stat is not None and stat.ephemeral_owner == self.store.session_id:
                    await self.store.delete(self.path, stat.version)
        self._depose()
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor


def _sequence(name: str) -> int:
    return int(name[-paths.SEQUENCE_DIGITS :])


class SequentialElection:
    """Lowest-sequence-wins election under ``directory`` (see module docstring)."""

    NODE_PREFIX = "candidate-"

    def __init__(self, store: MetadataStore, directory: str, candidate_id: bytes) -> None:
        self.store = store
        self.directory = paths.validate(directory)
        self.candidate_id = bytes(candidate_id)
        self.node: str | None = None

    async def campaign(self) -> str:
        """Enter (once) and wait until this candidate's node is the lowest; return its path.
        Raises :class:`SessionExpired` if the session ends first."""
        if self.node is None:
            self.node = await self.store.create(
                paths.join(self.directory, self.NODE_PREFIX),
                self.candidate_id,
                ephemeral=True,
                sequential=True,
            )
        mine = paths.name(self.node)
        while True:
            names = sorted(
                (n for n in await self.store.children(self.directory) if n[-10:].isdigit()),
                key=_sequence,
            )
            if mine not in names:
                raise SessionExpired(f"{self.node} vanished: the session ended")
            index = names.index(mine)
            if index == 0:
                return self.node
            predecessor = paths.join(self.directory, names[index - 1])
            stream = self.store.notifications(predecessor)
            try:
                await stream.wait_ready()
                await _wait_absent(self.store, stream, predecessor)
            finally:
                stream.close()

    async def leader(self) -> bytes | None:
        """The id of the current leader (lowest node), or ``None`` with no candidates."""
        for name in sorted(await self.store.children(self.directory), key=_sequence):
            try:
                return (await self.store.get(paths.join(self.directory, name))).value
            except NotFound:
                continue
        return None

    async def resign(self) -> None:
        """Leave the election (delete this candidate's node). Idempotent."""
        if self.node is not None:
            with contextlib.suppress(NotFound, SessionExpired):
                await self.store.delete(self.node)
            self.node = None
