"""Interop with the official pulsar-client wheel (C++ 4.2): a tiny server built only from our
codec answers its handshake, a PING and a partition-metadata request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pulsar
import pytest

import magnetar.protocol as p

TOPIC = "persistent://public/default/t"
WAIT_S = 30.0


@dataclass
class TinyBroker:
    """Answers CONNECT, PING, PONG and PARTITIONED_METADATA; records what it received."""

    partitions: int = 3
    fail_metadata: bool = False
    received: list[p.Command] = field(default_factory=list)
    got_pong: asyncio.Event = field(default_factory=asyncio.Event)
    answered_request_ids: list[int] = field(default_factory=list)

    def reply(self, command: p.Command) -> list[bytes]:
        match command:
            case p.Connect():
                # Send a PING right after CONNECTED: the client must answer PONG.
                return [
                    p.encode(
                        p.Connected(
                            server_version="Magnetar-test",
                            protocol_version=p.PROTOCOL_VERSION,
                            max_message_size=p.DEFAULT_MAX_MESSAGE_SIZE_BYTES,
                        )
                    ),
                    p.encode(p.Ping()),
                ]
            case p.Ping():
                return [p.encode(p.Pong())]
            case p.Pong():
                self.got_pong.set()
                return []
            case p.PartitionedTopicMetadata(request_id=request_id):
                self.answered_request_ids.append(request_id)
                if self.fail_metadata:
                    response = p.PartitionedTopicMetadataResponse(
                        request_id=request_id,
                        response=p.MetadataResult.Failed,
                        error=p.ServerError.TopicNotFound,
                        message="no such topic",
                    )
                else:
                    response = p.PartitionedTopicMetadataResponse(
                        request_id=request_id,
                        response=p.MetadataResult.Success,
                        partitions=self.partitions,
                    )
                return [p.encode(response)]
            case _:
                return []


class _Connection(asyncio.Protocol):
    def __init__(self, broker: TinyBroker) -> None:
        self.broker = broker
        self.decoder = p.FrameDecoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            frames = self.decoder.feed(data)
        except p.ProtocolError:
            self.transport.close()
            raise
        for frame in frames:
            self.broker.received.append(frame.command)
            self.transport.writelines(self.broker.reply(frame.command))


@pytest.fixture
async def broker_and_port() -> AsyncIterator[tuple[TinyBroker, int]]:
    broker = TinyBroker()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(broker), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield broker, port
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT_S)


def _get_partitions(port: int) -> list[str]:
    client = pulsar.Client(
        f"pulsar://127.0.0.1:{port}",
        operation_timeout_seconds=15,
        connection_timeout_ms=5000,
        logger=logging.getLogger("pulsar"),
    )
    try:
        return list(client.get_topic_partitions(TOPIC))
    finally:
        client.close()


async def test_official_client_gets_partitions(broker_and_port: tuple[TinyBroker, int]) -> None:
    broker, port = broker_and_port
    partitions = await asyncio.wait_for(asyncio.to_thread(_get_partitions, port), WAIT_S)
    assert partitions == [f"{TOPIC}-partition-{i}" for i in range(3)]

    connect = broker.received[0]
    assert isinstance(connect, p.Connect)
    assert connect.client_version.startswith("Pulsar-CPP")
    assert connect.protocol_version == 20
    assert connect.feature_flags is not None
    assert connect.feature_flags.supports_broker_entry_metadata

    requests = [c for c in broker.received if isinstance(c, p.PartitionedTopicMetadata)]
    assert len(requests) == 1
    assert requests[0].topic == TOPIC
    # The client matched our response to its request by this id (it got the partitions).
    assert broker.answered_request_ids == [requests[0].request_id]

    # The client answered the PING we sent after CONNECTED.
    await asyncio.wait_for(broker.got_pong.wait(), WAIT_S)


async def test_official_client_sees_metadata_errors(
    broker_and_port: tuple[TinyBroker, int],
) -> None:
    broker, port = broker_and_port
    broker.fail_metadata = True
    with pytest.raises(pulsar.TopicNotFound):
        await asyncio.wait_for(asyncio.to_thread(_get_partitions, port), WAIT_S)
    assert any(isinstance(c, p.PartitionedTopicMetadata) for c in broker.received)
