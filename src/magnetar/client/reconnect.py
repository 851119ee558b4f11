"""The reconnect loop shared by producers and consumers.

After a connection drops, a handler retries its whole connect sequence (lookup, then
PRODUCER or SUBSCRIBE) with exponential backoff until it succeeds, the handler stops
wanting to connect (it was closed meanwhile), or the broker answers with an error that
retrying cannot fix.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from magnetar.client.backoff import Backoff
from magnetar.client.errors import ConnectError
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError

log = logging.getLogger(__name__)


async def reconnect(
    *,
    what: str,
    clock: Clock,
    backoff: Backoff,
    still_connecting: Callable[[], bool],
    connect: Callable[[], Awaitable[None]],
    on_fatal: Callable[[MagnetarError], None],
) -> None:
    """Call ``connect`` after each backoff delay while ``still_connecting()`` holds.

    Returns after the first successful ``connect``, or as soon as ``still_connecting()`` is
    false. A retriable error or a :class:`ConnectError` is logged and retried; any other
    :class:`MagnetarError` is fatal: ``on_fatal(exc)`` is called once and the loop ends.
    ``what`` names the handler in log lines (e.g. ``"producer p1 on persistent://…"``).
    """
    while still_connecting():
        await clock.sleep(backoff.next_ms() / 1000)
        if not still_connecting():
            return
        try:
            await connect()
            return
        except MagnetarError as exc:
            if exc.retriable or isinstance(exc, ConnectError):
                log.info("%s: reconnect failed: %s", what, exc)
                continue
            log.warning("%s: fatal error on reconnect: %s", what, exc)
            on_fatal(exc)
            return
