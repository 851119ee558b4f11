"""Magnetar's asyncio Pulsar client (pure Python), sharing :mod:`magnetar.protocol` with
the broker. See ``docs/client.md``.

::

    from magnetar.client import Client, ConsumerType, MessageId

    async with Client("pulsar://127.0.0.1:6650") as client:
        producer = await client.create_producer("my-topic")
        await producer.send(b"hello", properties={"k": "v"}, partition_key="key")
        consumer = await client.subscribe("my-topic", "sub", consumer_type=ConsumerType.Failover,
                                          consumer_event_listener=listener)
        msg = await consumer.receive(timeout_ms=1000)
        await consumer.acknowledge(msg)
        reader = await client.create_reader("my-topic", MessageId.earliest)
        msg = await reader.read_next()

:mod:`magnetar.client.sync` offers the same API blocking, for scripts.
"""

from magnetar.client.auth import Authentication, AuthenticationBasic, AuthenticationToken
from magnetar.client.client import Client, full_topic_name
from magnetar.client.consumer import Consumer
from magnetar.client.consumer_config import (
    ConsumerEventListener,
    ConsumerType,
    DeadLetterPolicy,
)
from magnetar.client.errors import (
    AlreadyClosed,
    ClientError,
    ConnectError,
    CumulativeAcknowledgementNotAllowed,
    InvalidConfiguration,
    MessageTooBig,
    ProducerQueueIsFull,
    SchemaSerializationError,
    Timeout,
    TlsHandshakeError,
)
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer
from magnetar.client.partitioned_producer import PartitionedProducer
from magnetar.client.producer import Producer, SendOptions
from magnetar.client.reader import Reader
from magnetar.client.routing import HashingScheme, PartitionsRoutingMode
from magnetar.client.schema import AvroSchema, BytesSchema, JsonSchema, Schema, StringSchema
from magnetar.client.topic_schema import AutoConsumeSchema, AutoProduceBytesSchema
from magnetar.protocol import (
    CompressionType,
    InitialPosition,
    KeySharedMode,
    ProducerAccessMode,
    TopicsMode,
)

__all__ = [
    "AlreadyClosed",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationToken",
    "AutoConsumeSchema",
    "AutoProduceBytesSchema",
    "AvroSchema",
    "BytesSchema",
    "Client",
    "ClientError",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerEventListener",
    "ConsumerType",
    "CumulativeAcknowledgementNotAllowed",
    "DeadLetterPolicy",
    "HashingScheme",
    "InitialPosition",
    "InvalidConfiguration",
    "JsonSchema",
    "KeySharedMode",
    "Message",
    "MessageId",
    "MessageTooBig",
    "MultiTopicsConsumer",
    "PartitionedProducer",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerQueueIsFull",
    "Reader",
    "Schema",
    "SchemaSerializationError",
    "SendOptions",
    "StringSchema",
    "Timeout",
    "TlsHandshakeError",
    "TopicsMode",
    "full_topic_name",
]
