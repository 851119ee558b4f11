"""Interop with pulsar-flex (npm), a pure-JavaScript Pulsar client written independently of the
official C++ core: producing, consuming with every subscription type, acknowledging, against a
standalone and a two-broker cluster, with the official ``pulsar-client`` wheel on the other
side where that checks what one client wrote against what the other read.

pulsar-flex's own gaps (no initial position, so its subscriptions start at the latest message;
no redirect following beyond the first lookup answer) are in docs/pulsar-differences.md; these
tests subscribe before they produce.
"""

from __future__ import annotations

import itertools
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.auth.tokens import create_token, new_secret_key
from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.testing import StandaloneProcess, wait_until
from tests.cluster.bundle_topics import topic_per_bundle

from . import flex

pytestmark = pytest.mark.timeout(240)

_names = itertools.count()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(
        tmp_path_factory.mktemp("flex") / "data", "--no-functions-worker"
    ) as node:
        yield node


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/flex-{next(_names)}-{uuid.uuid4().hex[:8]}"


def _servers(url: str) -> list[str]:
    return url.removeprefix("pulsar://").split(",")


def _backlog(http_url: str, topic: str, subscription: str) -> int:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{http_url}/admin/v2/{path}/stats", timeout=10) as response:
        stats = json.loads(response.read())
    return int(stats["subscriptions"][subscription]["msgBacklog"])


def _official(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=15)


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_what_flex_produces_the_official_client_reads_with_its_properties(
    standalone: StandaloneProcess, topic: str, batch: bool
) -> None:
    client = _official(standalone.url)
    try:
        consumer = client.subscribe(topic, "official")
        payloads = [f"m{i}" for i in range(20)]
        flex.produce(_servers(standalone.url), topic, payloads, batch=batch,
                     properties={"origin": "flex"})  # fmt: skip
        got = [consumer.receive(10_000) for _ in payloads]
        assert [m.data().decode() for m in got] == payloads
        assert all(m.properties() == {"origin": "flex"} for m in got)
        for m in got:
            consumer.acknowledge(m)
    finally:
        client.close()


@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_flex_exclusive_consumer_reads_the_official_producer_in_order_and_its_acks_count(
    standalone: StandaloneProcess, topic: str, batched: bool
) -> None:
    reader = flex.consumer(_servers(standalone.url), topic, "ex", "Exclusive", count=30)
    client = _official(standalone.url)
    try:
        producer = client.create_producer(topic, batching_enabled=batched,
                                          batching_max_publish_delay_ms=5)  # fmt: skip
        for i in range(30):
            producer.send_async(f"m{i}".encode(), None, properties={"i": str(i)})
        producer.flush()
        got = reader.collect(30)
        assert [m["payload"] for m in got] == [f"m{i}" for i in range(30)]
        assert [m["properties"] for m in got] == [{"i": str(i)} for i in range(30)]
        reader.wait_for("done")
        wait_until(lambda: _backlog(standalone.http_url, topic, "ex") == 0, timeout_s=20,
                   what="the acknowledged backlog to reach 0")  # fmt: skip
    finally:
        reader.kill()
        client.close()


def test_a_cumulative_ack_of_the_last_message_clears_the_backlog(
    standalone: StandaloneProcess, topic: str
) -> None:
    reader = flex.consumer(_servers(standalone.url), topic, "cum", "Exclusive", count=25,
                           ack="cumulative-last")  # fmt: skip
    try:
        flex.produce(_servers(standalone.url), topic, [f"m{i}" for i in range(25)])
        reader.collect(25)
        reader.wait_for("done")
        wait_until(lambda: _backlog(standalone.http_url, topic, "cum") == 0, timeout_s=20,
                   what="the cumulative ack to clear the backlog")  # fmt: skip
    finally:
        reader.kill()


def test_two_shared_consumers_split_the_messages_and_lose_none(
    standalone: StandaloneProcess, topic: str
) -> None:
    servers = _servers(standalone.url)
    first = flex.consumer(servers, topic, "sh", "Shared", name="a")
    second = flex.consumer(servers, topic, "sh", "Shared", name="b")
    try:
        payloads = [f"m{i}" for i in range(200)]
        flex.produce(servers, topic, payloads)
        wait_until(lambda: len(first.messages()) + len(second.messages()) >= 200
                   or _drain(first, second), timeout_s=30, what="200 messages over two consumers")  # fmt: skip
        got = [m["payload"] for m in first.messages() + second.messages()]
        assert sorted(got) == sorted(payloads)
        assert first.messages() and second.messages()
        wait_until(lambda: _backlog(standalone.http_url, topic, "sh") == 0, timeout_s=20,
                   what="the shared subscription's backlog to reach 0")  # fmt: skip
    finally:
        first.kill()
        second.kill()


def _drain(*processes: flex.FlexProcess) -> bool:
    """Takes whatever events the processes have ready (never blocks long)."""
    for process in processes:
        try:
            process.next_event(timeout_s=0.05)
        except AssertionError as exc:
            if "said nothing" not in str(exc):
                raise
    return False


def test_failover_gives_all_messages_to_one_consumer_and_hands_over_when_it_dies(
    standalone: StandaloneProcess, topic: str
) -> None:
    servers = _servers(standalone.url)
    a = flex.consumer(servers, topic, "fo", "Failover", name="a", ack="individual")
    b = flex.consumer(servers, topic, "fo", "Failover", name="b", ack="individual")
    try:
        flex.produce(servers, topic, [f"first{i}" for i in range(20)])
        wait_until(lambda: len(a.messages()) + len(b.messages()) >= 20 or _drain(a, b),
                   timeout_s=30, what="20 messages to the active consumer")  # fmt: skip
        active, standby = (a, b) if a.messages() else (b, a)
        assert not standby.messages(), "a Failover subscription fed two consumers"
        wait_until(lambda: _backlog(standalone.http_url, topic, "fo") == 0, timeout_s=20,
                   what="the active consumer's acks")  # fmt: skip
        active.kill()
        flex.produce(servers, topic, [f"second{i}" for i in range(20)])
        got = standby.collect(20)
        assert [m["payload"] for m in got] == [f"second{i}" for i in range(20)]
    finally:
        a.kill()
        b.kill()


def test_key_shared_keeps_each_key_on_one_flex_consumer(
    standalone: StandaloneProcess, topic: str
) -> None:
    servers = _servers(standalone.url)
    a = flex.consumer(servers, topic, "ks", "Key_Shared", name="a")
    b = flex.consumer(servers, topic, "ks", "Key_Shared", name="b")
    client = _official(standalone.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(120):
            key = f"key-{i % 12}"
            producer.send(f"{key}:{i}".encode(), partition_key=key)
        wait_until(lambda: len(a.messages()) + len(b.messages()) >= 120 or _drain(a, b),
                   timeout_s=30, what="120 keyed messages")  # fmt: skip
        keys_a = {m["payload"].split(":")[0] for m in a.messages()}
        keys_b = {m["payload"].split(":")[0] for m in b.messages()}
        assert not keys_a & keys_b, f"keys delivered to both consumers: {keys_a & keys_b}"
        assert len(keys_a | keys_b) == 12
        for process in (a, b):
            numbers = [int(m["payload"].split(":")[1]) for m in process.messages()]
            assert numbers == sorted(numbers), "a key's messages out of order"
    finally:
        a.kill()
        b.kill()
        client.close()


def test_a_negative_ack_redelivers_with_a_higher_redelivery_count(
    standalone: StandaloneProcess, topic: str
) -> None:
    reader = flex.consumer(_servers(standalone.url), topic, "nack", "Shared", count=10,
                           ack="nack-first")  # fmt: skip
    try:
        flex.produce(_servers(standalone.url), topic, [f"m{i}" for i in range(10)])
        got = reader.collect(10)
        assert sorted(m["payload"] for m in got) == sorted(f"m{i}" for i in range(10))
        assert all(m["redeliveryCount"] >= 1 for m in got)
        reader.wait_for("done")
        wait_until(lambda: _backlog(standalone.http_url, topic, "nack") == 0, timeout_s=20,
                   what="the redelivered messages' acks")  # fmt: skip
    finally:
        reader.kill()


def test_token_authentication_admits_flex_with_a_token_and_refuses_it_without(
    tmp_path: Path, topic: str
) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(new_secret_key())
    with StandaloneProcess(
        tmp_path / "data", "--no-functions-worker", "--authentication-enabled",
        "--authentication-providers", "token", "--token-secret-key", f"file://{key}",
        "--authorization-enabled", "--super-user-roles", "admin",
    ) as node:  # fmt: skip
        token = create_token("admin", secret_key=key.read_bytes())
        servers = _servers(node.url)
        reader = flex.consumer(servers, topic, "auth", "Exclusive", count=3, jwt=token)
        try:
            flex.produce(servers, topic, ["a", "b", "c"], jwt=token)
            assert [m["payload"] for m in reader.collect(3)] == ["a", "b", "c"]
        finally:
            reader.kill()
        refused = flex.FlexProcess({
            "op": "produce", "servers": servers, "topic": topic, "batch": False,
            "messages": [{"payload": "x"}], "jwt": None,
        })  # fmt: skip
        try:
            with pytest.raises(AssertionError, match=r"pulsar-flex failed|exited before"):
                refused.wait_for("sent", timeout_s=30)
        finally:
            refused.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = LocalCluster(
        LocalClusterConfig(
            data_dir=tmp_path_factory.mktemp("flex-cluster") / "c", brokers=2, bookies=1,
            ensemble_size=1, write_quorum=1, ack_quorum=1, zookeeper_port=0, broker_port=0,
            http_port=0, bookie_port=0, session_timeout_s=4.0, log_level="WARNING",
        )
    )  # fmt: skip
    try:
        started.start()
        wait_until(
            lambda: _bundles_spread(started),
            timeout_s=120,
            what="the bundles spread over both brokers",
        )
        yield started
    finally:
        started.stop()


def _bundles_spread(cluster: LocalCluster) -> bool:
    """Whether the two brokers hold numbers of bundles (of every namespace) that differ by at
    most one (``magnetar_bundles_owned``).

    Until then the controller moves one bundle at a time to the broker with fewest (count
    rebalancing, docs/cluster.md): a fresh cluster whose first broker took the bundles before
    the second registered moves some of them 10 s after the start, and a SUBSCRIBE that meets
    a move is refused as not served, which pulsar-flex does not retry."""
    counts = []
    for i in range(2):
        with urllib.request.urlopen(f"{cluster.broker_admin_url(i)}/metrics", timeout=30) as r:
            text = r.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("magnetar_bundles_owned "))
        counts.append(float(line.split()[1]))
    return max(counts) - min(counts) <= 1


def test_on_a_cluster_flex_reaches_every_bundles_owner_through_one_broker(
    cluster: LocalCluster,
) -> None:
    """Through the first broker only: lookups of topics owned by the other broker answer its
    address, and pulsar-flex connects there for both producing and consuming."""
    servers = [_servers(cluster.broker_service_url(0))[0]]
    prefix = f"flex-cl-{uuid.uuid4().hex[:6]}"
    for topic in topic_per_bundle(prefix):
        reader = flex.consumer(servers, topic, "s", "Shared", count=5)
        try:
            flex.produce(servers, topic, [f"{topic}-{i}" for i in range(5)])
            assert sorted(m["payload"] for m in reader.collect(5)) == sorted(
                f"{topic}-{i}" for i in range(5)
            )
        finally:
            reader.kill()


def test_on_a_cluster_flex_skips_a_dead_discovery_server(cluster: LocalCluster) -> None:
    """A discovery list whose first entry does not answer: pulsar-flex tries the next."""
    dead = "127.0.0.1:1"
    servers = [dead, _servers(cluster.broker_service_url(1))[0]]
    topic = f"persistent://public/default/flex-dead-{uuid.uuid4().hex[:6]}"
    reader = flex.consumer(servers, topic, "s", "Exclusive", count=3)
    try:
        flex.produce(servers, topic, ["x", "y", "z"])
        assert [m["payload"] for m in reader.collect(3)] == ["x", "y", "z"]
    finally:
        reader.kill()
