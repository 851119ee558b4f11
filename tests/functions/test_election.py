"""Membership and leader election of Functions Workers against a real ``magnetar standalone``
(workers are asyncio objects in the test process, each with its own client connection)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from magnetar.client import Client, MessageId, Timeout
from magnetar.common.errors import ProducerFenced
from magnetar.functions import (
    DEFAULT_ASSIGNMENTS_TOPIC,
    DEFAULT_COORDINATION_TOPIC,
    FunctionsWorker,
    FunctionsWorkerError,
    LeadershipChanged,
    NotLeader,
    WorkerConfig,
    WorkerInfo,
)
from magnetar.functions.admin_stats import topic_stats_url
from magnetar.functions.fenced_producer import FencedProducer
from magnetar.testing import StandaloneProcess, wait_until_async

ELECTION_TIMEOUT_S = 30.0

WorkerFactory = Callable[..., Any]


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _subscription_stats(node: StandaloneProcess, topic: str, sub: str = "participants") -> Any:
    return _get_json(topic_stats_url(node.http_url, topic))["subscriptions"][sub]


@pytest.fixture
async def workers(standalone: StandaloneProcess) -> AsyncIterator[WorkerFactory]:
    """Start workers (closed at teardown): ``await make("w1", coordination_topic=...)``."""
    started: list[FunctionsWorker] = []

    async def make(worker_id: str, port: int = 6750, **settings: Any) -> FunctionsWorker:
        # Each cluster of a test writes its own leader topics (two clusters sharing one
        # would fence each other's leaders).
        base = settings.get("assignments_topic", DEFAULT_ASSIGNMENTS_TOPIC)
        settings.setdefault("metadata_topic", f"{base}-metadata")
        settings.setdefault("packages_topic", f"{base}-packages")
        config = WorkerConfig(
            worker=WorkerInfo(worker_id, "127.0.0.1", port),
            service_url=standalone.url,
            admin_url=standalone.http_url,
            **settings,
        )
        worker = FunctionsWorker(config)
        started.append(worker)
        await worker.start()
        return worker

    try:
        yield make
    finally:
        for worker in started:
            await worker.close()


async def _sole_leader(
    node: StandaloneProcess, cluster: Sequence[FunctionsWorker]
) -> FunctionsWorker:
    """Wait until exactly one worker of ``cluster`` leads, holds the assignments producer,
    and is the coordination subscription's active consumer; return it."""

    def settled() -> FunctionsWorker | None:
        leaders = [w for w in cluster if w.is_leader]
        if len(leaders) != 1 or not leaders[0].holds_assignments:
            return None
        stats = _subscription_stats(node, leaders[0].config.coordination_topic)
        if stats["activeConsumerName"] != leaders[0].config.worker.consumer_name:
            return None
        return leaders[0]

    leader = await wait_until_async(settled, ELECTION_TIMEOUT_S, what="one settled leader")
    assert leader is not None
    return leader


async def test_one_leader_agrees_with_topic_stats(
    standalone: StandaloneProcess, workers: WorkerFactory
) -> None:
    changes: dict[str, list[LeadershipChanged]] = {}
    cluster = []
    for i in range(3):
        w = await workers(f"w{i}", port=6750 + i)
        w.add_leadership_listener(changes.setdefault(f"w{i}", []).append)
        cluster.append(w)
    assert cluster[0].config.coordination_topic == DEFAULT_COORDINATION_TOPIC
    leader = await _sole_leader(standalone, cluster)

    stats = _subscription_stats(standalone, DEFAULT_COORDINATION_TOPIC)
    assert stats["type"] == "Failover"
    assert sorted(c["consumerName"] for c in stats["consumers"]) == [
        "w0:127.0.0.1:6750",
        "w1:127.0.0.1:6751",
        "w2:127.0.0.1:6752",
    ]
    for w in cluster:
        view = await w.members()
        assert [m.worker_id for m in view.members] == ["w0", "w1", "w2"]
        assert view.leader == leader.config.worker
        assert view.foreign_consumers == ()

    # Only the leader may write assignments.
    msg_id = await leader.write_assignment("instance-0", b"assigned to w0")
    assert isinstance(msg_id, MessageId)
    for w in cluster:
        if w is not leader:
            with pytest.raises(NotLeader):
                await w.write_assignment("instance-0", b"not mine to write")
    # Each worker's listener saw leadership come and go strictly alternating, terms
    # counting up from 1, and ending in the state the worker is in.
    for w in cluster:
        seen = changes[w.config.worker.worker_id]
        assert [c.is_leader for c in seen] == [i % 2 == 0 for i in range(len(seen))]
        assert [c.term for c in seen] == [i // 2 + 1 for i in range(len(seen))]
        assert (seen[-1].is_leader if seen else False) == w.is_leader


async def test_leader_leaving_hands_over(
    standalone: StandaloneProcess, workers: WorkerFactory, unique: str
) -> None:
    coordinate = f"persistent://public/functions/coordinate-{unique}"
    assignments = f"persistent://public/functions/assignments-{unique}"
    settings = {"coordination_topic": coordinate, "assignments_topic": assignments}
    cluster = [await workers(f"w{i}", port=7000 + i, **settings) for i in range(3)]
    first = await _sole_leader(standalone, cluster)
    await first.write_assignment("k", b"from the first leader")

    await first.close()
    rest = [w for w in cluster if w is not first]
    second = await _sole_leader(standalone, rest)
    await second.write_assignment("k", b"from the second leader")
    view = await second.members()
    assert [m for m in view.members] == sorted(w.config.worker for w in rest)
    assert view.leader == second.config.worker

    async with Client(standalone.url) as client:
        reader = await client.create_reader(assignments, MessageId.earliest)
        got = [(await reader.read_next(timeout_ms=10_000)).data() for _ in range(2)]
    assert got == [b"from the first leader", b"from the second leader"]


async def test_two_worker_clusters_each_have_a_leader(
    standalone: StandaloneProcess, workers: WorkerFactory, unique: str
) -> None:
    def topics(cluster: str) -> dict[str, str]:
        return {
            "coordination_topic": f"persistent://public/functions/coordinate-{cluster}-{unique}",
            "assignments_topic": f"persistent://public/functions/assignments-{cluster}-{unique}",
        }

    w1 = await workers("w1", port=7101, **topics("a"))
    w2 = await workers("w2", port=7102, **topics("a"))
    w3 = await workers("w3", port=7103, **topics("b"))
    leader_a = await _sole_leader(standalone, [w1, w2])
    leader_b = await _sole_leader(standalone, [w3])
    assert leader_b is w3
    await leader_a.write_assignment("k", b"cluster a")
    await leader_b.write_assignment("k", b"cluster b")
    assert [m.worker_id for m in (await w1.members()).members] == ["w1", "w2"]
    assert [m.worker_id for m in (await w3.members()).members] == ["w3"]


async def test_deposed_leader_is_fenced(
    standalone: StandaloneProcess, workers: WorkerFactory, unique: str
) -> None:
    """A leader that lost its coordination consumer without being told (as a paused or
    partitioned process would) still believes it leads; its next write must fail."""
    coordinate = f"persistent://public/functions/coordinate-{unique}"
    assignments = f"persistent://public/functions/assignments-{unique}"
    settings = {"coordination_topic": coordinate, "assignments_topic": assignments}
    w1 = await workers("w1", port=7201, **settings)
    await _sole_leader(standalone, [w1])
    await w1.write_assignment("k", b"w1 while leading")
    w2 = await workers("w2", port=7202, **settings)

    consumer = w1.coordination_consumer
    assert consumer is not None
    await consumer.close()  # the broker drops w1's membership; w1 hears nothing
    new_leader = await wait_until_async(
        lambda: w2.is_leader and w2.holds_assignments, ELECTION_TIMEOUT_S, what="w2 leads"
    )
    assert new_leader
    assert w1.is_leader  # stale: it was never told
    await w2.write_assignment("k", b"w2 while leading")
    with pytest.raises(ProducerFenced):
        await w1.write_assignment("k", b"w1 after being deposed")
    with pytest.raises(NotLeader):  # and it does not take the producer back in its term
        await w1.write_assignment("k", b"w1 again")
    assert w2.holds_assignments

    async with Client(standalone.url) as client:
        reader = await client.create_reader(assignments, MessageId.earliest)
        got = [(await reader.read_next(timeout_ms=10_000)).data() for _ in range(2)]
        with pytest.raises(Timeout):  # nothing else was written
            await reader.read_next(timeout_ms=500)
    assert got == [b"w1 while leading", b"w2 while leading"]


async def test_unknown_namespace_is_a_clear_error(
    standalone: StandaloneProcess, unique: str
) -> None:
    config = WorkerConfig(
        worker=WorkerInfo("w1", "127.0.0.1", 7301),
        service_url=standalone.url,
        admin_url=standalone.http_url,
        coordination_topic=f"persistent://public/no-such-ns-{unique}/coordinate",
    )
    worker = FunctionsWorker(config)
    with pytest.raises(Exception) as info:
        await worker.start()
    assert "no-such-ns" in str(info.value)
    assert not worker.is_leader


def test_standalone_creates_the_functions_namespace(standalone: StandaloneProcess) -> None:
    namespaces = _get_json(f"{standalone.http_url}/admin/v2/namespaces/public")
    assert "public/functions" in namespaces
    assert "public/default" in namespaces
    assert DEFAULT_ASSIGNMENTS_TOPIC.startswith("persistent://public/functions/")


def _make_partitioned(node: StandaloneProcess, topic: str, partitions: int) -> None:
    url = topic_stats_url(node.http_url, topic).removesuffix("/stats") + "/partitions"
    req = urllib.request.Request(
        url,
        data=str(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10):
        pass


async def test_partitioned_topics_are_refused_with_a_clear_error(
    standalone: StandaloneProcess, unique: str
) -> None:
    coordinate = f"persistent://public/functions/coordinate-{unique}"
    assignments = f"persistent://public/functions/assignments-{unique}"
    _make_partitioned(standalone, coordinate, 2)
    _make_partitioned(standalone, assignments, 2)
    config = WorkerConfig(
        worker=WorkerInfo("w1", "127.0.0.1", 7401),
        service_url=standalone.url,
        admin_url=standalone.http_url,
        coordination_topic=coordinate,
        assignments_topic=assignments,
    )
    worker = FunctionsWorker(config)
    with pytest.raises(FunctionsWorkerError, match=r"coordination topic .* is partitioned"):
        await worker.start()
    async with Client(standalone.url) as client:
        duties = FencedProducer(client, assignments)
        with pytest.raises(FunctionsWorkerError, match=r"assignments topic .* is partitioned"):
            await duties.take()
        assert not duties.held
        # Nothing of either attempt stayed behind on the broker.
        stats = _get_json(topic_stats_url(standalone.http_url, coordinate + "-partition-0"))
        assert stats["subscriptions"].get("participants", {}).get("consumers", []) == []
        stats = _get_json(topic_stats_url(standalone.http_url, assignments + "-partition-0"))
        assert stats["publishers"] == []
