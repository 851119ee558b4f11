"""HTTP lookups, key routing compared with the official wheel, and what authentication puts
on the wire. (The broker has no authentication or TLS listener yet, so tokens are checked
where the client writes them: the CONNECT frame and the HTTP ``Authorization`` header.)"""

from __future__ import annotations

import asyncio
import urllib.request

import pulsar
import pytest

from magnetar.client import AuthenticationBasic, AuthenticationToken, Client, ConnectError
from magnetar.client.http_lookup import HttpLookupService
from magnetar.common.clock import SystemClock
from magnetar.common.errors import TopicNotFound
from magnetar.protocol import Connect, FrameDecoder
from magnetar.testing import StandaloneProcess


def create_partitioned(node: StandaloneProcess, topic: str, n: int) -> None:
    req = urllib.request.Request(
        f"{node.http_url}/admin/v2/{topic.replace('://', '/')}/partitions",
        data=str(n).encode(), method="PUT", headers={"Content-Type": "application/json"},
    )  # fmt: skip
    urllib.request.urlopen(req)


async def test_http_service_url_lookups(standalone: StandaloneProcess, topic: str) -> None:
    partitioned = f"{topic}-p"
    await asyncio.to_thread(create_partitioned, standalone, partitioned, 2)
    async with Client(standalone.http_url) as client:
        assert await client.get_topic_partitions(partitioned) == [
            f"{partitioned}-partition-0",
            f"{partitioned}-partition-1",
        ]
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(topic)
        mid = await producer.send(b"over http lookup")
        msg = await consumer.receive(5000)
        assert msg.data() == b"over http lookup" and msg.message_id() == mid
        pproducer = await client.create_producer(partitioned)
        ids = await asyncio.gather(
            *(pproducer.send_async(b"x", partition_key=f"k{i}") for i in range(20))
        )
        assert {i.partition() for i in ids} == {0, 1}


async def test_http_lookup_errors_and_headers(standalone: StandaloneProcess) -> None:
    lookup = HttpLookupService(
        standalone.http_url,
        clock=SystemClock(),
        operation_timeout_s=5,
        use_tls=False,
        authentication=AuthenticationToken("tok-123"),
    )
    assert lookup._headers()["Authorization"] == "Bearer tok-123"
    basic = HttpLookupService(
        standalone.http_url, clock=SystemClock(), operation_timeout_s=5, use_tls=False,
        authentication=AuthenticationBasic("u", "p"),
    )  # fmt: skip
    assert basic._headers()["Authorization"] == "Basic dTpw"
    with pytest.raises(TopicNotFound):
        await lookup._get("x", "/admin/v2/no/such/path/at/all")
    answer = await lookup.lookup("persistent://public/default/anything")
    assert answer.logical_url == standalone.url


async def test_token_goes_into_connect() -> None:
    """A listener that records the first frame: CONNECT carries the token (the broker has no
    authentication yet, so this is checked on the wire, not by a refusal)."""
    received: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = int.from_bytes(await reader.readexactly(4), "big")
        frame = await reader.readexactly(size)
        received.set_result(len(frame).to_bytes(4, "big") + frame)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        tokens = iter(["first-token", "second-token"])
        client = Client(
            f"pulsar://127.0.0.1:{port}",
            authentication=AuthenticationToken(lambda: next(tokens)),
            operation_timeout_seconds=1,
        )
        with pytest.raises(ConnectError):
            await client._ctx.pool.get(f"pulsar://127.0.0.1:{port}")
        frames = FrameDecoder().feed(await asyncio.wait_for(received, 5))
        connect = frames[0].command
        assert isinstance(connect, Connect)
        assert connect.auth_method_name == "token"
        assert connect.auth_data == b"first-token"
        await client.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_key_routing_matches_the_official_wheel(
    standalone: StandaloneProcess, topic: str
) -> None:
    """Same keys through both clients' default routers land on the same partitions."""
    await asyncio.to_thread(create_partitioned, standalone, topic, 5)
    keys = [f"user-{i}" for i in range(40)] + ["é", "a" * 33, "order:42"]

    def official() -> dict[str, int]:
        client = pulsar.Client(standalone.url)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            return {k: producer.send(b"wheel", partition_key=k).partition() for k in keys}
        finally:
            client.close()

    wheel = await asyncio.to_thread(official)
    async with Client(standalone.url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        ours = {k: (await producer.send(b"ours", partition_key=k)).partition() for k in keys}
    assert len(set(wheel.values())) == 5
    assert ours == wheel
