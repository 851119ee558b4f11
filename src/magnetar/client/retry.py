"""Retrying an operation until its timeout has passed (lookups, binary and HTTP).

The timeout given is the time spent: retries back off exponentially, the last delay is cut
to end at the deadline, and one more attempt is made there. The first retriable failure is
said once (a log warning naming what is being waited for), so a client facing a broker that
is down does not wait silently.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar.client.backoff import Backoff
from magnetar.client.errors import Timeout
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError

T = TypeVar("T")

log = logging.getLogger(__name__)

FIRST_RETRY_DELAY_MS = 100


async def retry_until_timeout(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    clock: Clock,
    timeout_s: float,
    waiting_for: str,
    rng: random.Random | None = None,
) -> T:
    """Run ``attempt`` until it succeeds (its result is returned) or fails with an error
    that is not retriable (raised as is). Retriable :class:`MagnetarError`\\ s are retried
    until ``timeout_s`` has passed on ``clock``; then :class:`Timeout` is raised, naming
    ``what``, the timeout, the number of attempts and the last error. ``waiting_for`` (a URL)
    goes into the one warning logged at the first retriable failure."""
    deadline_s = clock.monotonic_s() + timeout_s
    backoff = Backoff(FIRST_RETRY_DELAY_MS, max(FIRST_RETRY_DELAY_MS, int(timeout_s * 2000)), rng)
    attempts = 0
    while True:
        attempts += 1
        try:
            return await attempt()
        except MagnetarError as exc:
            if not exc.retriable:
                raise
            remaining_s = deadline_s - clock.monotonic_s()
            if remaining_s <= 0:
                raise Timeout(
                    f"{what} did not succeed within {timeout_s:g} s ({attempts} attempts): {exc}"
                ) from exc
            if attempts == 1:
                log.warning(
                    "%s: %s; waiting for %s, retrying for up to %g s",
                    what, exc, waiting_for, timeout_s,
                )  # fmt: skip
            await clock.sleep(min(backoff.next_ms() / 1000, remaining_s))
