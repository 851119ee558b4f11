"""A read-through cache of node values and children, kept fresh by notifications.

For hot read paths (policies, ownership, ledger lists). Entries are dropped when a
notification says the path (or its children) changed, and re-read on the next access; a
read racing with a change never re-installs the stale value (a per-path generation is
checked before storing), and concurrent misses of one path share one read. Absence is
cached too. At most ``entries_max`` values and ``entries_max`` children lists are kept
(least recently used evicted).

Freshness: after a change commits, the cache serves the new value as soon as the
notification arrived (immediately for embedded; one watch round trip for ZooKeeper). If the
notification stream breaks (overflow), everything is dropped and a new stream is opened.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import TypeVar

from magnetar.metadata import path as paths
from magnetar.metadata.notifications import NotificationStream, StreamOverflow
from magnetar.metadata.store import EventType, GetResult, MetadataStore, NotFound

_log = logging.getLogger(__name__)

T = TypeVar("T")

CACHE_ENTRIES_MAX = 10_000


class _ReadAbandoned(Exception):
    """The read another miss was waiting for was cancelled."""


class MetadataCache:
    """Cache of ``store`` under ``prefix``. ``await start()`` before use; ``close()`` after."""

    def __init__(
        self, store: MetadataStore, prefix: str = "/", *, entries_max: int = CACHE_ENTRIES_MAX
    ) -> None:
        self.store = store
        self.prefix = paths.validate(prefix)
        self._entries_max = entries_max
        self._values: collections.OrderedDict[str, GetResult | None] = collections.OrderedDict()
        self._children: collections.OrderedDict[str, list[str] | None] = collections.OrderedDict()
        self._generation: dict[str, int] = {}
        self._reading: dict[str, tuple[tuple[int, int], asyncio.Future[GetResult | None]]] = {}
        """Values being read from the store, by path: a concurrent miss of the same path
        waits for that read instead of issuing another."""
        self._epoch = 0  # bumped when everything is dropped
        self._task: asyncio.Task[None] | None = None
        self.hits = 0
        self.misses = 0

    async def start(self) -> None:
        stream = self.store.notifications(self.prefix)
        await stream.wait_ready()
        self._task = asyncio.create_task(self._follow(stream), name=f"cache-{self.prefix}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._drop_all()

    async def _follow(self, stream: NotificationStream) -> None:
        while True:
            try:
                async for event in stream:
                    self._bump(event.path)
                    if event.type is EventType.CHILDREN_CHANGED:
                        self._children.pop(event.path, None)
                    else:
                        self._values.pop(event.path, None)
                        if event.type in (EventType.CREATED, EventType.DELETED):
                            self._children.pop(event.path, None)
                return  # the store closed: nothing will be fresh any more
            except StreamOverflow:
                _log.warning("metadata cache %s fell behind; dropping everything", self.prefix)
            finally:
                stream.close()
                self._drop_all()
            stream = self.store.notifications(self.prefix)
            await stream.wait_ready()

    def invalidate(self, path: str) -> None:
        """Forget ``path``'s value and children (a write this process has just made): the
        next read goes to the store, and a read already in flight does not install what it
        got. Its notification, when it comes, does the same again."""
        self._bump(path)
        self._values.pop(path, None)
        self._children.pop(path, None)

    def _bump(self, path: str) -> None:
        self._generation[path] = self._generation.get(path, 0) + 1

    def _drop_all(self) -> None:
        self._epoch += 1
        self._values.clear()
        self._children.clear()
        self._generation.clear()

    def _fresh(self) -> bool:
        return self._task is not None and not self._task.done()

    def _store(
        self, table: collections.OrderedDict[str, T], path: str, value: T, stamp: tuple[int, int]
    ) -> None:
        if not self._fresh() or stamp != (self._epoch, self._generation.get(path, 0)):
            return  # changed while we read: do not install what may be stale
        table[path] = value
        table.move_to_end(path)
        while len(table) > self._entries_max:
            evicted, _ = table.popitem(last=False)
            if evicted not in self._values and evicted not in self._children:
                self._generation.pop(evicted, None)

    async def get(self, path: str) -> GetResult | None:
        """Value and stat of ``path``, or ``None`` if it does not exist."""
        if path in self._values:  # (validated when it was stored)
            self.hits += 1
            self._values.move_to_end(path)
            return self._values[path]
        paths.validate(path)
        self.misses += 1
        stamp = (self._epoch, self._generation.get(path, 0))
        reading = self._reading.get(path)
        if reading is not None and reading[0] == stamp:
            # the same path's read is in flight and nothing changed since it started: its
            # answer is as fresh as a read of our own would be
            try:
                return await asyncio.shield(reading[1])
            except _ReadAbandoned:
                pass  # its reader was cancelled: read for ourselves
        shared: asyncio.Future[GetResult | None] = asyncio.get_running_loop().create_future()
        self._reading[path] = (stamp, shared)
        try:
            result: GetResult | None = await self.store.get(path)
        except NotFound:
            result = None
        except BaseException as exc:
            shared.set_exception(exc if isinstance(exc, Exception) else _ReadAbandoned())
            shared.exception()  # retrieved: nobody may be waiting
            raise
        finally:
            if self._reading.get(path, (None, None))[1] is shared:
                del self._reading[path]
        shared.set_result(result)
        if paths.is_under(path, self.prefix):
            self._store(self._values, path, result, stamp)
        return result

    async def has_child(self, path: str, name: str) -> bool:
        """Whether ``path`` has a child ``name``, by its cached children list (so asking
        about many absent children costs one read of the list, not one read each)."""
        if path in self._children:  # (only paths under the prefix are stored)
            self.hits += 1
            self._children.move_to_end(path)
            cached = self._children[path]
        else:
            cached = await self.children(path)
        return cached is not None and name in cached

    async def children(self, path: str) -> list[str] | None:
        """Sorted child names of ``path``, or ``None`` if it does not exist. The returned
        list is the caller's."""
        if path in self._children:  # (validated when it was stored)
            self.hits += 1
            self._children.move_to_end(path)
            cached = self._children[path]
            return None if cached is None else list(cached)
        paths.validate(path)
        self.misses += 1
        stamp = (self._epoch, self._generation.get(path, 0))
        try:
            result: list[str] | None = await self.store.children(path)
        except NotFound:
            result = None
        if paths.is_under(path, self.prefix):
            self._store(self._children, path, None if result is None else list(result), stamp)
        return result
