"""Worker clusters of real worker processes (``python -m magnetar.functions``) against a real
``magnetar standalone``: leaders as ``admin functions-worker get-cluster-leader`` and the
coordination topic's stats show them, writes forwarded to the leader, a killed worker's
instances reassigned, a paused (deposed) leader unable to write."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar

from magnetar.client import Client, MessageId
from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.processes import (
    ELECTION_TIMEOUT_S,
    WorkerProcess,
    cluster_topics,
    http,
    topic_stats,
)

FUNCTION = b"def process(input, context):\n    return input\n"


def _admin(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _admin_json(url: str, *args: str) -> Any:
    done = _admin(url, "--output", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _read_topic(node: StandaloneProcess, topic: str) -> list[tuple[str, bytes, str]]:
    """Every record of ``topic`` (key, payload, producer name), in order."""

    async def read() -> list[tuple[str, bytes, str]]:
        async with Client(node.url) as client:
            reader = await client.create_reader(topic, MessageId.earliest)
            out = []
            while await reader.has_message_available():
                msg = await reader.read_next(timeout_ms=10_000)
                out.append((msg.partition_key(), msg.data(), msg.producer_name()))
            await reader.close()
            return out

    return asyncio.run(read())


def _assignments(node: StandaloneProcess, topic: str) -> dict[str, str]:
    """instance key -> worker id, the last record of each key (tombstones remove it)."""
    owners: dict[str, str] = {}
    for key, payload, _ in _read_topic(node, topic):
        if key.startswith("__"):
            continue
        if payload:
            owners[key] = json.loads(payload)["workerId"]
        else:
            owners.pop(key, None)
    return owners


def _leader_of(node: StandaloneProcess, coordinate: str, procs: list[WorkerProcess]) -> Any:
    sub = topic_stats(node, coordinate).get("subscriptions", {}).get("participants")
    if sub is None or len(sub["consumers"]) != len(procs):
        return None
    leader = next((p for p in procs if p.consumer_name == sub["activeConsumerName"]), None)
    if leader is None or [p for p in procs if p.leading()] != [leader]:
        return None
    return leader


def _create(
    url: str, name: str, parallelism: int, *, tmp: Path
) -> subprocess.CompletedProcess[str]:
    package = tmp / f"{name}.py"
    package.write_bytes(FUNCTION)
    return _admin(
        url, "functions", "create", "--tenant", "public", "--namespace", "default",
        "--name", name, "--py", str(package), "--classname", f"{name}.process",
        "--inputs", f"in-{name}", "--output", f"out-{name}",
        "--parallelism", str(parallelism),
    )  # fmt: skip


def test_two_clusters_leaders_and_failover_reassignment(
    standalone: StandaloneProcess, spawn: Any, unique: str, tmp_path: Path
) -> None:
    topics_a = cluster_topics(f"a-{unique}")
    topics_b = cluster_topics(f"b-{unique}")
    grace = ("--reschedule-grace-ms", "2000")
    w1 = spawn("w1", *topics_a, *grace)
    w2 = spawn("w2", *topics_a, *grace)
    w3 = spawn("w3", *topics_b, *grace)
    for p in (w1, w2, w3):
        wait_until(p.joined, ELECTION_TIMEOUT_S, what=f"{p.worker_id} joined")
    coordinate_a, assignments_a = topics_a[1], topics_a[3]
    coordinate_b = topics_b[1]
    leader = wait_until(
        lambda: _leader_of(standalone, coordinate_a, [w1, w2]), ELECTION_TIMEOUT_S, what="leader A"
    )
    assert (
        wait_until(
            lambda: _leader_of(standalone, coordinate_b, [w3]), ELECTION_TIMEOUT_S, what="leader B"
        )
        is w3
    )
    follower = w2 if leader is w1 else w1

    # Every worker of a cluster names the leader the broker made active, as
    # `admin topics stats` of the coordination topic shows it.
    stats = _admin_json(standalone.http_url, "topics", "stats", coordinate_a)
    participants = stats["subscriptions"]["participants"]
    assert participants["type"] == "Failover"
    assert participants["activeConsumerName"] == leader.consumer_name
    assert sorted(c["consumerName"] for c in participants["consumers"]) == sorted(
        p.consumer_name for p in (w1, w2)
    )
    for p in (w1, w2):
        got = _admin_json(p.http_url, "functions-worker", "get-cluster-leader")
        assert f"{got['workerId']}:{got['workerHostname']}:{got['port']}" == leader.consumer_name
        members = _admin_json(p.http_url, "functions-worker", "get-cluster")
        assert sorted(m["workerId"] for m in members) == ["w1", "w2"]
    got = _admin_json(w3.http_url, "functions-worker", "get-cluster-leader")
    assert got["workerId"] == "w3"
    assert [m["workerId"] for m in _admin_json(w3.http_url, "functions-worker", "get-cluster")] == [
        "w3"
    ]
    stats = topic_stats(standalone, coordinate_b)["subscriptions"]["participants"]
    assert stats["type"] == "Failover" and stats["activeConsumerName"] == w3.consumer_name

    # Created through the follower: forwarded to the leader; spread over both workers.
    done = _create(follower.http_url, "spread", 4, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    keys = [f"public/default/spread:{i}" for i in range(4)]
    wait_until(
        lambda: sorted(_assignments(standalone, assignments_a)) == keys,
        ELECTION_TIMEOUT_S,
        what="four assignments",
    )
    owners = _assignments(standalone, assignments_a)
    assert sorted(owners.values()) == ["w1", "w1", "w2", "w2"]
    # Both workers serve the same status, each instance reported by its own worker.
    for p in (w1, w2):
        status = _admin_json(p.http_url, "functions", "status", "--name", "spread")
        assert status["numInstances"] == 4
        assert {i["instanceId"]: i["status"]["workerId"] for i in status["instances"]} == {
            int(k.rsplit(":", 1)[1]): w for k, w in owners.items()
        }
    # The other cluster has its own metadata: it knows nothing of the function.
    assert _admin_json(w3.http_url, "functions", "list") == []

    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    assert (
        wait_until(
            lambda: _leader_of(standalone, coordinate_a, [follower]),
            ELECTION_TIMEOUT_S,
            what="the follower leads",
        )
        is follower
    )
    wait_until(
        lambda: set(_assignments(standalone, assignments_a).values()) == {follower.worker_id},
        ELECTION_TIMEOUT_S,
        what="the dead leader's instances reassigned",
    )
    assert sorted(_assignments(standalone, assignments_a)) == keys

    # ... and runs them all (the thread runtime), as its status reports.
    def all_running_on_follower() -> bool:
        status = _admin_json(follower.http_url, "functions", "status", "--name", "spread")
        return status["numRunning"] == 4 and {
            i["status"]["workerId"] for i in status["instances"]
        } == {follower.worker_id}

    wait_until(all_running_on_follower, ELECTION_TIMEOUT_S, what="four instances running")
    got = _admin_json(follower.http_url, "functions-worker", "get-cluster-leader")
    assert got["workerId"] == follower.worker_id


def test_paused_deposed_leader_writes_nothing(
    standalone: StandaloneProcess, spawn: Any, unique: str, tmp_path: Path
) -> None:
    topics = cluster_topics(unique)
    coordinate, assignments, metadata = topics[1], topics[3], topics[5]
    w1 = spawn("w1", *topics)
    wait_until(w1.joined, ELECTION_TIMEOUT_S)
    assert wait_until(lambda: _leader_of(standalone, coordinate, [w1]), ELECTION_TIMEOUT_S) is w1
    assert _create(w1.http_url, "before", 1, tmp=tmp_path).returncode == 0
    w2 = spawn("w2", *topics)
    wait_until(w2.joined, ELECTION_TIMEOUT_S)
    # The broker's failover rule (a hash of the topic name over the consumer names) may keep
    # w1 or pick w2: whichever leads now is the one paused.
    old = wait_until(
        lambda: _leader_of(standalone, coordinate, [w1, w2]), ELECTION_TIMEOUT_S, what="a leader"
    )
    new = w2 if old is w1 else w1
    wait_until(lambda: any(p["producerName"] for p in topic_stats(standalone, metadata)["publishers"]),
               ELECTION_TIMEOUT_S)  # fmt: skip
    old_producers = {p["producerName"] for p in topic_stats(standalone, metadata)["publishers"]}
    old_terms_ended = old.terms_ended()

    old.proc.send_signal(signal.SIGSTOP)
    try:
        # The broker drops the paused worker's coordination consumer (it cannot answer);
        # the other becomes active and takes the leader's producers, fencing the old ones.
        status, _ = http("PUT", topic_stats_url_of(standalone, coordinate) + "/unload")
        assert status in (200, 204)

        def new_leads() -> bool:
            sub = topic_stats(standalone, coordinate).get("subscriptions", {}).get("participants")
            return (
                sub is not None
                and sub["activeConsumerName"] == new.consumer_name
                and new.leading()
                and any(
                    p["producerName"] not in old_producers
                    for p in topic_stats(standalone, metadata)["publishers"]
                )
            )

        wait_until(new_leads, ELECTION_TIMEOUT_S, what="the other worker leads")
        new_producers = {p["producerName"] for p in topic_stats(standalone, metadata)["publishers"]}
        assert not new_producers & old_producers
    finally:
        old.proc.send_signal(signal.SIGCONT)

    # The old leader wakes up believing it leads. A change sent to it is never written by
    # it: either it was told first, or its write is fenced; then it goes to the leader.
    # While the broker is still choosing (its consumer may come back and be made active
    # again) the answer is a 503 "try again", as a client retries.
    def created() -> bool:
        done = _create(old.http_url, "after", 1, tmp=tmp_path)
        assert done.returncode == 0 or "(HTTP 503)" in done.stderr, done.stderr
        return done.returncode == 0

    wait_until(created, ELECTION_TIMEOUT_S, what="created through the deposed leader")
    wait_until(
        lambda: old.terms_ended() > old_terms_ended,
        ELECTION_TIMEOUT_S,
        what="the deposed leader's term over",
    )
    for topic in (metadata, assignments):
        records = _read_topic(standalone, topic)
        new_marker = next(
            i for i, (k, v, _) in enumerate(records)
            if k == "__leader__" and json.loads(v)["leader"] == new.consumer_name
        )  # fmt: skip
        late = [(k, producer) for k, _, producer in records[new_marker:]]
        assert all(producer not in old_producers for _, producer in late), late
    assert w1.proc.poll() is None and w2.proc.poll() is None
    names = _admin_json(new.http_url, "functions", "list")
    assert names == ["after", "before"]


def topic_stats_url_of(node: StandaloneProcess, topic: str) -> str:
    from magnetar.functions.admin_stats import topic_stats_url

    return topic_stats_url(node.http_url, topic).removesuffix("/stats")


def test_oversized_package_is_refused_before_anything_is_written(
    standalone: StandaloneProcess, spawn: Any, unique: str, tmp_path: Path
) -> None:
    topics = cluster_topics(unique)
    w1 = spawn("w1", *topics, "--package-bytes-max", "64")
    wait_until(w1.joined, ELECTION_TIMEOUT_S)
    wait_until(lambda: w1.leading(), ELECTION_TIMEOUT_S)
    package = tmp_path / "big.py"
    package.write_bytes(b"#" * 65)
    done = _admin(
        w1.http_url, "functions", "create", "--name", "big", "--py", str(package),
        "--inputs", "in",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "Error: the package is 65 bytes; this worker takes at most 64 (HTTP 413)"
    )
    assert [k for k, _, _ in _read_topic(standalone, topics[7])] == []  # packages topic
    package = tmp_path / "ok.py"
    package.write_bytes(b"x = 1\n")
    done = _admin(
        w1.http_url, "functions", "create", "--name", "ok", "--py", str(package), "--inputs", "in"
    )
    assert done.returncode == 0, done.stderr
    assert w1.proc.poll() is None


WORD_COUNT = b"""from pulsar import Function


class WordCount(Function):
    def process(self, input, context):
        word = input.split()[0]
        context.incr_counter(word, 1)
        return input
"""


def test_word_count_effectively_once_across_a_worker_kill(
    standalone: StandaloneProcess, spawn: Any, unique: str, tmp_path: Path
) -> None:
    """Deployed through the CLI from a .py file with parallelism 2 and effectively-once: every
    input appears once on the output and is counted once in the state, although the worker
    running the active instance is killed with SIGKILL in the middle of the stream."""
    topics = cluster_topics(unique)
    grace = ("--reschedule-grace-ms", "2000")
    workers = [spawn("w1", *topics, *grace), spawn("w2", *topics, *grace)]
    for p in workers:
        wait_until(p.joined, ELECTION_TIMEOUT_S)
    wait_until(lambda: _leader_of(standalone, topics[1], workers), ELECTION_TIMEOUT_S)
    package = tmp_path / "wordcount.py"
    package.write_bytes(WORD_COUNT)
    source, sink = f"wc-in-{unique}", f"wc-out-{unique}"
    done = _admin(
        workers[0].http_url, "functions", "create", "--name", f"wc-{unique}",
        "--py", str(package), "--classname", "wordcount.WordCount",
        "--inputs", source, "--output", sink, "--parallelism", "2",
        "--processing-guarantees", "EFFECTIVELY_ONCE",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def status() -> Any:
        return _admin_json(workers[0].http_url, "functions", "status", "--name", f"wc-{unique}")

    wait_until(lambda: status()["numRunning"] == 2, ELECTION_TIMEOUT_S, what="two instances")
    words = [f"w{i % 7} {i}" for i in range(300)]
    client = pulsar.Client(standalone.url)
    try:
        out = client.subscribe(sink, "check")
        producer = client.create_producer(source, batching_enabled=False)
        for text in words[:150]:
            producer.send(text.encode())
        received = {out.receive(30_000).data().decode() for _ in range(30)}
        # Kill the worker whose instance is consuming (the Failover subscription's active one).
        # (Instances write their status every 250 ms: the count can lag what came out.)
        busy = wait_until(
            lambda: next(
                (
                    i["status"]["workerId"]
                    for i in status()["instances"]
                    if i["status"]["numReceived"]
                ),
                None,
            ),
            10,
            what="an instance that received",
        )
        victim = next(p for p in workers if p.worker_id == busy)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        for text in words[150:]:
            producer.send(text.encode())
        while len(received) < len(words):
            received.add(out.receive(60_000).data().decode())
    finally:
        client.close()
    assert received == set(words)
    # Exactly once on the output topic: nothing was stored twice.
    outputs = [payload.decode() for _, payload, _ in _read_topic(standalone, sink)]
    assert sorted(outputs) == sorted(words)
    # ... and in the state: each word counted once per input.
    from magnetar.functions.state_store import StateStore, state_topic_name

    store = StateStore(instance_id=99)
    for key, payload, _ in _read_topic(
        standalone, state_topic_name("public", "default", f"wc-{unique}")
    ):
        store.apply(key, payload)
    assert {f"w{k}": store.get_counter(f"w{k}") for k in range(7)} == {
        f"w{k}": sum(1 for i in range(300) if i % 7 == k) for k in range(7)
    }
