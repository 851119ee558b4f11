"""A PRODUCER or SUBSCRIBE refused because the topic is not served here comes after a
CLOSE_PRODUCER / CLOSE_CONSUMER for its id, and the official client then finds the topic
again instead of waiting out its operation timeout.

The C++ client under the official Python wheel keeps a consumer attached to the connection
it sent SUBSCRIBE on; a retriable error to that first SUBSCRIBE schedules a reconnection
which the client skips because the consumer is still attached. Seen in a local cluster
restarted over its data: a bundle moved to a joining broker while a consumer subscribed,
and the subscribe timed out after 30 s.

One cluster broker in this process (:func:`.test_session_loss.cluster_broker`); the refusal
is the one a request waiting on a topic load gets when that load is interrupted.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pulsar

from magnetar.broker.service import BrokerService
from magnetar.client import Client, ConsumerType
from magnetar.common.errors import ServerError, ServiceNotReady
from magnetar.common.names import TopicName
from magnetar.protocol import CloseConsumer, CloseProducer, Error
from magnetar.testing import wait_until_async

from .test_service_connection import AsyncRawClient, producer_cmd
from .test_session_loss import cluster_broker, subscribe_cmd

OPERATION_TIMEOUT_S = 10
RECEIVER_QUEUE_SIZE = 100


class TopicLoad(asyncio.Future[object]):
    """A load of ``topic`` in progress on ``broker`` (another request is loading it): counts
    the requests waiting on it."""

    waiting = 0

    def __init__(self, broker: BrokerService, topic: str) -> None:
        super().__init__()
        self.broker, self.topic = broker, topic
        broker._topics[topic] = self  # type: ignore[assignment]

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        self.waiting += 1
        super().add_done_callback(fn, context=context)

    async def interrupt_once_both_wait(self) -> None:
        """Once the client's SUBSCRIBE and PRODUCER wait on the load, interrupt it (its
        connection went away): both are refused."""
        await wait_until_async(
            lambda: self.waiting == 2,
            timeout_s=OPERATION_TIMEOUT_S,
            what="the client's SUBSCRIBE and PRODUCER waiting on the load",
        )
        del self.broker._topics[self.topic]
        self.set_exception(ServiceNotReady(f"loading {self.topic} was interrupted"))


def closes(raw: AsyncRawClient, kind: type[CloseProducer] | type[CloseConsumer], id_: int) -> bool:
    """Whether a close of ``kind`` for ``id_`` is among the frames already received."""
    field = "producer_id" if kind is CloseProducer else "consumer_id"
    return any(isinstance(f.command, kind) and getattr(f.command, field) == id_ for f in raw.inbox)


async def test_a_refusal_after_the_session_is_lost_closes_the_producer_and_consumer_first(
    tmp_path: Path,
) -> None:
    async with cluster_broker(tmp_path) as (broker, store):
        topic = f"persistent://public/default/refused-{uuid.uuid4().hex[:8]}"
        raw = await AsyncRawClient.open(broker.port)
        await store.expire_session()  # type: ignore[attr-defined]

        producer_id = raw.next_id()
        refused = await raw.request(producer_cmd(raw, topic, producer_id))
        assert isinstance(refused, Error) and refused.error is ServerError.ServiceNotReady
        # it arrived before the error: it is in the inbox already
        assert closes(raw, CloseProducer, producer_id)

        sub = subscribe_cmd(raw, topic)
        refused = await raw.request(sub)
        assert isinstance(refused, Error) and refused.error is ServerError.ServiceNotReady
        assert closes(raw, CloseConsumer, sub.consumer_id)
        await raw.close()


async def test_the_official_client_subscribes_after_an_interrupted_topic_load(
    tmp_path: Path,
) -> None:
    async with cluster_broker(tmp_path) as (broker, _store):
        topic = f"persistent://public/default/interrupted-{uuid.uuid4().hex[:8]}"
        load = TopicLoad(broker, topic)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S)
        try:
            subscribing = asyncio.create_task(
                asyncio.to_thread(
                    client.subscribe, topic, "sub", consumer_type=pulsar.ConsumerType.Shared
                )
            )
            producing = asyncio.create_task(asyncio.to_thread(client.create_producer, topic))
            await load.interrupt_once_both_wait()
            consumer = await subscribing
            producer = await producing
            await asyncio.to_thread(producer.send, b"after the refusal")
            msg = await asyncio.to_thread(consumer.receive, OPERATION_TIMEOUT_S * 1000)
            assert msg.data() == b"after the refusal"
        finally:
            await asyncio.to_thread(client.close)


async def test_magnetar_client_subscribes_once_after_an_interrupted_topic_load(
    tmp_path: Path,
) -> None:
    async with cluster_broker(tmp_path) as (broker, _store):
        topic = f"persistent://public/default/interrupted-{uuid.uuid4().hex[:8]}"
        load = TopicLoad(broker, topic)
        async with Client(
            broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S
        ) as client:
            subscribing = asyncio.create_task(
                client.subscribe(
                    topic,
                    "sub",
                    consumer_type=ConsumerType.Shared,
                    receiver_queue_size=RECEIVER_QUEUE_SIZE,
                )
            )
            producing = asyncio.create_task(client.create_producer(topic))
            await load.interrupt_once_both_wait()
            consumer = await subscribing
            producer = await producing
            await producer.send(b"after the refusal")
            msg = await consumer.receive(OPERATION_TIMEOUT_S * 1000)
            assert msg.data() == b"after the refusal"
            # attached once: one consumer and one producer on the topic, not two each
            loaded = broker.loaded_topic(TopicName.parse(topic))
            assert loaded is not None
            assert len(loaded.producers) == 1
            (attached,) = loaded.subscriptions["sub"].consumers.values()
            # one SUBSCRIBE answered, one FLOW of the receiver queue: a second attach of the
            # same consumer would have sent another (and dropped what it had queued)
            assert attached.permits + 1 == RECEIVER_QUEUE_SIZE, attached.permits
