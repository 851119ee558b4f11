"""Replicated subscriptions (PIP-33) between two real standalones (``east``, ``west``) with
the official ``pulsar-client`` wheel: a consumer that fails over from east to west resumes
where it left off with about a second of redelivery; markers never reach a consumer and
never stay as backlog; an idle topic writes none."""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import pulsar

from magnetar.client import Client
from magnetar.testing import StandaloneProcess
from magnetar.testing.wait import wait_until

from .conftest import Pair, admin, call, ok

_log = logging.getLogger("pulsar-client")
_log.setLevel(logging.WARNING)
RECEIVE_TIMEOUT_MS = 20_000
MESSAGES = 1000
ACKED_IN_EAST = 500
REDELIVERY_WINDOW_S = 2.5
"""Messages produced in this long before the last acknowledgement in east may come again
in west: a snapshot interval (1 s), the snapshot's round trip through both clusters (a few
fsyncs and hops: up to about a second on a loaded 2-core machine) and the client's
acknowledgement grouping (0.1 s)."""
IDLE_S = 3.0
UPDATES_SETTLED_S = 2.5
T = TypeVar("T")


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=15, logger=_log)


def _path(topic: str) -> str:
    return topic.replace("persistent://", "/admin/v2/persistent/")


def _sub_stats(node: StandaloneProcess, topic: str, sub: str) -> dict[str, Any]:
    stats: dict[str, Any] = ok(node.http_url, "GET", _path(topic) + "/stats")
    return stats["subscriptions"][sub]  # type: ignore[no-any-return]


def _internal(node: StandaloneProcess, topic: str) -> dict[str, Any]:
    return ok(node.http_url, "GET", _path(topic) + "/internalStats")  # type: ignore[no-any-return]


def _unchanged_for(read: Callable[[], T], quiet_s: float) -> Callable[[], T | None]:
    """A predicate giving ``read()``'s value once it has been the same for ``quiet_s``
    (None before)."""
    seen: list[Any] = [object(), time.monotonic()]

    def predicate() -> T | None:
        value, now = read(), time.monotonic()
        if value != seen[0]:
            seen[0], seen[1] = value, now
        return value if now - seen[1] >= quiet_s else None

    return predicate


def _receive_exactly(consumer: pulsar.Consumer, count: int) -> list[int]:
    """Receive and acknowledge ``count`` messages, then require that nothing follows."""
    got = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(msg)
        got.append(int(msg.data()))
    try:
        extra = consumer.receive(timeout_millis=1500)
    except pulsar.Timeout:
        return got
    raise AssertionError(f"unexpected message {extra.data()!r} (a marker?)")


def test_a_consumer_fails_over_to_the_other_cluster_where_it_left_off(pair: Pair) -> None:
    ns = pair.replicated_namespace()
    topic = f"persistent://{ns}/failover"
    east, west = _client(pair.east.url), _client(pair.west.url)
    earliest = pulsar.InitialPosition.Earliest
    try:
        west.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        ).close()
        initial = _internal(pair.west, topic)["cursors"]["s"]["markDeletePosition"]
        plain_west = west.subscribe(topic, "plain", initial_position=earliest)
        plain_east = east.subscribe(topic, "plain", initial_position=earliest)
        in_east = east.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        )
        producer = east.create_producer(topic, batching_enabled=False)
        # snapshots are taken only while every replicator is connected
        for node, remote in ((pair.east, "west"), (pair.west, "east")):
            wait_until(
                lambda n=node, r=remote: (
                    ok(n.http_url, "GET", _path(topic) + "/stats")
                    .get("replication", {})
                    .get(r, {})
                    .get("connected")
                ),
                timeout_s=30,
                what=f"replicator to {remote} connected",
            )
        sent_at: dict[int, float] = {}
        for i in range(1, ACKED_IN_EAST + 1):
            producer.send(str(i).encode())  # at the pace of the round trip
            sent_at[i] = time.monotonic()
            msg = in_east.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
            assert int(msg.data()) == i
            in_east.acknowledge(msg)
        in_east.close()
        for i in range(ACKED_IN_EAST + 1, MESSAGES + 1):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        window_start = sent_at[ACKED_IN_EAST] - REDELIVERY_WINDOW_S
        in_window = sum(1 for at in sent_at.values() if at >= window_start)
        print(f"messages produced in the {REDELIVERY_WINDOW_S} s before the last ack: {in_window}")

        # no marker reaches a consumer: each cluster's plain consumer gets the 1,000 only
        assert _receive_exactly(plain_west, MESSAGES) == list(range(1, MESSAGES + 1))
        assert _receive_exactly(plain_east, MESSAGES) == list(range(1, MESSAGES + 1))

        # the updates arrive about a second apart: the last one has come when the position
        # moved and then stayed for a few seconds
        west_position = wait_until(
            _unchanged_for(
                lambda: _internal(pair.west, topic)["cursors"]["s"]["markDeletePosition"],
                UPDATES_SETTLED_S,
            ),
            timeout_s=30,
            what="west's subscription settled",
        )
        assert west_position != initial, "no update from east moved west's subscription"
        assert _sub_stats(pair.east, topic, "s")["isReplicated"] is True
        assert _sub_stats(pair.west, topic, "s")["isReplicated"] is True
        assert _sub_stats(pair.west, topic, "plain")["isReplicated"] is False

        in_west = west.subscribe(
            topic, "s", initial_position=earliest, replicate_subscription_state_enabled=True
        )
        got: list[int] = []
        while not got or got[-1] != MESSAGES:
            msg = in_west.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
            in_west.acknowledge(msg)
            got.append(int(msg.data()))
        print(f"west resumed at message {got[0]}")
        assert got[0] > 1, "west started from the beginning"
        assert got[0] >= ACKED_IN_EAST - in_window, (got[0], in_window)
        assert set(range(ACKED_IN_EAST + 1, MESSAGES + 1)) <= set(got)
        plain_west.close()
        plain_east.close()
        in_west.close()

        # quiet without traffic: no marker written for several seconds, so no phantom
        # backlog; the fully consumed subscriptions and the replicators show none
        wait_until(
            _unchanged_for(
                lambda: [
                    _internal(n, topic)["entriesAddedCounter"] for n in (pair.east, pair.west)
                ],
                IDLE_S,
            ),
            timeout_s=30,
            what="no entries written to the idle topic",
        )
        for node in (pair.east, pair.west):
            assert _sub_stats(node, topic, "plain")["msgBacklog"] == 0
            stats = ok(node.http_url, "GET", _path(topic) + "/stats")
            assert all(r["replicationBacklog"] == 0 for r in stats["replication"].values())
        assert _sub_stats(pair.west, topic, "s")["msgBacklog"] == 0
    finally:
        east.close()
        west.close()


async def _subscribe_replicated(url: str, topic: str, subscription: str) -> None:
    client = Client(url)
    try:
        consumer = await client.subscribe(
            topic, subscription, replicate_subscription_state_enabled=True
        )
        await consumer.close()
    finally:
        await client.close()


def test_magnetar_client_subscribes_replicated(pair: Pair) -> None:
    ns = pair.replicated_namespace()
    topic = f"persistent://{ns}/own-client"
    asyncio.run(_subscribe_replicated(pair.east.url, topic, "m"))
    assert _sub_stats(pair.east, topic, "m")["isReplicated"] is True


def test_replicated_subscription_status_is_set_by_admin(pair: Pair) -> None:
    ns = pair.replicated_namespace()
    topic = f"persistent://{ns}/status"
    client = _client(pair.east.url)
    try:
        client.subscribe(topic, "s").close()
        path = _path(topic) + "/subscription/" + urllib.parse.quote("s")
        assert _sub_stats(pair.east, topic, "s")["isReplicated"] is False
        ok(pair.east.http_url, "POST", path + "/replicatedSubscriptionStatus", True)
        assert _sub_stats(pair.east, topic, "s")["isReplicated"] is True
        ok(pair.east.http_url, "POST", path + "/replicatedSubscriptionStatus", False)
        assert _sub_stats(pair.east, topic, "s")["isReplicated"] is False
        cli = ("topics", "set-replicated-subscription-status", topic, "-s", "s")
        done = admin(pair.east, *cli, "--enable")
        assert done.returncode == 0, done.stderr
        assert _sub_stats(pair.east, topic, "s")["isReplicated"] is True
        done = admin(pair.east, *cli)
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert "--enable or --disable" in done.stderr
        missing = _path(topic) + "/subscription/nope/replicatedSubscriptionStatus"
        assert call(pair.east.http_url, "POST", missing, True).status == 404
        assert (
            call(pair.east.http_url, "POST", path + "/replicatedSubscriptionStatus", 3).status
            == 400
        )
    finally:
        client.close()
