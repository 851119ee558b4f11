"""Following a leader-written topic (``metadata``, ``assignments``) from its beginning.

A :class:`TopicTail` reads the topic with a non-durable reader from the earliest message,
through the compacted view (``read_compacted``: the latest record of each key up to the
compaction horizon, then the log), and hands each record's key and payload to its ``apply``
callback, in topic order, on one task. :meth:`TopicTail.wait_for` lets a writer wait until
its own record (or the leader's marker) has been applied: read-your-writes.

``apply`` must not raise for bad records (it logs and skips them); if it does anyway, the
record is logged and skipped. The reader reconnects by itself (the client's reconnection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from magnetar.client import Client, MessageId, Reader
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError

log = logging.getLogger(__name__)

Position = tuple[int, int]
"""(ledger id, entry id) of a record."""

ApplyRecord = Callable[[str, bytes], None]
READ_RETRY_DELAY_MS = 100
"""Pause after a failed read (the reader reconnects meanwhile)."""


class TopicTail:
    """Reads ``topic`` into ``apply`` until :meth:`close`."""

    def __init__(self, client: Client, topic: str, apply: ApplyRecord, clock: Clock) -> None:
        self._client = client
        self._clock = clock
        self.topic = topic
        self._apply = apply
        self._reader: Reader | None = None
        self._task: asyncio.Task[None] | None = None
        self._applied: Position = (-1, -1)
        self._progress = asyncio.Condition()

    @property
    def applied(self) -> Position:
        """The position of the last record applied ((-1, -1) before the first)."""
        return self._applied

    async def start(self) -> None:
        """Create the reader and start reading. Raises the client's or broker's error."""
        self._reader = await self._client.create_reader(
            self.topic,
            MessageId.earliest,
            is_read_compacted=True,
            subscription_role_prefix="functions-worker",
        )
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"tail {self.topic}")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(MagnetarError):
                await reader.close()

    async def wait_for(self, position: Position, timeout_ms: int) -> bool:
        """Wait until the record at ``position`` (or a later one) has been applied; returns
        False when ``timeout_ms`` passed first."""
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self._applied >= position), timeout_ms / 1000
                )
            except TimeoutError:
                return False
        return True

    async def _run(self) -> None:
        reader = self._reader
        assert reader is not None
        while True:
            try:
                msg = await reader.read_next()
            except asyncio.CancelledError:
                raise
            except MagnetarError as exc:
                log.warning("reading %s failed (%s); reading on", self.topic, exc)
                await self._clock.sleep(READ_RETRY_DELAY_MS / 1000)
                continue
            key = msg.partition_key()
            try:
                self._apply(key, msg.data())
            except Exception:
                log.exception("record %s of %s could not be applied; skipped", key, self.topic)
            async with self._progress:
                self._applied = msg.message_id().position
                self._progress.notify_all()
