"""Advertised listeners end to end: ``magnetar standalone --advertised-listeners`` as a real
process, the official wheel's ``listener_name``, ``magnetar.client``'s ``listener_name``
over binary and HTTP service URLs, raw LOOKUPs and the HTTP lookup's ``listenerName``
parameter and ``X-Pulsar-ListenerName`` header.

A listener only changes what lookups answer (the broker binds nothing for it), so the
listeners here are other names for the one bound port (``127.0.0.1`` and ``localhost``)
plus one, ``dead``, pointing at a port nobody listens on: a client sent there cannot work,
which shows that clients really go where the named listener points.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.client import Client, ConnectError, Timeout
from magnetar.common.errors import ListenerNotFound, ServerError
from magnetar.metadata.zookeeper_server import free_port
from magnetar.protocol import (
    Connect,
    Connected,
    FrameDecoder,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
)
from magnetar.protocol import encode as encode_command
from magnetar.testing import StandaloneProcess

from .helpers import new_client

COUNT = 10


class ListenerNode:
    """A standalone with listeners ``internal`` (127.0.0.1), ``external`` (localhost, same
    port) and ``dead`` (a closed port)."""

    def __init__(self, node: StandaloneProcess, dead_port: int) -> None:
        self.node = node
        self.internal_url = f"pulsar://127.0.0.1:{node.port}"
        self.external_url = f"pulsar://localhost:{node.port}"
        self.dead_url = f"pulsar://127.0.0.1:{dead_port}"


@pytest.fixture(scope="module")
def listener_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenerNode]:
    port = free_port()
    dead_port = free_port()
    listeners = (
        f"internal:pulsar://127.0.0.1:{port},"
        f"external:pulsar://localhost:{port},"
        f"dead:pulsar://127.0.0.1:{dead_port}"
    )
    # The later --port wins over the harness's own "--port 0": the listeners name it.
    with StandaloneProcess(
        tmp_path_factory.mktemp("listeners") / "data",
        "--port", str(port),
        "--advertised-listeners", listeners,
    ) as node:  # fmt: skip
        assert node.port == port
        yield ListenerNode(node, dead_port)


def raw_lookup(port: int, topic: str, listener_name: str | None) -> LookupTopicResponse:
    """CONNECT then LOOKUP (with ``advertised_listener_name``) on a fresh connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        decoder = FrameDecoder()
        sock.sendall(encode_command(Connect(client_version="listener-test", protocol_version=20)))
        sock.sendall(
            encode_command(
                LookupTopic(topic=topic, request_id=1, advertised_listener_name=listener_name)
            )
        )
        commands: list[object] = []
        while not any(isinstance(c, LookupTopicResponse) for c in commands):
            data = sock.recv(65536)
            assert data, f"broker closed the connection; got {commands}"
            commands += [f.command for f in decoder.feed(data)]
    assert isinstance(commands[0], Connected)
    answer = commands[-1]
    assert isinstance(answer, LookupTopicResponse)
    return answer


def http_lookup(
    http_url: str, topic_path: str, *, query: str = "", header: str | None = None
) -> tuple[int, dict[str, str]]:
    headers = {} if header is None else {"X-Pulsar-ListenerName": header}
    request = urllib.request.Request(
        f"{http_url}/lookup/v2/topic/{topic_path}{query}", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wheel_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    sent = [f"m-{i}".encode() for i in range(COUNT)]
    for payload in sent:
        producer.send(payload)
    got = []
    for _ in range(COUNT):
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == sent


# --- the official client's own case: a broker without the listener -------------------------


def test_official_client_asking_for_a_listener_the_broker_lacks_fails(
    standalone: StandaloneProcess, topic: str
) -> None:
    """The official suite's test_listener_name_client: the shared standalone has no
    listeners, so ``listener_name='test'`` must fail. Pulsar answers ServiceNotReady "the
    broker do not have test listener", which the C++ client turns into ConnectError at once
    (a retried lookup would end in Timeout after the operation timeout instead)."""
    client = pulsar.Client(standalone.url, listener_name="test", operation_timeout_seconds=30)
    try:
        with pytest.raises(pulsar.ConnectError):
            client.create_producer(topic)
    finally:
        client.close()
    # The broker keeps serving, and nothing named by the failed lookup was created.
    plain = new_client(standalone.url)
    try:
        wheel_round_trip(plain, topic)
    finally:
        plain.close()


# --- a broker with listeners ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["internal", "external", "dead"])
def test_binary_lookup_answers_the_named_listener(
    listener_node: ListenerNode, topic: str, name: str
) -> None:
    answer = raw_lookup(listener_node.node.port, topic, name)
    expected = getattr(listener_node, f"{name}_url")
    assert answer.response == LookupResult.Connect
    assert answer.broker_service_url == expected
    # No pulsar+ssl:// URL configured: the TLS field repeats the plain one (as without
    # listeners when TLS is off).
    assert answer.broker_service_url_tls == expected


def test_binary_lookup_without_a_name_answers_the_internal_listener(
    listener_node: ListenerNode, topic: str
) -> None:
    for name in (None, ""):
        answer = raw_lookup(listener_node.node.port, topic, name)
        assert answer.response == LookupResult.Connect
        assert answer.broker_service_url == listener_node.internal_url


def test_binary_lookup_of_an_unknown_listener_fails_as_pulsar_does(
    listener_node: ListenerNode, topic: str
) -> None:
    answer = raw_lookup(listener_node.node.port, topic, "nope")
    assert answer.response == LookupResult.Failed
    assert answer.error == ServerError.ServiceNotReady
    assert answer.message == "the broker do not have nope listener"
    assert answer.broker_service_url is None


def test_http_lookup_picks_the_listener_by_parameter_or_header(
    listener_node: ListenerNode,
) -> None:
    http_url = listener_node.node.http_url
    path = "persistent/public/default/http-listener"
    status, body = http_lookup(http_url, path, query="?listenerName=external")
    assert status == 200 and body["brokerUrl"] == listener_node.external_url
    status, body = http_lookup(http_url, path, header="dead")
    assert status == 200 and body["brokerUrl"] == listener_node.dead_url
    # The parameter wins over the header (Pulsar reads the header only without one).
    status, body = http_lookup(http_url, path, query="?listenerName=external", header="dead")
    assert status == 200 and body["brokerUrl"] == listener_node.external_url
    status, body = http_lookup(http_url, path)
    assert status == 200 and body["brokerUrl"] == listener_node.internal_url
    status, body = http_lookup(http_url, path, query="?listenerName=nope")
    assert status == 500 and body == {"reason": "the broker do not have nope listener"}
    status, body = http_lookup(http_url, path, header="nope")
    assert status == 500 and body == {"reason": "the broker do not have nope listener"}


def test_official_client_works_through_a_named_listener(
    listener_node: ListenerNode, topic: str
) -> None:
    for name in ("external", "internal"):
        client = pulsar.Client(
            listener_node.node.url, listener_name=name, operation_timeout_seconds=15
        )
        try:
            wheel_round_trip(client, f"{topic}-{name}")
        finally:
            client.close()


def test_official_client_goes_where_the_listener_points(
    listener_node: ListenerNode, topic: str
) -> None:
    """``dead`` names a closed port: the client follows the lookup there and never gets a
    producer, so it really uses the listener's URL (the operation timeout ends it)."""
    client = pulsar.Client(
        listener_node.node.url, listener_name="dead", operation_timeout_seconds=2
    )
    try:
        with pytest.raises(pulsar.Timeout):
            client.create_producer(topic)
    finally:
        client.close()


def test_official_client_with_a_listener_the_broker_lacks(
    listener_node: ListenerNode, topic: str
) -> None:
    client = pulsar.Client(
        listener_node.node.url, listener_name="test", operation_timeout_seconds=30
    )
    try:
        with pytest.raises(pulsar.ConnectError):
            client.create_producer(topic)
    finally:
        client.close()


# --- magnetar.client ------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["binary", "http"])
def test_magnetar_client_uses_the_named_listener(
    listener_node: ListenerNode, topic: str, via: str
) -> None:
    url = listener_node.node.url if via == "binary" else listener_node.node.http_url

    async def main() -> None:
        async with Client(url, listener_name="external", operation_timeout_seconds=15) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "s")
            await producer.send(b"through external")
            msg = await consumer.receive(10_000)
            assert msg.data() == b"through external"
        # Sent to the closed port: refused there (or retried until the timeout).
        async with Client(url, listener_name="dead", operation_timeout_seconds=2) as client:
            with pytest.raises((ConnectError, Timeout)):
                await client.create_producer(topic)

    asyncio.run(main())


@pytest.mark.parametrize("via", ["binary", "http"])
def test_magnetar_client_fails_at_once_for_a_listener_the_broker_lacks(
    listener_node: ListenerNode, topic: str, via: str
) -> None:
    """Asking again cannot create a listener: the error comes at the first answer, not as a
    Timeout at the end of the (long) operation timeout."""
    url = listener_node.node.url if via == "binary" else listener_node.node.http_url

    async def main() -> None:
        async with Client(url, listener_name="nope", operation_timeout_seconds=60) as client:
            with pytest.raises(ListenerNotFound, match="the broker do not have nope listener"):
                await client.create_producer(topic)

    asyncio.run(main())


# --- bad settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listeners", "extra", "words"),
    [
        ("pulsar://127.0.0.1:6650", [], "no listener name"),
        ("a:pulsar://h:1,b:pulsar://h:1", [], "h:1 is given to two advertised listeners"),
        ("a:pulsar://h:1,a:pulsar://h:2", [], "more than one pulsar:// URL"),
        ("a:pulsar+ssl://h:1", [], "has no pulsar:// URL"),
        ("a:kafka://h:1", [], "is not pulsar:// or pulsar+ssl://"),
        ("a:pulsar://h", [], "is not scheme://host:port"),
        ("a:pulsar://h:1", ["--internal-listener-name", "b"], "internal listener 'b'"),
    ],
)
def test_standalone_refuses_bad_listeners_in_one_line(
    tmp_path: Path, listeners: str, extra: list[str], words: str
) -> None:
    """A real process: exit code 2, the broken rule in one line, no traceback, nothing
    written to the data directory."""
    data_dir = tmp_path / "data"
    args = [
        sys.executable, "-m", "magnetar.cli.main", "standalone",
        "--data-dir", str(data_dir), "--port", "0", "--http-port", "0",
        "--advertised-listeners", listeners, *extra,
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and words in errors[0], done.stderr
    assert not data_dir.exists()
