"""The metadata store: one contract (:mod:`magnetar.metadata.store`), two backends.

Open a store with :func:`connect`:

* ``memory:`` — a private in-memory database (tests);
* ``memory:<name>`` — an in-memory database shared by every store of this process that
  names it (tasks competing for locks and elections in one process);
* ``sqlite:///abs/path/metadata.db`` (or ``sqlite://rel/path``) — the durable embedded
  backend for ``magnetar standalone``; one process per file;
* ``zk://host:port[,host:port...][/chroot]`` — ZooKeeper, for clusters.
"""

from __future__ import annotations

from magnetar.common.clock import Clock
from magnetar.metadata.store import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    VALUE_SIZE_MAX_BYTES,
    BadVersion,
    CheckOp,
    ConnectionLoss,
    CreateOp,
    DeleteOp,
    EventType,
    FencedByEpoch,
    GetResult,
    InvalidPath,
    MetadataStore,
    MetadataStoreError,
    NoChildrenForEphemerals,
    NodeExists,
    NotEmpty,
    NotFound,
    Notification,
    Op,
    OpResult,
    SessionExpired,
    SessionState,
    SetOp,
    Stat,
    ValueTooLarge,
    wait_session_lost,
)

__all__ = [
    "ANY_VERSION",
    "MUST_NOT_EXIST",
    "VALUE_SIZE_MAX_BYTES",
    "BadVersion",
    "CheckOp",
    "ConnectionLoss",
    "CreateOp",
    "DeleteOp",
    "EventType",
    "FencedByEpoch",
    "GetResult",
    "InvalidPath",
    "MetadataStore",
    "MetadataStoreError",
    "NoChildrenForEphemerals",
    "NodeExists",
    "NotEmpty",
    "NotFound",
    "Notification",
    "Op",
    "OpResult",
    "SessionExpired",
    "SessionState",
    "SetOp",
    "Stat",
    "ValueTooLarge",
    "connect",
    "wait_session_lost",
]


async def connect(
    url: str,
    *,
    session_timeout_s: float = 10.0,
    clock: Clock | None = None,
    value_size_max_bytes: int = VALUE_SIZE_MAX_BYTES,
) -> MetadataStore:
    """Open a session on the store at ``url`` (forms in the module docstring).

    ``session_timeout_s`` applies to ZooKeeper (the server may clamp it to its
    min/max session timeout); embedded sessions live until closed. Raises ``ValueError`` for
    an unknown URL form, :class:`~magnetar.common.errors.MetadataError` if the store cannot
    be reached (ZooKeeper: within ``session_timeout_s``) or an embedded file is held by
    another process. The caller owns the store and must ``await store.close()``.
    """
    if url.startswith(("memory:", "sqlite://")):
        from magnetar.metadata.embedded import EmbeddedStore

        return await EmbeddedStore.open(url, clock=clock, value_size_max_bytes=value_size_max_bytes)
    if url.startswith("zk://"):
        from magnetar.metadata.zookeeper import ZooKeeperStore

        return await ZooKeeperStore.open(
            url,
            session_timeout_s=session_timeout_s,
            clock=clock,
            value_size_max_bytes=value_size_max_bytes,
        )
    raise ValueError(f"unknown metadata store URL: {url!r}")
