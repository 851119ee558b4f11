"""``logTopic``: what a function logs through ``context.get_logger()`` is also published to
a topic, one message per record (the formatted line; properties ``loglevel``, ``instance``,
``fqfn``), as Pulsar's instances do.

Records are handed to the instance's event loop from whatever thread logs them and sent
without waiting; at most :data:`LOG_PENDING_MAX` wait at once, and records beyond that are
dropped and counted (logging must never block or fail the function).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from magnetar.common.errors import MagnetarError

LOG_PENDING_MAX = 1_000

SendFn = Callable[[bytes, dict[str, str]], Awaitable[object]]


class LogTopicHandler(logging.Handler):
    def __init__(
        self, loop: asyncio.AbstractEventLoop, send: SendFn, *, fqfn: str, instance_id: int
    ) -> None:
        super().__init__()
        self._loop = loop
        self._send = send
        self._fqfn = fqfn
        self._instance_id = instance_id
        self._pending = 0
        self.dropped = 0
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if self._pending >= LOG_PENDING_MAX or self._loop.is_closed():
            self.dropped += 1
            return
        try:
            line = self.format(record).encode()
        except Exception:  # a record whose arguments do not format: logging's own rule
            self.handleError(record)
            return
        properties = {
            "loglevel": record.levelname,
            "instance": str(self._instance_id),
            "fqfn": self._fqfn,
        }
        self._pending += 1
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self._start, line, properties)

    def _start(self, line: bytes, properties: dict[str, str]) -> None:
        task = asyncio.ensure_future(self._deliver(line, properties))
        task.add_done_callback(lambda _t: None)

    async def _deliver(self, line: bytes, properties: dict[str, str]) -> None:
        try:
            await self._send(line, properties)
        except (MagnetarError, OSError):
            self.dropped += 1
        finally:
            self._pending -= 1
