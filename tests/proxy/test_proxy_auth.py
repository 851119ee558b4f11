"""``magnetar proxy`` with token authentication, in front of a ``local-cluster`` that signs
its own tokens and has authorization on. The proxy's role ``proxy`` is a proxy role of the
brokers and even a super user; the clients' roles travel as ``original_principal``.

* a bad token is refused at the proxy (binary: AuthenticationError; HTTP: 401);
* the proxy authenticates to the brokers as itself (its token, not the client's);
* authorization is the client's: a role without permission on the namespace is refused
  through the proxy, though the proxy's own role may do everything; granted, it produces.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.auth.tokens import create_token
from magnetar.common.errors import ServerError
from magnetar.local_cluster import LocalCluster, LocalClusterConfig
from magnetar.local_cluster_security import ClusterTokens
from magnetar.protocol import PROTOCOL_VERSION, Connect, Connected, Error, FrameDecoder, encode

from .conftest import ProxyProcess, http, start_proxy

pytestmark = pytest.mark.timeout(240)

PROXY_ROLE = "proxy"
SUPER_USER = "admin"
NS = "public/default"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("proxy-auth") / "c"
    started = LocalCluster(
        LocalClusterConfig(
            data_dir=data_dir, brokers=2, bookies=1, ensemble_size=1, write_quorum=1,
            ack_quorum=1, zookeeper_port=0, broker_port=0, http_port=0, bookie_port=0,
            session_timeout_s=4.0, log_level="WARNING", tokens=ClusterTokens(),
            broker_args=(
                "--authentication-enabled", "--authentication-providers", "token",
                "--authorization-enabled",
                "--super-user-roles", f"{SUPER_USER},{PROXY_ROLE}",
                "--proxy-roles", PROXY_ROLE,
            ),
        )
    )  # fmt: skip
    try:
        started.start()
        yield started
    finally:
        started.stop()


def _token(cluster: LocalCluster, role: str) -> str:
    return create_token(role, secret_key=ClusterTokens.key_file(cluster.data_dir).read_bytes())


@pytest.fixture(scope="module")
def proxy(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    key = ClusterTokens.key_file(cluster.data_dir).as_uri()
    started = start_proxy(
        tmp_path_factory.mktemp("proxy-auth-logs") / "proxy.log",
        "--metadata-store", cluster.metadata_url,
        "--authentication-enabled", "--authentication-providers", "token",
        "--token-secret-key", key,
        "--broker-client-auth-plugin", "token",
        "--broker-client-auth-params", f"token:{_token(cluster, PROXY_ROLE)}",
    )  # fmt: skip
    try:
        yield started
    finally:
        started.stop()


def _client(proxy: ProxyProcess, token: str) -> pulsar.Client:
    return pulsar.Client(
        proxy.service_url,
        authentication=pulsar.AuthenticationToken(token),
        operation_timeout_seconds=15,
    )


def _connect_raw(port: int, token: str) -> list[object]:
    """The commands the proxy answers a CONNECT with, until it closes or answers."""
    connect = Connect(
        client_version="test", auth_method_name="token", auth_data=token.encode(),
        protocol_version=PROTOCOL_VERSION,
    )  # fmt: skip
    decoder = FrameDecoder(max_frame_size_bytes=1 << 20)
    commands: list[object] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode(connect))
        while not commands and (chunk := sock.recv(65536)):
            commands += [f.command for f in decoder.feed(chunk)]
    return commands


def test_a_bad_token_is_refused_at_the_proxy(cluster: LocalCluster, proxy: ProxyProcess) -> None:
    forged = _token(cluster, SUPER_USER)[:-4] + "AAAA"  # the signature broken
    (answer,) = _connect_raw(proxy.port, forged)
    assert isinstance(answer, Error) and answer.error is ServerError.AuthenticationError
    assert answer.message.startswith("Unable to authenticate"), answer.message
    assert isinstance(_connect_raw(proxy.port, _token(cluster, "bob"))[0], Connected)
    # The C++ client drops the connection on the Error and retries until its operation
    # timeout, as it does against a broker.
    client = pulsar.Client(
        proxy.service_url,
        authentication=pulsar.AuthenticationToken(forged),
        operation_timeout_seconds=2,
    )
    try:
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            client.create_producer(f"persistent://{NS}/refused")
    finally:
        client.close()
    assert http("GET", f"{proxy.http_url}/admin/v2/tenants", forged)[0] == 401
    assert http("GET", f"{proxy.http_url}/admin/v2/tenants")[0] == 401
    status, tenants = http("GET", f"{proxy.http_url}/admin/v2/tenants", _token(cluster, SUPER_USER))
    assert status == 200 and "public" in tenants


def test_authorization_is_the_clients_not_the_proxys(
    cluster: LocalCluster, proxy: ProxyProcess
) -> None:
    topic = f"persistent://{NS}/guarded"
    bob = _client(proxy, _token(cluster, "bob"))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            bob.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            bob.subscribe(topic, "s")
        # through the proxy's HTTP side, bob's own credentials reach the broker
        assert (
            http("GET", f"{proxy.http_url}/admin/v2/namespaces/public", _token(cluster, "bob"))[0]
            == 403
        )
        # granted (by the super user, through the proxy), bob produces and consumes
        status, body = http(
            "POST",
            f"{proxy.http_url}/admin/v2/namespaces/{NS}/permissions/bob",
            _token(cluster, SUPER_USER),
            ["produce", "consume"],
        )
        assert status == 204, body
        consumer = bob.subscribe(topic, "s")
        bob.create_producer(topic).send(b"granted")
        assert consumer.receive(timeout_millis=30_000).data() == b"granted"
    finally:
        bob.close()
    # the brokers saw the proxy's role with bob as the original principal: bob's grant is
    # what let him in (a client naming a principal itself is refused by the brokers)
    assert cluster.exited() == []


def test_the_brokers_accept_an_original_principal_from_proxy_roles_only(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A proxy presenting a role that is not one of the brokers' proxy roles cannot act for
    its clients: the brokers refuse it ("Invalid roles"), the client sees the refusal."""
    impostor = start_proxy(
        tmp_path / "impostor.log",
        "--metadata-store", cluster.metadata_url,
        "--authentication-enabled", "--authentication-providers", "token",
        "--token-secret-key", ClusterTokens.key_file(cluster.data_dir).as_uri(),
        "--broker-client-auth-plugin", "token",
        "--broker-client-auth-params", f"token:{_token(cluster, 'mallory')}",
    )  # fmt: skip
    client = _client(impostor, _token(cluster, SUPER_USER))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(f"persistent://{NS}/impostor")
    finally:
        client.close()
        impostor.stop()
