"""Typed Pulsar commands: the only form of commands the rest of Magnetar sees.

Every command of the binary protocol has a frozen, slotted dataclass here, named after its
protobuf message without the ``Command`` prefix (``CommandFlow`` -> :class:`Flow`), with
fields named in snake_case after the protobuf fields (``messagePermits`` ->
``message_permits``). Construction is keyword-only. ``TYPE`` gives the ``BaseCommand.Type``.

Field rules (the same for every class, checked by the tests against the .proto):

* a ``required`` protobuf field is a dataclass field without default;
* an ``optional`` field with an explicit protobuf default has that default here (absent on
  the wire reads as the default; the encoder omits a value equal to the default);
* an ``optional`` field without explicit default is ``T | None = None`` (``None`` = absent);
* a ``repeated`` field is a tuple (``()`` = empty); ``KeyValue`` lists are tuples of
  ``(key, value)`` pairs, so ``dict(cmd.metadata)`` gives a mapping;
* ``MessageIdData`` is :class:`~magnetar.protocol.message_id.MessageId`, ``ServerError`` is
  :class:`magnetar.common.errors.ServerError`, other enums are the ``IntEnum`` classes of :mod:`.enums`.

One module per command family: :mod:`.connection`, :mod:`.lookup`, :mod:`.producer`,
:mod:`.consumer`, :mod:`.response` (SUCCESS, ERROR), :mod:`.schema`, :mod:`.topic_list`,
:mod:`.transaction`; the enums and the structures they share are in :mod:`.enums` and
:mod:`.structures`. Import them from here: ``from magnetar.protocol.command import Flow``.

Commands never hold protobuf objects: conversion happens in :mod:`magnetar.protocol.frame`
(decode) and :func:`magnetar.protocol.frame.encode` (encode).
"""

from __future__ import annotations

from magnetar.protocol.command.connection import (
    AuthChallenge,
    AuthResponse,
    Connect,
    Connected,
    Ping,
    Pong,
)
from magnetar.protocol.command.consumer import (
    Ack,
    AckResponse,
    ActiveConsumerChange,
    CloseConsumer,
    ConsumerStats,
    ConsumerStatsResponse,
    Flow,
    GetLastMessageId,
    GetLastMessageIdResponse,
    Message,
    ReachedEndOfTopic,
    RedeliverUnacknowledgedMessages,
    Seek,
    Subscribe,
    Unsubscribe,
)
from magnetar.protocol.command.enums import (
    PROTOCOL_VERSION,
    AckType,
    AuthMethod,
    CommandType,
    CompressionType,
    InitialPosition,
    KeySharedMode,
    LookupResult,
    MetadataResult,
    ProducerAccessMode,
    ResourceType,
    SchemaType,
    SubType,
    TopicsMode,
    TxnAction,
    ValidationError,
)
from magnetar.protocol.command.lookup import (
    LookupTopic,
    LookupTopicResponse,
    PartitionedTopicMetadata,
    PartitionedTopicMetadataResponse,
)
from magnetar.protocol.command.producer import (
    CloseProducer,
    Producer,
    ProducerSuccess,
    Send,
    SendError,
    SendReceipt,
)
from magnetar.protocol.command.response import (
    Error,
    Success,
    TopicMigrated,
)
from magnetar.protocol.command.schema import (
    GetOrCreateSchema,
    GetOrCreateSchemaResponse,
    GetSchema,
    GetSchemaResponse,
)
from magnetar.protocol.command.structures import (
    AuthData,
    EncryptionKeys,
    FeatureFlags,
    IntRange,
    KeyLongValue,
    KeySharedMeta,
    KeyValue,
    SchemaInfo,
    TxnSubscription,
)
from magnetar.protocol.command.topic_list import (
    GetTopicsOfNamespace,
    GetTopicsOfNamespaceResponse,
    WatchTopicList,
    WatchTopicListClose,
    WatchTopicListSuccess,
    WatchTopicUpdate,
)
from magnetar.protocol.command.transaction import (
    AddPartitionToTxn,
    AddPartitionToTxnResponse,
    AddSubscriptionToTxn,
    AddSubscriptionToTxnResponse,
    EndTxn,
    EndTxnOnPartition,
    EndTxnOnPartitionResponse,
    EndTxnOnSubscription,
    EndTxnOnSubscriptionResponse,
    EndTxnResponse,
    NewTxn,
    NewTxnResponse,
    TcClientConnectRequest,
    TcClientConnectResponse,
)

Command = (
    Connect
    | Connected
    | AuthChallenge
    | AuthResponse
    | Ping
    | Pong
    | PartitionedTopicMetadata
    | PartitionedTopicMetadataResponse
    | LookupTopic
    | LookupTopicResponse
    | Producer
    | ProducerSuccess
    | Send
    | SendReceipt
    | SendError
    | CloseProducer
    | Subscribe
    | Flow
    | Message
    | Ack
    | AckResponse
    | RedeliverUnacknowledgedMessages
    | Unsubscribe
    | Seek
    | CloseConsumer
    | ReachedEndOfTopic
    | ActiveConsumerChange
    | GetLastMessageId
    | GetLastMessageIdResponse
    | ConsumerStats
    | ConsumerStatsResponse
    | Success
    | Error
    | GetTopicsOfNamespace
    | GetTopicsOfNamespaceResponse
    | GetSchema
    | GetSchemaResponse
    | GetOrCreateSchema
    | GetOrCreateSchemaResponse
    | TopicMigrated
    | WatchTopicList
    | WatchTopicListSuccess
    | WatchTopicUpdate
    | WatchTopicListClose
    | TcClientConnectRequest
    | TcClientConnectResponse
    | NewTxn
    | NewTxnResponse
    | AddPartitionToTxn
    | AddPartitionToTxnResponse
    | AddSubscriptionToTxn
    | AddSubscriptionToTxnResponse
    | EndTxn
    | EndTxnResponse
    | EndTxnOnPartition
    | EndTxnOnPartitionResponse
    | EndTxnOnSubscription
    | EndTxnOnSubscriptionResponse
)
"""Any typed command."""

COMMAND_CLASSES: dict[CommandType, type[Command]] = {cls.TYPE: cls for cls in Command.__args__}
"""The typed class of every ``CommandType``."""


PAYLOAD_COMMANDS = frozenset({CommandType.SEND, CommandType.MESSAGE})
"""Commands whose frame carries entry bytes after the command."""

__all__ = [
    "COMMAND_CLASSES",
    "PAYLOAD_COMMANDS",
    "PROTOCOL_VERSION",
    "Ack",
    "AckResponse",
    "AckType",
    "ActiveConsumerChange",
    "AddPartitionToTxn",
    "AddPartitionToTxnResponse",
    "AddSubscriptionToTxn",
    "AddSubscriptionToTxnResponse",
    "AuthChallenge",
    "AuthData",
    "AuthMethod",
    "AuthResponse",
    "CloseConsumer",
    "CloseProducer",
    "Command",
    "CommandType",
    "CompressionType",
    "Connect",
    "Connected",
    "ConsumerStats",
    "ConsumerStatsResponse",
    "EncryptionKeys",
    "EndTxn",
    "EndTxnOnPartition",
    "EndTxnOnPartitionResponse",
    "EndTxnOnSubscription",
    "EndTxnOnSubscriptionResponse",
    "EndTxnResponse",
    "Error",
    "FeatureFlags",
    "Flow",
    "GetLastMessageId",
    "GetLastMessageIdResponse",
    "GetOrCreateSchema",
    "GetOrCreateSchemaResponse",
    "GetSchema",
    "GetSchemaResponse",
    "GetTopicsOfNamespace",
    "GetTopicsOfNamespaceResponse",
    "InitialPosition",
    "IntRange",
    "KeyLongValue",
    "KeySharedMeta",
    "KeySharedMode",
    "KeyValue",
    "LookupResult",
    "LookupTopic",
    "LookupTopicResponse",
    "Message",
    "MetadataResult",
    "NewTxn",
    "NewTxnResponse",
    "PartitionedTopicMetadata",
    "PartitionedTopicMetadataResponse",
    "Ping",
    "Pong",
    "Producer",
    "ProducerAccessMode",
    "ProducerSuccess",
    "ReachedEndOfTopic",
    "RedeliverUnacknowledgedMessages",
    "ResourceType",
    "SchemaInfo",
    "SchemaType",
    "Seek",
    "Send",
    "SendError",
    "SendReceipt",
    "SubType",
    "Subscribe",
    "Success",
    "TcClientConnectRequest",
    "TcClientConnectResponse",
    "TopicMigrated",
    "TopicsMode",
    "TxnAction",
    "TxnSubscription",
    "Unsubscribe",
    "ValidationError",
    "WatchTopicList",
    "WatchTopicListClose",
    "WatchTopicListSuccess",
    "WatchTopicUpdate",
]
