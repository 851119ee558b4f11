"""Reconnecting through a failover: the errors a broker answers while it recovers are retried.

A broker that lost its metadata session, or whose storage is failing over, answers
SUBSCRIBE / PRODUCER with MetadataError, PersistenceError or ServiceNotReady; right after a
failover it may still hold the previous registration (ConsumerBusy, ProducerBusy), throttle
(TooManyRequests) or fail in a way it cannot name (UnknownError). Pulsar's Java client keeps
reconnecting an established consumer or producer through all of these; so must ours (they
used to stop with "fatal error on reconnect"). A deleted topic (TopicNotFound) ends them. The peer here is a small broker over a real socket that speaks our protocol
codec: it accepts the first registration, closes the consumer / producer (as a broker does
when a topic moves), answers the next registrations with the error, then accepts again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from magnetar.client import Client
from magnetar.client.errors import LookupError_, Timeout, TlsHandshakeError
from magnetar.client.reconnect import ends_reconnecting
from magnetar.common.errors import (
    InvalidTopicName,
    ListenerNotFound,
    ProducerFenced,
    ServerError,
    TopicNotFound,
    TopicTerminated,
    error_for_code,
)
from magnetar.protocol import (
    PROTOCOL_VERSION,
    CloseConsumer,
    CloseProducer,
    Command,
    Connect,
    Connected,
    Error,
    FrameDecoder,
    LookupResult,
    LookupTopic,
    LookupTopicResponse,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
    Ping,
    Pong,
    Producer,
    ProducerSuccess,
    Subscribe,
    Success,
    encode,
)
from magnetar.testing import wait_until_async

FAILURES = 2


class RecoveringBroker:
    """Accepts the first SUBSCRIBE / PRODUCER, then (once told to close the handles) answers
    ``FAILURES`` registrations with ``error`` before accepting again."""

    def __init__(self, error: ServerError) -> None:
        self.error = error
        self.url = ""
        self.registrations = 0
        self.refused = 0
        self.failing = False
        self.accepted_after_failures = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task[None]] = []
        self._handles: list[tuple[str, int]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        decoder = FrameDecoder()
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    reply = self._answer(frame.command)
                    if reply is not None:
                        writer.write(encode(reply))

    def _answer(self, cmd: Command) -> Command | None:
        match cmd:
            case Connect():
                return Connected(server_version="fake", protocol_version=PROTOCOL_VERSION)
            case Ping():
                return Pong()
            case PartitionedTopicMetadata(request_id=rid):
                return PartitionedTopicMetadataResponse(request_id=rid, partitions=0)
            case LookupTopic(request_id=rid):
                return LookupTopicResponse(
                    request_id=rid, broker_service_url=self.url, response=LookupResult.Connect
                )
            case Subscribe(request_id=rid, consumer_id=cid):
                return self._register(rid, ("consumer", cid), Success(request_id=rid))
            case Producer(request_id=rid, producer_id=pid):
                return self._register(
                    rid,
                    ("producer", pid),
                    ProducerSuccess(request_id=rid, producer_name="p", last_sequence_id=-1),
                )
            case CloseConsumer(request_id=rid) | CloseProducer(request_id=rid):
                return Success(request_id=rid)
        return None

    def _register(self, rid: int, handle: tuple[str, int], ok: Command) -> Command:
        self.registrations += 1
        if self.failing and self.refused < FAILURES:
            self.refused += 1
            return Error(request_id=rid, error=self.error, message="session 0x1 is lost")
        if self.failing:
            self.accepted_after_failures.set()
        self._handles.append(handle)
        return ok

    def fail_over(self) -> None:
        """Close every registered handle (the client reconnects) and refuse the next ones."""
        self.failing = True
        for writer in self._writers:
            for kind, handle_id in self._handles:
                close = (
                    CloseConsumer(consumer_id=handle_id, request_id=0)
                    if kind == "consumer"
                    else CloseProducer(producer_id=handle_id, request_id=0)
                )
                writer.write(encode(close))
        self._handles.clear()


@contextlib.asynccontextmanager
async def recovering_broker(error: ServerError) -> AsyncIterator[RecoveringBroker]:
    broker = RecoveringBroker(error)
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    broker.url = f"pulsar://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield broker
    finally:
        for writer in broker._writers:
            writer.close()
        await asyncio.gather(*broker.tasks, return_exceptions=True)
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "error",
    [
        ServerError.MetadataError,
        ServerError.PersistenceError,
        ServerError.ServiceNotReady,
        ServerError.TooManyRequests,
        ServerError.ConsumerBusy,
        ServerError.ProducerBusy,
        ServerError.UnknownError,
        ServerError.AuthorizationError,
    ],
)
@pytest.mark.parametrize("handle", ["consumer", "producer"])
async def test_reconnect_retries_the_errors_of_a_recovering_broker(
    error: ServerError, handle: str
) -> None:
    async with recovering_broker(error) as broker:
        client = Client(broker.url, operation_timeout_seconds=10)
        try:
            is_connected: Callable[[], bool]
            if handle == "consumer":
                is_connected = (await client.subscribe("t", "s")).is_connected
            else:
                is_connected = (await client.create_producer("t")).is_connected
            broker.fail_over()
            await asyncio.wait_for(broker.accepted_after_failures.wait(), 10)
            assert broker.refused == FAILURES
            await wait_until_async(is_connected, 10, what=f"the {handle} reconnected")
        finally:
            await client.close()


@pytest.mark.parametrize("handle", ["consumer", "producer"])
async def test_a_deleted_topic_ends_reconnecting(handle: str) -> None:
    async with recovering_broker(ServerError.TopicNotFound) as broker:
        client = Client(broker.url, operation_timeout_seconds=10)
        try:
            if handle == "consumer":
                consumer = await client.subscribe("t", "s")
                broker.fail_over()
                with pytest.raises(TopicNotFound):
                    await asyncio.wait_for(consumer.receive(), 10)
            else:
                producer = await client.create_producer("t")
                broker.fail_over()
                await wait_until_async(lambda: broker.refused == 1, 10, what="one refusal")
                with pytest.raises(TopicNotFound):
                    await asyncio.wait_for(producer.send(b"x"), 10)
            assert broker.refused == 1  # no retry after the answer that ends it
        finally:
            await client.close()


def test_the_errors_that_end_reconnecting() -> None:
    """The rule alone: what ends an established handler, and what is retried."""
    for final in (TopicNotFound, TopicTerminated, ProducerFenced, ListenerNotFound):
        assert ends_reconnecting(final("x"))
    assert ends_reconnecting(TlsHandshakeError("bad certificate"))
    for code in ServerError:
        error = error_for_code(code, "session 0x1 is lost")
        if not isinstance(
            error, TopicNotFound | TopicTerminated | ProducerFenced | InvalidTopicName
        ):
            assert not ends_reconnecting(error), code
    assert not ends_reconnecting(LookupError_("redirected more than 20 times"))
    assert not ends_reconnecting(Timeout("lookup did not succeed within 30 s"))
