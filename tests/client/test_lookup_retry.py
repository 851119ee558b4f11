"""Lookups against a broker that is down: retried until the operation timeout has passed
(not given up early), said once while waiting, and reported with the timeout given.

Binary and HTTP lookups to a loopback port nothing listens on (refused at once); the retry
delays run on a manual clock, so the test reads logical times, not wall time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket

import pytest

from magnetar.client.connection_pool import ConnectionPool
from magnetar.client.errors import Timeout
from magnetar.client.http_lookup import HttpLookupService
from magnetar.client.lookup import Lookup, LookupService
from magnetar.common.clock import ManualClock
from magnetar.testing import wait_until_async

STEP_S = 0.05


def _down_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("scheme", ["pulsar", "http"])
async def test_lookup_retries_until_the_operation_timeout_and_names_it(
    scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    url = f"{scheme}://127.0.0.1:{_down_port()}"
    pool = ConnectionPool(
        authentication=None, clock=clock, ssl_context=None, tls_validate_hostname=False,
        connect_timeout_s=1.0, keep_alive_interval_s=30.0,
    )  # fmt: skip
    lookup: Lookup = (
        LookupService(
            pool, url, request_ids=itertools.count(), clock=clock, operation_timeout_s=3.0,
            use_tls=False,
        )
        if scheme == "pulsar"
        else HttpLookupService(url, clock=clock, operation_timeout_s=3.0, use_tls=False)
    )  # fmt: skip
    start_s = clock.monotonic_s()
    caplog.set_level(logging.WARNING, logger="magnetar.client")
    task = asyncio.ensure_future(lookup.partitions("persistent://public/default/t"))
    try:
        while not task.done():
            await wait_until_async(
                lambda: clock.sleepers > 0 or task.done(), 10, what="a retry delay or the end"
            )
            if not task.done():
                clock.advance(STEP_S)
        with pytest.raises(Timeout) as raised:
            await task
    finally:
        pool.close()
    gave_up_after_s = clock.monotonic_s() - start_s
    assert gave_up_after_s >= 3.0 - 1e-6, gave_up_after_s  # not before the timeout given
    assert gave_up_after_s < 3.0 + 2 * STEP_S
    message = str(raised.value)
    assert "3 s" in message and url in message and "persistent://public/default/t" in message
    waiting = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waiting) == 1, caplog.text  # said once, not once per attempt
    assert url in waiting[0] and "3 s" in waiting[0]
