"""Async streams of notifications and session states, fed by a backend from any thread.

A stream is registered with its backend when it is created (not on first iteration), so it
sees every change applied after the creating call returned. Each stream has a bounded
buffer: a reader that falls more than ``buffered_max`` events behind gets
:class:`StreamOverflow` after draining what was buffered, instead of the backend blocking or
memory growing without limit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Generic, TypeVar

from magnetar.metadata import path as paths
from magnetar.metadata.store import MetadataStoreError, Notification, SessionState

T = TypeVar("T")

NOTIFICATIONS_BUFFERED_MAX = 10_000
"""Default bound on events a notification stream buffers for a slow reader."""


class StreamOverflow(MetadataStoreError):
    """A notification stream's reader fell too far behind; events were dropped. Re-read the
    state you care about and open a new stream."""


class _Stream(Generic[T]):
    """An async iterator over items pushed by a producer; ends when closed."""

    def __init__(self, on_close: Callable[[_Stream[T]], None], buffered_max: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._items: collections.deque[T] = collections.deque()
        self._buffered_max = buffered_max
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._overflowed = False
        self._on_close = on_close

    # -- producer side: call from the stream's loop thread (push) or any thread (threadsafe)

    def push(self, item: T) -> None:
        if self._closed or self._overflowed:
            return
        if len(self._items) >= self._buffered_max:
            self._overflowed = True
        else:
            self._items.append(item)
        self._wake()

    def push_threadsafe(self, item: T) -> None:
        # A closed loop means nobody can read this stream any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.push, item)

    def end(self) -> None:
        """Producer side: no more items; the reader gets the buffered ones, then stops."""
        self._closed = True
        self._wake()

    def end_threadsafe(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.end)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- consumer side -------------------------------------------------------------------

    def __aiter__(self) -> _Stream[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            if self._items:
                return self._items.popleft()
            if self._overflowed:
                self.close()
                raise StreamOverflow(f"reader fell {self._buffered_max} events behind")
            if self._closed:
                raise StopAsyncIteration
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """Consumer side: stop receiving; idempotent."""
        if not self._closed:
            self._closed = True
            self._wake()
        self._on_close(self)

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> _Stream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class NotificationStream(_Stream[Notification]):
    """Notifications at or under ``prefix``. Use as ``async with store.notifications(p) as s``
    or close it when done, so the backend stops feeding it."""

    def __init__(
        self, prefix: str, on_close: Callable[[_Stream[Notification]], None], buffered_max: int
    ) -> None:
        super().__init__(on_close, buffered_max)
        self.prefix = paths.validate(prefix)
        self._ready = asyncio.Event()
        self._ready.set()

    async def wait_ready(self) -> None:
        """Return once the backend watches everything under ``prefix``: every change
        applied after this returns is notified. Immediate for the embedded backend; the
        ZooKeeper backend must first set its watches (one round trip per watched node)."""
        await self._ready.wait()

    def mark_ready_later(self) -> None:
        """Backend side: the stream is not yet complete until :meth:`mark_ready`."""
        self._ready.clear()

    def mark_ready(self) -> None:
        self._ready.set()

    def matches(self, notification: Notification) -> bool:
        return paths.is_under(notification.path, self.prefix)


class SessionStateStream(_Stream[SessionState]):
    """Session state changes, starting with the state current at creation."""


class StreamHub:
    """The set of open streams of one store; thread-safe registration is not needed because
    streams are created and closed on the store's loop thread."""

    def __init__(self, buffered_max: int = NOTIFICATIONS_BUFFERED_MAX) -> None:
        self.buffered_max = buffered_max
        self.notification_streams: set[NotificationStream] = set()
        self.state_streams: set[SessionStateStream] = set()

    def open_notifications(self, prefix: str) -> NotificationStream:
        stream = NotificationStream(prefix, self._discard_notification, self.buffered_max)
        self.notification_streams.add(stream)
        return stream

    def open_states(self, current: SessionState) -> SessionStateStream:
        stream = SessionStateStream(self._discard_state, self.buffered_max)
        stream.push(current)
        self.state_streams.add(stream)
        return stream

    def _discard_notification(self, stream: _Stream[Notification]) -> None:
        self.notification_streams.discard(stream)

    def _discard_state(self, stream: _Stream[SessionState]) -> None:
        self.state_streams.discard(stream)

    def publish(self, notification: Notification, *, threadsafe: bool) -> None:
        for stream in list(self.notification_streams):
            if stream.matches(notification):
                if threadsafe:
                    stream.push_threadsafe(notification)
                else:
                    stream.push(notification)

    def publish_state(self, state: SessionState, *, threadsafe: bool) -> None:
        for stream in list(self.state_streams):
            if threadsafe:
                stream.push_threadsafe(state)
            else:
                stream.push(state)

    def end_all(self, *, threadsafe: bool) -> None:
        streams: list[_Stream[Notification] | _Stream[SessionState]] = [
            *self.notification_streams,
            *self.state_streams,
        ]
        for stream in streams:
            if threadsafe:
                stream.end_threadsafe()
            else:
                stream.end()
        self.notification_streams.clear()
        self.state_streams.clear()
