"""Authentication and authorization in cluster mode: a real ZooKeeper, a bookie and two
``magnetar broker`` processes started with token authentication and authorization on, and
the official ``pulsar`` wheel.

* a wrong token is refused by every broker, on the binary protocol and on REST;
* a role granted ``produce`` produces through a client connected to one broker only, to a
  topic the other broker owns (the lookup redirects it there);
* revoking the grant on one broker takes effect on the next request on both brokers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.common.errors import ServerError
from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.protocol import Connected, Error
from magnetar.testing import wait_until
from tests.cluster.bundle_topics import topic_per_bundle

from .conftest import SUPER_USER, Secrets, connect_raw, http

pytestmark = pytest.mark.timeout(240)

NS = "public/default"
WRITER = "writer"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("auth-cluster") / "c"
    started = LocalCluster(
        LocalClusterConfig(
            data_dir=data_dir, brokers=2, bookies=1, ensemble_size=1, write_quorum=1,
            ack_quorum=1, zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=4.0, log_level="WARNING", broker_args=secrets.args(),
        )
    )  # fmt: skip
    try:
        started.start()
        yield started
    finally:
        started.stop()


def _owner(cluster: LocalCluster, secrets: Secrets, topic: str) -> str:
    """The binary URL of the broker owning ``topic`` (the lookup REST, as the super user)."""
    answer: dict[str, str] = {}

    def looked_up() -> bool:
        status, body = http(
            "GET",
            f"{cluster.broker_admin_url(0)}/lookup/v2/topic/{topic.replace('://', '/')}",
            secrets.token(SUPER_USER),
        )
        if status == 200 and isinstance(body, dict):
            answer.update(body)
            return True
        return False

    wait_until(looked_up, timeout_s=60, what=f"a lookup of {topic}")
    return answer["brokerUrl"]


def _topic_owned_by(cluster: LocalCluster, secrets: Secrets, index: int) -> str:
    """A topic of ``public/default`` whose bundle broker ``index`` owns. The first broker up
    may hold every bundle at first; count rebalancing spreads them within about 10 s."""
    topics = topic_per_bundle("auth", NS)
    wanted = cluster.broker_service_url(index).rstrip("/")
    found: list[str] = []

    def one_there() -> bool:
        found[:] = [t for t in topics if _owner(cluster, secrets, t).rstrip("/") == wanted]
        return bool(found)

    wait_until(one_there, timeout_s=120, what=f"a bundle of {NS} on broker {index}")
    return found[0]


def _client(url: str, token: str) -> pulsar.Client:
    return pulsar.Client(
        url, authentication=pulsar.AuthenticationToken(token), operation_timeout_seconds=15
    )


def test_a_wrong_token_is_refused_by_every_broker(cluster: LocalCluster, secrets: Secrets) -> None:
    forged = secrets.token(SUPER_USER)[:-4] + "AAAA"  # the super user's, signature broken
    for index in range(2):
        port = int(cluster.broker_service_url(index).rstrip("/").rsplit(":", 1)[1])
        commands = connect_raw(port, "token", forged.encode())
        assert len(commands) == 1, (index, commands)
        error = commands[0]
        assert isinstance(error, Error) and error.error is ServerError.AuthenticationError
        assert "signature" in error.message, error.message
        assert isinstance(connect_raw(port, "token", secrets.token(WRITER).encode())[-1], Connected)
        status, body = http("GET", f"{cluster.broker_admin_url(index)}/admin/v2/tenants", forged)
        assert status == 401, (index, status, body)
        # the right token is accepted by the same broker
        status, _ = http(
            "GET", f"{cluster.broker_admin_url(index)}/admin/v2/tenants", secrets.token(SUPER_USER)
        )
        assert status == 200
    assert cluster.exited() == []


def test_grant_produces_through_a_redirect_and_revoke_reaches_both_brokers(
    cluster: LocalCluster, secrets: Secrets
) -> None:
    root = secrets.token(SUPER_USER)
    on_second = _topic_owned_by(cluster, secrets, 1)
    on_first = _topic_owned_by(cluster, secrets, 0)
    grant_url = f"{cluster.broker_admin_url(0)}/admin/v2/namespaces/{NS}/permissions/{WRITER}"
    # before the grant: refused
    writer = _client(cluster.broker_service_url(0), secrets.token(WRITER))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            writer.create_producer(on_second)
        assert http("POST", grant_url, root, ["produce"])[0] == 204
        # connected to broker 0 only, the writer's producer lands on broker 1 by the lookup's
        # redirect, and its messages are stored
        producer = writer.create_producer(on_second)
        for i in range(5):
            producer.send(f"m{i}".encode())
        producer.close()
        status, stats = http(
            "GET",
            f"{cluster.broker_admin_url(0)}/admin/v2/persistent/"
            f"{on_second.removeprefix('persistent://')}/stats",
            root,
        )  # answered by broker 1 after a 307
        assert status == 200 and stats["msgInCounter"] == 5, stats
        writer.create_producer(on_first).close()

        # revoked through broker 1: the next request is refused on both brokers
        revoke_url = grant_url.replace(cluster.broker_admin_url(0), cluster.broker_admin_url(1))
        assert http("DELETE", revoke_url, root)[0] == 204
        for index, topic in ((0, on_first), (1, on_second)):
            direct = _client(cluster.broker_service_url(index), secrets.token(WRITER))
            try:  # the owner itself refuses (no redirect in between)
                with pytest.raises(pulsar.AuthorizationError):
                    direct.create_producer(topic)
            finally:
                direct.close()
        for index in range(2):
            status, _ = http(
                "GET",
                f"{cluster.broker_admin_url(index)}/lookup/v2/topic/{on_first.replace('://', '/')}",
                secrets.token(WRITER),
            )
            assert status == 403, index
    finally:
        writer.close()
    assert cluster.exited() == []
