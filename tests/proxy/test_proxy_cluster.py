"""``magnetar proxy`` in front of a ``local-cluster`` of 3 brokers, with the official
``pulsar`` wheel and ``magnetar admin``: clients that know only a proxy's URL.

Two proxies side by side: one finds the brokers in the metadata store, the other is given
their URLs. A partitioned topic spread over the brokers works through them; the admin CLI
works through a proxy; garbage on the proxy's port closes that connection only; the owner
of a topic SIGKILLed mid-stream: the clients recover through the proxy and nothing
acknowledged is lost (last: the broker stays down).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.protocol import Error, FrameDecoder, Ping, encode
from magnetar.testing import wait_until

from .conftest import ProxyProcess, http, start_proxy

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("proxy-cluster") / "c"
    started = LocalCluster(
        LocalClusterConfig(
            data_dir=data_dir, brokers=3, bookies=1, ensemble_size=1, write_quorum=1,
            ack_quorum=1, zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=4.0, log_level="WARNING",
        )
    )  # fmt: skip
    try:
        started.start()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def proxies(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ProxyProcess]]:
    logs = tmp_path_factory.mktemp("proxy-logs")
    started: list[ProxyProcess] = []
    try:
        started.append(
            start_proxy(logs / "discovering.log", "--metadata-store", cluster.metadata_url)
        )
        started.append(
            start_proxy(
                logs / "static.log",
                "--broker-service-url", cluster.service_url,
                "--broker-web-service-url", cluster.web_service_url,
            )
        )  # fmt: skip
        yield started
    finally:
        for p in started:
            p.stop()


def _client(proxy: ProxyProcess) -> pulsar.Client:
    return pulsar.Client(proxy.service_url, operation_timeout_seconds=30)


def _owner(cluster: LocalCluster, topic: str, via: int = 0) -> str:
    """The binary URL of ``topic``'s owner, asked of broker ``via``."""
    status, body = http(
        "GET", f"{cluster.broker_admin_url(via)}/lookup/v2/topic/{topic.replace('://', '/')}"
    )
    assert status == 200, body
    return str(body["brokerUrl"])


def test_a_partitioned_topic_over_the_brokers_through_two_proxies(
    cluster: LocalCluster, proxies: list[ProxyProcess]
) -> None:
    first, second = proxies
    assert http("GET", f"{first.http_url}/ready")[0] == 200
    assert http("GET", f"{second.http_url}/status.html") == (200, b"OK")
    # created through the proxy's HTTP side
    assert http("PUT", f"{first.http_url}/admin/v2/namespaces/public/spread")[0] == 204
    topic = "persistent://public/spread/parts"
    status, body = http(
        "PUT",
        f"{second.http_url}/admin/v2/persistent/public/spread/parts/partitions",
        body=PARTITIONS,
    )
    assert status == 204, body
    producer_client, consumer_client = _client(first), _client(second)
    try:
        consumer = consumer_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = producer_client.create_producer(topic, batching_enabled=False)
        sent = {f"m{i}" for i in range(60)}
        for value in sorted(sent):
            producer.send(value.encode(), partition_key=value)
        received = set()
        while received != sent:
            message = consumer.receive(timeout_millis=30_000)
            received.add(message.data().decode())
            consumer.acknowledge(message)
        # a lookup over the proxy's HTTP names the proxy
        status, looked_up = http(
            "GET", f"{first.http_url}/lookup/v2/topic/persistent/public/spread/parts-partition-0"
        )
        assert status == 200 and looked_up["brokerUrl"] == first.service_url, looked_up
        assert looked_up["httpUrl"] == first.http_url, looked_up
        owners = {_owner(cluster, f"{topic}-partition-{i}") for i in range(PARTITIONS)}
        print(f"partition owners: {sorted(owners)}")
        assert len(owners) >= 2, owners  # spread over brokers, all behind one address

        # the proxy's own view of it
        status, connections = http("GET", f"{first.http_url}/proxy-stats/connections")
        assert status == 200
        piped = [c for c in connections if c["brokerUrl"]]
        assert piped and all(c["bytesIn"] > 0 for c in piped), connections
        status, metrics = http("GET", f"{first.http_url}/metrics")
        text = metrics.decode()
        assert "pulsar_proxy_active_connections" in text
        lookups = next(
            line for line in text.splitlines() if line.startswith("pulsar_proxy_lookup_requests ")
        )
        assert int(lookups.split()[1]) >= PARTITIONS, text
    finally:
        producer_client.close()
        consumer_client.close()
    # the proxy holds nothing of closed clients
    wait_until(
        lambda: http("GET", f"{first.http_url}/proxy-stats/connections")[1] == [],
        timeout_s=30,
        what="the proxy's connections to end",
    )


def _admin(proxy: ProxyProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", proxy.http_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_admin_cli_works_through_a_proxy(
    cluster: LocalCluster, proxies: list[ProxyProcess]
) -> None:
    proxy = proxies[1]
    done = _admin(proxy, "tenants", "create", "acme", "--allowed-clusters", "standalone")
    assert done.returncode == 0, done.stderr
    done = _admin(proxy, "namespaces", "create", "acme/ops")
    assert done.returncode == 0, done.stderr
    topics = [f"persistent://acme/ops/t{i}" for i in range(3)]
    client = _client(proxy)
    try:
        for topic in topics:  # on several brokers: stats asked of any broker are redirected
            client.create_producer(topic).send(b"x")
        for topic in topics:
            done = _admin(proxy, "topics", "stats", topic)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["msgInCounter"] == 1
    finally:
        client.close()
    print("owners:", sorted({_owner(cluster, t) for t in topics}))


def test_magnetar_client_produces_and_consumes_through_a_proxy(proxies: list[ProxyProcess]) -> None:
    """The project's own client (the Helm chart's test pod uses it) through the proxy."""
    topic = "persistent://public/default/own-client"

    def client(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "client", "--service-url",
             proxies[0].service_url, *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = client("produce", "-m", "hello", "-n", "3", topic)
    assert done.returncode == 0, done.stderr
    done = client("consume", "-s", "sub", "-p", "earliest", "-n", "3", topic)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("hello") == 3, done.stdout


def test_a_pattern_subscription_lists_topics_through_a_proxy(proxies: list[ProxyProcess]) -> None:
    """GET_TOPICS_OF_NAMESPACE (and schema requests) on the proxy's lookup connection."""
    client = _client(proxies[1])
    try:
        topic = "persistent://public/default/listed-1"
        client.create_producer(topic).close()  # the topic exists before the subscription
        consumer = client.subscribe(
            re.compile(r"persistent://public/default/listed-.*"),
            "s",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        client.create_producer(topic, schema=pulsar.schema.StringSchema()).send("found")
        assert consumer.receive(timeout_millis=30_000).data() == b"found"
    finally:
        client.close()
    text = http("GET", f"{proxies[1].http_url}/metrics")[1].decode()
    listed = next(
        line for line in text.splitlines()
        if line.startswith("pulsar_proxy_get_topics_of_namespace_requests ")
    )  # fmt: skip
    assert int(listed.split()[1]) >= 1, text


def _closed_after(port: int, data: bytes) -> list[object]:
    """What the proxy answers ``data`` with before it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return [f.command for f in FrameDecoder(max_frame_size_bytes=1 << 20).feed(received)]


def test_garbage_closes_that_connection_only(proxies: list[ProxyProcess]) -> None:
    proxy = proxies[0]
    assert _closed_after(proxy.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == []
    assert _closed_after(proxy.port, b"\x00\x00\x00\x08\x00\x00\x00\x04\xff\xff\xff\xff") == []
    answer = _closed_after(proxy.port, encode(Ping()))  # a frame, but not CONNECT first
    assert len(answer) == 1 and isinstance(answer[0], Error), answer
    assert proxy.proc.poll() is None
    client = _client(proxy)
    try:
        client.create_producer("persistent://public/default/after-garbage").send(b"still here")
    finally:
        client.close()


def test_clients_recover_through_the_proxy_when_the_owner_is_killed(
    cluster: LocalCluster, proxies: list[ProxyProcess]
) -> None:
    topic = "persistent://public/default/survivor"
    client = _client(proxies[0])
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        acked: list[str] = []
        for i in range(20):
            producer.send(f"m{i}".encode())
            acked.append(f"m{i}")
        owner = _owner(cluster, topic)
        index = next(
            i for i in range(len(cluster.brokers)) if cluster.broker_service_url(i) == owner
        )
        cluster.brokers[index].kill()
        for i in range(20, 40):  # waits in the client while ownership moves
            producer.send(f"m{i}".encode())
            acked.append(f"m{i}")
        received: set[str] = set()
        while not set(acked) <= received:
            message = consumer.receive(timeout_millis=60_000)
            received.add(message.data().decode())
            consumer.acknowledge(message)
        assert _owner(cluster, topic, via=(index + 1) % len(cluster.brokers)) != owner
    finally:
        client.close()  # the killed broker stays down: the module's last test
