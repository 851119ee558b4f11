"""Disk-fault soak (issue 14): fill/free cycles of a standalone's small data disk while the
official client produces, with a SIGKILL in every phase. At the end every acknowledged
message is in the topic, and the topic took writes again after the last fault without a
restart.

Phases of one cycle, each ending in a kill and a restart unless noted:

1. producing on a healthy disk;
2. disk full, sends failing (space is given back between the kill and the restart: a
   standalone cannot create its files on a full disk);
3. disk full, then space back, killed before the topic has recovered;
4. disk full, then space back, and no kill: sends refused meanwhile must now be stored.

Bounded in CI (2 cycles); ``MAGNETAR_LONG_TESTS=1`` runs 6.
"""

from __future__ import annotations

import os

import pulsar

from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.disk import Tmpfs, fill_disk

from .conftest import (
    CLIENT_LOG,
    Http,
    close_client,
    read_all,
    retrying_sends,
    send_until_refused,
)

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
CYCLES = 6 if LONG else 2
BURST = 60
"""Messages sent in each phase (16 KiB each: ~1 MiB)."""


def test_fill_free_cycles_with_kills_lose_no_acknowledged_message(
    small_disk: Tmpfs, node: StandaloneProcess
) -> None:
    node.start()
    http = Http(node)
    log = CLIENT_LOG.mark()
    filler = small_disk.path / "filler"
    client = pulsar.Client(node.url, operation_timeout_seconds=30, logger=log.logger)
    try:
        sends = retrying_sends(client)

        def stored(numbers: range, what: str) -> None:
            wait_until(lambda: sends.settled(numbers), timeout_s=90, what=what)
            assert set(numbers) <= sends.acked, sends.failed

        def start_and_reconnect() -> None:
            """Restart, and wait until the client's producer is back (so the next fault
            hits a connected producer, not its reconnection backoff)."""
            node.start()
            stored(sends.send(5), "sends after a restart")

        def restart() -> None:
            node.kill()
            start_and_reconnect()

        def fill_until_sends_fail() -> None:
            fill_disk(filler)
            send_until_refused(sends, log)

        for cycle in range(CYCLES):
            # 1. healthy
            stored(sends.send(BURST), "a burst on a healthy disk")
            sends.send(BURST)
            restart()
            # 2. full
            fill_until_sends_fail()
            node.kill()
            filler.unlink()
            start_and_reconnect()
            # 3. space back, not yet recovered
            fill_until_sends_fail()
            filler.unlink()
            sends.send(BURST)
            restart()
            # 4. full, space back, no kill: the same process takes writes again
            fill_until_sends_fail()
            filler.unlink()
            stored(sends.send(BURST), f"sends after space came back (cycle {cycle})")
            wait_until(lambda: http.get("/ready") == (200, "ok"), timeout_s=30, what="ready")
        everything = range(sends.sent)
        wait_until(lambda: sends.settled(everything), timeout_s=120, what="every send settled")
        assert not sends.failed, sends.failed  # no send timeout: the client retries
    finally:
        close_client(client)
    node.kill()
    node.start()
    try:
        missing = sends.acked - read_all(node.url)
        assert not missing, f"{len(missing)} acknowledged messages lost: {sorted(missing)[:10]}"
    finally:
        node.kill()
