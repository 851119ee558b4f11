"""The broker's TLS listener end to end: the official wheel and ``magnetar.client`` over
``pulsar+ssl://`` with a test CA, lookups answering the TLS URL, certificate and hostname
refusals, plain and TLS clients on one topic, plain text on the TLS port, mutual TLS, and
a restart keeping the TLS port."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable

import pulsar
import pytest
from click.testing import CliRunner

from magnetar.broker.config import BrokerConfig
from magnetar.broker.tls import TlsConfigError, server_ssl_context
from magnetar.cli.standalone_cmd import standalone as standalone_cmd
from magnetar.client import (
    AuthenticationToken,
    Client,
    ConnectError,
    InitialPosition,
    Timeout,
    TlsHandshakeError,
)
from magnetar.protocol import Connect, Connected, FrameDecoder, LookupTopic, LookupTopicResponse
from magnetar.protocol import encode as encode_command
from magnetar.testing import StandaloneProcess

from .certs import Pki
from .conftest import tls_args, wheel_log

COUNT = 20


def wheel(url: str, **kwargs: object) -> pulsar.Client:
    kwargs.setdefault("operation_timeout_seconds", 15)
    return pulsar.Client(url, logger=wheel_log, **kwargs)


def wheel_round_trip(client: pulsar.Client, topic: str, count: int = COUNT) -> None:
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    sent = [f"wheel-{i}".encode() for i in range(count)]
    for payload in sent:
        producer.send(payload)
    got = []
    for _ in range(count):
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == sent


async def magnetar_round_trip(client: Client, topic: str, count: int = COUNT) -> None:
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    sent = [f"magnetar-{i}".encode() for i in range(count)]
    for payload in sent:
        await producer.send(payload)
    got = []
    for _ in range(count):
        msg = await consumer.receive(10_000)
        await consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == sent


def client_context(pki: Pki, *, check_hostname: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.check_hostname = check_hostname
    return ctx


def raw_lookup(sock: socket.socket, topic: str) -> LookupTopicResponse:
    """CONNECT then LOOKUP on an open (TLS or plain) socket; the LOOKUP answer."""
    decoder = FrameDecoder()
    sock.sendall(encode_command(Connect(client_version="tls-test", protocol_version=20)))
    sock.sendall(encode_command(LookupTopic(topic=topic, request_id=1)))
    commands: list[object] = []
    deadline = time.monotonic() + 10
    while not any(isinstance(c, LookupTopicResponse) for c in commands):
        assert time.monotonic() < deadline, f"no LOOKUP answer; got {commands}"
        data = sock.recv(65536)
        assert data, "broker closed the connection"
        commands += [f.command for f in decoder.feed(data)]
    assert isinstance(commands[0], Connected)
    answer = commands[-1]
    assert isinstance(answer, LookupTopicResponse)
    return answer


# --- the official wheel ----------------------------------------------------------------


def test_official_client_over_tls(tls_standalone: StandaloneProcess, pki: Pki, topic: str) -> None:
    client = wheel(
        tls_standalone.tls_url,
        tls_trust_certs_file_path=str(pki.ca),
        tls_validate_hostname=True,
        # The broker authenticates nobody yet: the token is carried (inside TLS) and ignored.
        authentication=pulsar.AuthenticationToken("not-checked-yet"),
    )
    try:
        wheel_round_trip(client, topic)
    finally:
        client.close()


def test_official_client_refuses_an_untrusted_broker(
    tls_standalone: StandaloneProcess, pki: Pki, topic: str
) -> None:
    client = wheel(
        tls_standalone.tls_url,
        tls_trust_certs_file_path=str(pki.other_ca),
        operation_timeout_seconds=3,
    )
    try:
        with pytest.raises(pulsar.ConnectError):
            client.create_producer(topic)
    finally:
        client.close()


def test_official_client_insecure_connection(tls_standalone: StandaloneProcess, topic: str) -> None:
    client = wheel(tls_standalone.tls_url, tls_allow_insecure_connection=True)
    try:
        wheel_round_trip(client, topic, count=3)
    finally:
        client.close()


# --- magnetar.client -------------------------------------------------------------------


async def test_magnetar_client_over_tls(
    tls_standalone: StandaloneProcess, pki: Pki, topic: str
) -> None:
    async with Client(
        tls_standalone.tls_url,
        tls_trust_certs_file_path=str(pki.ca),
        tls_validate_hostname=True,
        authentication=AuthenticationToken("not-checked-yet"),
    ) as client:
        await magnetar_round_trip(client, topic)
        # Lookups answered pulsar+ssl://127.0.0.1:<tls port>, the service URL itself, so
        # the producer and consumer share the one TLS connection (a plain answer would have
        # opened a second connection, to the plain port).
        assert len(client._ctx.pool) == 1


async def test_magnetar_client_refuses_an_untrusted_broker(
    tls_standalone: StandaloneProcess, pki: Pki, topic: str
) -> None:
    for trust in (str(pki.other_ca), None):  # another CA; the system's CAs
        started = time.monotonic()
        async with Client(tls_standalone.tls_url, tls_trust_certs_file_path=trust) as client:
            with pytest.raises(TlsHandshakeError) as info:
                await client.create_producer(topic)
        # Not retried until the operation timeout: the verdict cannot change.
        assert time.monotonic() - started < 10
        assert "certificate" in str(info.value) and tls_standalone.tls_url in str(info.value)
        assert isinstance(info.value, ConnectError) and not info.value.retriable


async def test_magnetar_client_insecure_connection(
    tls_standalone: StandaloneProcess, topic: str
) -> None:
    async with Client(tls_standalone.tls_url, tls_allow_insecure_connection=True) as client:
        await magnetar_round_trip(client, topic, count=3)


# --- lookups ---------------------------------------------------------------------------


def test_lookups_answer_the_tls_url(
    tls_standalone: StandaloneProcess, pki: Pki, topic: str
) -> None:
    host, tls_port = "127.0.0.1", tls_standalone.tls_port
    assert tls_port is not None
    with (
        socket.create_connection((host, tls_port), timeout=10) as raw,
        client_context(pki).wrap_socket(raw, server_hostname=host) as sock,
    ):
        answer = raw_lookup(sock, topic)
    assert answer.broker_service_url == tls_standalone.url
    assert answer.broker_service_url_tls == tls_standalone.tls_url
    # Same answer on the plain port.
    with socket.create_connection((host, tls_standalone.port), timeout=10) as sock:
        answer = raw_lookup(sock, topic)
    assert answer.broker_service_url_tls == tls_standalone.tls_url
    with urllib.request.urlopen(
        f"{tls_standalone.http_url}/lookup/v2/topic/{topic.replace('://', '/')}", timeout=10
    ) as resp:
        http_answer = json.load(resp)
    assert http_answer["brokerUrl"] == tls_standalone.url
    assert http_answer["brokerUrlTls"] == tls_standalone.tls_url


def test_tls_versions(tls_standalone: StandaloneProcess, pki: Pki, topic: str) -> None:
    """TLS 1.3 is negotiated when offered, 1.2 still accepted; the context allows no less."""
    assert tls_standalone.tls_port is not None
    for max_version, expected in ((None, "TLSv1.3"), (ssl.TLSVersion.TLSv1_2, "TLSv1.2")):
        ctx = client_context(pki)
        if max_version is not None:
            ctx.maximum_version = max_version
        with (
            socket.create_connection(("127.0.0.1", tls_standalone.tls_port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as sock,
        ):
            assert sock.version() == expected
            assert raw_lookup(sock, topic).broker_service_url == tls_standalone.url


# --- plain and TLS together; plain text on the TLS port --------------------------------


async def test_plain_and_tls_clients_share_a_topic(
    tls_standalone: StandaloneProcess, pki: Pki, topic: str
) -> None:
    trust = str(pki.ca)
    async with (
        Client(tls_standalone.tls_url, tls_trust_certs_file_path=trust) as over_tls,
        Client(tls_standalone.url) as plain,
    ):
        tls_consumer = await over_tls.subscribe(topic, "tls-sub")
        plain_consumer = await plain.subscribe(topic, "plain-sub")
        plain_producer = await plain.create_producer(topic)
        tls_producer = await over_tls.create_producer(topic)

        def wheel_sends() -> None:
            w_plain = wheel(tls_standalone.url)
            w_tls = wheel(tls_standalone.tls_url, tls_trust_certs_file_path=trust)
            try:
                w_plain.create_producer(topic).send(b"wheel-plain")
                w_tls.create_producer(topic).send(b"wheel-tls")
            finally:
                w_plain.close()
                w_tls.close()

        await plain_producer.send(b"magnetar-plain")
        await tls_producer.send(b"magnetar-tls")
        await asyncio.to_thread(wheel_sends)
        expected = [b"magnetar-plain", b"magnetar-tls", b"wheel-plain", b"wheel-tls"]
        for consumer in (tls_consumer, plain_consumer):
            got = [(await consumer.receive(10_000)).data() for _ in expected]
            assert got == expected

    # And the wheel reads over TLS what was written in plain.
    def wheel_reads() -> list[bytes]:
        w = wheel(tls_standalone.tls_url, tls_trust_certs_file_path=trust)
        try:
            reader = w.create_reader(topic, pulsar.MessageId.earliest)
            return [reader.read_next(10_000).data() for _ in expected]
        finally:
            w.close()

    assert await asyncio.to_thread(wheel_reads) == expected


async def test_plain_text_on_the_tls_port_closes_that_connection_only(
    tls_standalone: StandaloneProcess, pki: Pki, topic: str
) -> None:
    assert tls_standalone.tls_port is not None
    async with Client(tls_standalone.tls_url, tls_trust_certs_file_path=str(pki.ca)) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(topic)
        await producer.send(b"before")

        def plain_text_client() -> bytes:
            """A Pulsar CONNECT in clear text: the handshake fails, the broker hangs up."""
            assert tls_standalone.tls_port is not None
            with socket.create_connection(
                ("127.0.0.1", tls_standalone.tls_port), timeout=10
            ) as sock:
                sock.sendall(encode_command(Connect(client_version="plain", protocol_version=20)))
                received = b""
                try:
                    while chunk := sock.recv(4096):
                        received += chunk
                except ConnectionResetError:
                    pass
                return received

        received = await asyncio.to_thread(plain_text_client)  # returns on EOF / reset only
        # At most a TLS alert record (content type 21), never a Pulsar frame.
        assert received == b"" or received[0] == 21

        # Our client speaking plain protocol to the TLS port gives up with a connect error.
        async with Client(
            f"pulsar://127.0.0.1:{tls_standalone.tls_port}",
            operation_timeout_seconds=2,
            connection_timeout_ms=2_000,
        ) as confused:
            with pytest.raises((ConnectError, Timeout)):
                await confused.create_producer(topic)

        # The established TLS connection and the broker keep serving.
        await producer.send(b"after")
        assert [(await consumer.receive(10_000)).data() for _ in range(2)] == [b"before", b"after"]
    async with Client(tls_standalone.tls_url, tls_trust_certs_file_path=str(pki.ca)) as again:
        await magnetar_round_trip(again, f"{topic}-again", count=2)


# --- hostname validation, mutual TLS, restart -------------------------------------------


async def test_hostname_validation(
    standalone_factory: Callable[..., StandaloneProcess], pki: Pki, topic: str
) -> None:
    """A trusted certificate naming another host: refused only when hostnames are checked."""
    node = standalone_factory(*tls_args(pki.wrong_host_server))
    trust = str(pki.ca)
    async with Client(
        node.tls_url, tls_trust_certs_file_path=trust, tls_validate_hostname=True
    ) as client:
        with pytest.raises(TlsHandshakeError, match="mismatch"):
            await client.create_producer(topic)
    async with Client(node.tls_url, tls_trust_certs_file_path=trust) as client:
        await magnetar_round_trip(client, topic, count=3)

    def with_wheel() -> None:
        checking = wheel(
            node.tls_url,
            tls_trust_certs_file_path=trust,
            tls_validate_hostname=True,
            operation_timeout_seconds=3,
        )
        try:
            with pytest.raises(pulsar.ConnectError):
                checking.create_producer(f"{topic}-w")
        finally:
            checking.close()
        lenient = wheel(node.tls_url, tls_trust_certs_file_path=trust)
        try:
            wheel_round_trip(lenient, f"{topic}-w", count=3)
        finally:
            lenient.close()

    await asyncio.to_thread(with_wheel)


async def test_mutual_tls(
    standalone_factory: Callable[..., StandaloneProcess], pki: Pki, topic: str
) -> None:
    node = standalone_factory(
        *tls_args(pki.server, "--tls-trust-certs-file", str(pki.ca),
                  "--tls-require-trusted-client-cert")
    )  # fmt: skip
    trust = str(pki.ca)
    async with Client(
        node.tls_url,
        tls_trust_certs_file_path=trust,
        tls_certificate_file_path=str(pki.client.cert),
        tls_private_key_file_path=str(pki.client.key),
    ) as client:
        await magnetar_round_trip(client, topic, count=3)
    # Without a client certificate the broker drops the connection at the end of the
    # handshake (under TLS 1.3 the client has already sent CONNECT by then, and the broker's
    # asyncio aborts the socket without flushing the alert): a lost connection to the client,
    # retried until the operation timeout.
    async with Client(
        node.tls_url, tls_trust_certs_file_path=trust, operation_timeout_seconds=2
    ) as client:
        with pytest.raises(Timeout, match="lost"):
            await client.create_producer(topic)
    # The plain port is unaffected.
    async with Client(node.url) as client:
        await magnetar_round_trip(client, f"{topic}-plain", count=2)

    def with_wheel() -> None:
        w = wheel(
            node.tls_url,
            tls_trust_certs_file_path=trust,
            tls_certificate_file_path=str(pki.client.cert),
            tls_private_key_file_path=str(pki.client.key),
        )
        try:
            wheel_round_trip(w, f"{topic}-w", count=3)
        finally:
            w.close()

    await asyncio.to_thread(with_wheel)


async def test_restart_keeps_the_tls_port_and_the_data(
    standalone_factory: Callable[..., StandaloneProcess], pki: Pki, topic: str
) -> None:
    node = standalone_factory(*tls_args(pki.server))
    trust = str(pki.ca)
    async with Client(node.tls_url, tls_trust_certs_file_path=trust) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(topic)
        for i in range(5):
            await producer.send(f"m{i}".encode())
        await consumer.close()
    tls_port = node.tls_port
    assert await asyncio.to_thread(node.stop) == 0
    await asyncio.to_thread(node.start)
    assert node.tls_port == tls_port
    async with Client(node.tls_url, tls_trust_certs_file_path=trust) as client:
        consumer = await client.subscribe(topic, "s")
        got = [(await consumer.receive(10_000)).data() for _ in range(5)]
    assert got == [f"m{i}".encode() for i in range(5)]


# --- configuration errors --------------------------------------------------------------


def test_cli_refuses_incomplete_tls_options(pki: Pki) -> None:
    runner = CliRunner()
    result = runner.invoke(standalone_cmd, ["--tls-port", "0", "--tls-cert-file", str(pki.ca)])
    assert result.exit_code == 2 and "--tls-key-file" in result.output
    result = runner.invoke(
        standalone_cmd,
        ["--tls-port", "0", "--tls-cert-file", str(pki.server.cert), "--tls-key-file",
         str(pki.server.key), "--tls-require-trusted-client-cert"],
    )  # fmt: skip
    assert result.exit_code == 2 and "--tls-trust-certs-file" in result.output


def test_server_context(pki: Pki) -> None:
    ctx = server_ssl_context(
        BrokerConfig(tls_port=0, tls_cert_file=str(pki.server.cert),
                     tls_key_file=str(pki.server.key))
    )  # fmt: skip
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    mutual = server_ssl_context(
        BrokerConfig(tls_port=0, tls_cert_file=str(pki.server.cert),
                     tls_key_file=str(pki.server.key), tls_trust_certs_file=str(pki.ca))
    )  # fmt: skip
    assert mutual.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(TlsConfigError, match="tls_key_file"):
        server_ssl_context(BrokerConfig(tls_port=0, tls_cert_file=str(pki.server.cert)))
    with pytest.raises(TlsConfigError, match="cannot load"):  # key of another certificate
        server_ssl_context(
            BrokerConfig(tls_port=0, tls_cert_file=str(pki.server.cert),
                         tls_key_file=str(pki.client.key))
        )  # fmt: skip
