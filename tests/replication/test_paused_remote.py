"""A remote cluster that stops answering (SIGSTOPped: its TCP connections stay open) while
its replicator is idle, or while the topic changes owner: ``east``'s topic stats say
``connected: false`` within :data:`NOTICED_S`, and the topic moves as fast as it does with
the remote up (the old owner does not wait for the paused remote to close its replicator).

Two standalones of their own (``east`` replicating to ``south``): the paused one must not be
the session's pair."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneProcess
from magnetar.testing.wait import wait_until

from .conftest import call, ok
from .local_clusters import register, replicated_namespace, replication_stats

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)

NOTICED_S = 7.0
"""How soon stats must say a paused remote is not connected: the replicator's stall
detection is 5 s (STALLED_AFTER_S), plus a poll's slack."""
MOVED_S = 10.0
"""How long unloading the topic may take with the remote paused."""


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[tuple[StandaloneProcess, StandaloneProcess]]:
    with (
        StandaloneProcess(tmp_path / "east", "--cluster-name", "east", "--no-functions-worker") as east,
        StandaloneProcess(tmp_path / "south", "--cluster-name", "south", "--no-functions-worker") as south,
    ):  # fmt: skip
        register(east.http_url, "south", south.url, south.http_url)
        register(south.http_url, "east", east.url, east.http_url)
        try:
            yield east, south
        finally:
            if south.proc is not None and south.proc.poll() is None:
                os.kill(south.proc.pid, signal.SIGCONT)


def _replicating_topic(east: StandaloneProcess, south: StandaloneProcess, name: str) -> str:
    """A replicated topic of a new namespace, its replicator connected and caught up after
    a few messages."""
    ns = replicated_namespace({"east": east.http_url, "south": south.http_url})
    topic = f"persistent://{ns}/{name}"
    client = pulsar.Client(east.url, operation_timeout_seconds=30, logger=_log)
    try:
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m-{i}".encode())
    finally:
        client.close()
    wait_until(
        lambda: (
            replication_stats(east.http_url, topic, "south").get("connected") is True
            and replication_stats(east.http_url, topic, "south").get("replicationBacklog") == 0
        ),
        timeout_s=30,
        what="the replicator connected and caught up",
    )
    return topic


def _not_connected_within(admin: str, topic: str, bound_s: float) -> float:
    """Seconds until stats say ``connected: false`` (fails after ``bound_s``, naming what
    they said)."""
    start = time.monotonic()
    seen: list[object] = []

    def said_not_connected() -> bool:
        seen.append(replication_stats(admin, topic, "south").get("connected", "(absent)"))
        return seen[-1] is False

    try:
        wait_until(said_not_connected, timeout_s=bound_s, what="stats say south is not connected")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; stats said connected: {seen[-5:]}") from None
    return time.monotonic() - start


def test_an_idle_replicator_notices_a_paused_remote(
    sites: tuple[StandaloneProcess, StandaloneProcess],
) -> None:
    east, south = sites
    topic = _replicating_topic(east, south, "idle")
    assert south.proc is not None
    os.kill(south.proc.pid, signal.SIGSTOP)
    took = _not_connected_within(east.http_url, topic, NOTICED_S)
    print(f"idle: stats said not connected {took:.1f} s after the pause")


def test_a_topic_moving_while_the_remote_is_paused_reports_not_connected(
    sites: tuple[StandaloneProcess, StandaloneProcess],
) -> None:
    east, south = sites
    topic = _replicating_topic(east, south, "moving")
    client = pulsar.Client(east.url, operation_timeout_seconds=30, logger=_log)
    try:
        producer = client.create_producer(topic, send_timeout_millis=60_000)
        stop = threading.Event()

        def stream() -> None:
            i = 0
            while not stop.is_set():
                producer.send_async(f"s-{i}".encode(), lambda *_: None)
                i += 1
                stop.wait(0.01)

        sender = threading.Thread(target=stream, daemon=True)
        sender.start()
        try:
            wait_until(
                lambda: (
                    int(replication_stats(east.http_url, topic, "south").get("msgOutCounter", 0))
                    > 20
                ),
                timeout_s=30,
                what="the stream replicating",
            )
            assert south.proc is not None
            os.kill(south.proc.pid, signal.SIGSTOP)
            path = topic.replace("persistent://", "/admin/v2/persistent/") + "/unload"
            start = time.monotonic()
            ok(east.http_url, "PUT", path)
            unloaded_s = time.monotonic() - start
            print(f"unload with the remote paused took {unloaded_s:.1f} s")
            assert unloaded_s < MOVED_S, (
                f"unloading waited {unloaded_s:.1f} s for the paused remote"
            )
            # the next owner (the lookup loads it again) reports the truth
            lookup = "/lookup/v2/topic/" + topic.replace("://", "/")
            assert call(east.http_url, "GET", lookup).status == 200
            took = _not_connected_within(east.http_url, topic, NOTICED_S)
            print(f"moved: stats said not connected {took:.1f} s after the unload")
        finally:
            stop.set()
            sender.join(10)
    finally:
        os.kill(south.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        client.close()
