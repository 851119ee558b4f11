"""The metadata store contract, shared by the embedded (SQLite) and ZooKeeper backends.

The model is ZooKeeper's: a tree of nodes addressed by absolute ``/``-separated paths, each
holding bytes and a version that counts modifications from 0. Nodes are persistent or
ephemeral (bound to the store's session); sequential creation appends a 10-digit counter.

Session states and what a holder of ephemeral nodes (a leader, a lock owner) may assume:

* ``CONNECTED`` — reads and writes work; ephemeral nodes created in this session exist.
* ``SUSPENDED`` — the connection is down but the session may still be alive. Writes may
  fail with :class:`ConnectionLoss`; ephemeral nodes may still exist. A leader must stop
  acting on leadership (no new fenced writes succeed anyway) until CONNECTED or LOST.
* ``LOST`` — the session expired: every ephemeral node it created is gone, and any other
  process may already hold what this one held. Every later operation raises
  :class:`SessionExpired`, and every notification and state stream ends (after
  delivering LOST). Recovery means closing this store and opening a new session.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from magnetar.common.errors import MetadataError
from magnetar.common.frozen_struct import frozen_struct

if TYPE_CHECKING:
    from magnetar.metadata.notifications import NotificationStream, SessionStateStream

VALUE_SIZE_MAX_BYTES = 1024 * 1024
"""Default largest value a node may hold (ZooKeeper's jute.maxbuffer is about the same)."""

ANY_VERSION = -2
"""``expected_version`` meaning: do not check the version."""

MUST_NOT_EXIST = -1
"""``expected_version`` for :meth:`MetadataStore.put` meaning: create; fail if it exists."""


# --- errors: both backends raise exactly these ------------------------------------------


class MetadataStoreError(MetadataError):
    """Base of the store's typed errors.

    ``op_index`` is set on errors raised by :meth:`MetadataStore.multi`: the index of the op
    that failed (``None`` elsewhere, or when the backend cannot tell).
    """

    op_index: int | None = None


class NotFound(MetadataStoreError):
    """The node (or, for create, its parent) does not exist."""


class NodeExists(MetadataStoreError):
    """A create found the node already there."""


class BadVersion(MetadataStoreError):
    """A conditional operation's expected version did not match the node's version."""


class NotEmpty(MetadataStoreError):
    """A non-recursive delete of a node that has children."""


class SessionExpired(MetadataStoreError):
    """The session is LOST; ephemeral nodes are gone. Open a new store to continue."""


class ConnectionLoss(MetadataStoreError):
    """The connection dropped during the operation; its outcome is unknown. Retriable."""

    retriable = True


class InvalidPath(MetadataStoreError):
    """A path that is not absolute, has empty or '.'/'..' segments, or ends with '/'."""


class ValueTooLarge(MetadataStoreError):
    """A value above the store's size limit."""


class NoChildrenForEphemerals(MetadataStoreError):
    """A create under an ephemeral node (ZooKeeper forbids children of ephemeral nodes)."""


class FencedByEpoch(BadVersion):
    """A leader's fenced write failed: a newer epoch exists, so this leader was deposed."""


# --- data types --------------------------------------------------------------------------


class SessionState(enum.Enum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


@frozen_struct(kw_only=False)
class Stat:
    """Facts about a node. ``version`` counts modifications, starting at 0 on creation."""

    version: int
    created_ms: int
    modified_ms: int
    ephemeral_owner: int | None
    """Session id of the owner for ephemeral nodes, ``None`` for persistent nodes."""
    children_count: int = 0


@frozen_struct(kw_only=False)
class GetResult:
    value: bytes
    stat: Stat


class EventType(enum.Enum):
    CREATED = "CREATED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    CHILDREN_CHANGED = "CHILDREN_CHANGED"


@frozen_struct(kw_only=False)
class Notification:
    """A change to ``path``. CHILDREN_CHANGED is reported on the parent's path."""

    type: EventType
    path: str


# --- operations for multi() ---------------------------------------------------------------


@frozen_struct(kw_only=False)
class CheckOp:
    """Succeeds only if ``path`` exists with ``version``."""

    path: str
    version: int


@frozen_struct(kw_only=False)
class CreateOp:
    path: str
    value: bytes
    ephemeral: bool = False
    sequential: bool = False


@frozen_struct(kw_only=False)
class SetOp:
    """Overwrite an existing node; ``version`` is the expected version or ``ANY_VERSION``."""

    path: str
    value: bytes
    version: int = ANY_VERSION


@frozen_struct(kw_only=False)
class DeleteOp:
    path: str
    version: int = ANY_VERSION


Op = CheckOp | CreateOp | SetOp | DeleteOp


@frozen_struct(kw_only=False)
class OpResult:
    """Per-op outcome of a successful multi: the created path (sequential names resolved)
    for creates, the new stat for sets, ``None`` for checks and deletes."""

    path: str
    stat: Stat | None = None


# --- the interface -----------------------------------------------------------------------


class MetadataStore(Protocol):
    """Async metadata store. Every method may raise :class:`InvalidPath`,
    :class:`SessionExpired` (session LOST) and :class:`ConnectionLoss` (SUSPENDED)."""

    @property
    def session_id(self) -> int:
        """This store's session id (owner of its ephemeral nodes)."""
        ...

    @property
    def session_state(self) -> SessionState: ...

    async def get(self, path: str) -> GetResult:
        """Value and stat. Raises :class:`NotFound`. The returned bytes are the caller's."""
        ...

    async def exists(self, path: str) -> Stat | None: ...

    async def put(self, path: str, value: bytes, expected_version: int = ANY_VERSION) -> Stat:
        """Write a persistent node.

        ``expected_version``: ``MUST_NOT_EXIST`` creates (``NodeExists`` if present);
        ``ANY_VERSION`` creates or overwrites; a version is compare-and-set (``BadVersion``
        on mismatch, ``NotFound`` if absent). Missing parents are created (persistent,
        empty). Raises :class:`ValueTooLarge` above the size limit.
        """
        ...

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        """Create a node; returns its actual path (with the sequence suffix if sequential).

        Missing parents are created as persistent empty nodes. Raises :class:`NodeExists`.
        """
        ...

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        """Raises :class:`NotFound`, :class:`BadVersion`, :class:`NotEmpty`."""
        ...

    async def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything under it; a missing path is not an error."""
        ...

    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the direct children, sorted. Raises :class:`NotFound`."""
        ...

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply every op atomically, or none. On failure raises the first failing op's
        error (``BadVersion``, ``NotFound``, ``NodeExists``, ``NotEmpty``) and nothing
        changed. Parents are NOT auto-created inside a multi."""
        ...

    def notifications(self, prefix: str = "/") -> NotificationStream:
        """A stream of changes at or under ``prefix`` (an async iterator of
        :class:`Notification`, also an async context manager; close it when done).

        Coverage starts when ``await stream.wait_ready()`` returns (at once for the
        embedded backend, after the watches are set for ZooKeeper). Embedded: every change,
        in commit order. ZooKeeper: watch semantics — rapid changes to one node may be
        coalesced, so treat a notification as "re-read this path". Create and delete also
        notify CHILDREN_CHANGED on the parent. The stream ends when the store closes. A
        slow reader never blocks the store: past an internal bound of buffered events
        the stream raises ``StreamOverflow`` (a :class:`MetadataStoreError`)."""
        ...

    def session_states(self) -> SessionStateStream:
        """Each session state change, starting with the current state; ends after LOST.
        An async iterator of :class:`SessionState`; close it when done."""
        ...

    async def close(self) -> None:
        """End the session: its ephemeral nodes are deleted. Idempotent."""
        ...


async def wait_session_lost(store: MetadataStore) -> None:
    """Return once ``store``'s session is LOST (its ephemeral nodes are gone); never if the
    store closes first."""
    async for state in store.session_states():
        if state is SessionState.LOST:
            return
