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
  :class:`magnetar.common.errors.ServerError`, other enums are the ``IntEnum`` classes below.

Commands never hold protobuf objects: conversion happens in :mod:`magnetar.protocol.frame`
(decode) and :func:`magnetar.protocol.frame.encode` (encode).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.protocol.message_id import MessageId

PROTOCOL_VERSION = 20
"""The protocol version Magnetar speaks (the highest one pulsar-client 3.13 knows)."""


class CommandType(enum.IntEnum):
    """``BaseCommand.Type``; also the field number of the command's sub-message."""

    CONNECT = 2
    CONNECTED = 3
    SUBSCRIBE = 4
    PRODUCER = 5
    SEND = 6
    SEND_RECEIPT = 7
    SEND_ERROR = 8
    MESSAGE = 9
    ACK = 10
    FLOW = 11
    UNSUBSCRIBE = 12
    SUCCESS = 13
    ERROR = 14
    CLOSE_PRODUCER = 15
    CLOSE_CONSUMER = 16
    PRODUCER_SUCCESS = 17
    PING = 18
    PONG = 19
    REDELIVER_UNACKNOWLEDGED_MESSAGES = 20
    PARTITIONED_METADATA = 21
    PARTITIONED_METADATA_RESPONSE = 22
    LOOKUP = 23
    LOOKUP_RESPONSE = 24
    CONSUMER_STATS = 25
    CONSUMER_STATS_RESPONSE = 26
    REACHED_END_OF_TOPIC = 27
    SEEK = 28
    GET_LAST_MESSAGE_ID = 29
    GET_LAST_MESSAGE_ID_RESPONSE = 30
    ACTIVE_CONSUMER_CHANGE = 31
    GET_TOPICS_OF_NAMESPACE = 32
    GET_TOPICS_OF_NAMESPACE_RESPONSE = 33
    GET_SCHEMA = 34
    GET_SCHEMA_RESPONSE = 35
    AUTH_CHALLENGE = 36
    AUTH_RESPONSE = 37
    ACK_RESPONSE = 38
    GET_OR_CREATE_SCHEMA = 39
    GET_OR_CREATE_SCHEMA_RESPONSE = 40
    NEW_TXN = 50
    NEW_TXN_RESPONSE = 51
    ADD_PARTITION_TO_TXN = 52
    ADD_PARTITION_TO_TXN_RESPONSE = 53
    ADD_SUBSCRIPTION_TO_TXN = 54
    ADD_SUBSCRIPTION_TO_TXN_RESPONSE = 55
    END_TXN = 56
    END_TXN_RESPONSE = 57
    END_TXN_ON_PARTITION = 58
    END_TXN_ON_PARTITION_RESPONSE = 59
    END_TXN_ON_SUBSCRIPTION = 60
    END_TXN_ON_SUBSCRIPTION_RESPONSE = 61
    TC_CLIENT_CONNECT_REQUEST = 62
    TC_CLIENT_CONNECT_RESPONSE = 63
    WATCH_TOPIC_LIST = 64
    WATCH_TOPIC_LIST_SUCCESS = 65
    WATCH_TOPIC_UPDATE = 66
    WATCH_TOPIC_LIST_CLOSE = 67
    TOPIC_MIGRATED = 68


# ---------------------------------------------------------------- enums


class AuthMethod(enum.IntEnum):
    """Deprecated ``CommandConnect.auth_method``."""

    AuthMethodNone = 0
    AuthMethodYcaV1 = 1
    AuthMethodAthens = 2


class CompressionType(enum.IntEnum):
    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


class ProducerAccessMode(enum.IntEnum):
    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class KeySharedMode(enum.IntEnum):
    AUTO_SPLIT = 0
    STICKY = 1


class TxnAction(enum.IntEnum):
    COMMIT = 0
    ABORT = 1


class SchemaType(enum.IntEnum):
    """``Schema.Type``."""

    None_ = 0
    String = 1
    Json = 2
    Protobuf = 3
    Avro = 4
    Bool = 5
    Int8 = 6
    Int16 = 7
    Int32 = 8
    Int64 = 9
    Float = 10
    Double = 11
    Date = 12
    Time = 13
    Timestamp = 14
    KeyValue = 15
    Instant = 16
    LocalDate = 17
    LocalTime = 18
    LocalDateTime = 19
    ProtobufNative = 20
    AutoConsume = 21


class SubType(enum.IntEnum):
    """``CommandSubscribe.SubType``."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class InitialPosition(enum.IntEnum):
    """``CommandSubscribe.InitialPosition``."""

    Latest = 0
    Earliest = 1


class AckType(enum.IntEnum):
    """``CommandAck.AckType``."""

    Individual = 0
    Cumulative = 1


class ValidationError(enum.IntEnum):
    """``CommandAck.ValidationError``: why a consumer discarded a message."""

    UncompressedSizeCorruption = 0
    DecompressionError = 1
    ChecksumMismatch = 2
    BatchDeSerializeError = 3
    DecryptionError = 4


class MetadataResult(enum.IntEnum):
    """``CommandPartitionedTopicMetadataResponse.LookupType``."""

    Success = 0
    Failed = 1


class LookupResult(enum.IntEnum):
    """``CommandLookupTopicResponse.LookupType``."""

    Redirect = 0
    Connect = 1
    Failed = 2


class TopicsMode(enum.IntEnum):
    """``CommandGetTopicsOfNamespace.Mode``."""

    PERSISTENT = 0
    NON_PERSISTENT = 1
    ALL = 2


class ResourceType(enum.IntEnum):
    """``CommandTopicMigrated.ResourceType``."""

    Producer = 0
    Consumer = 1


# ---------------------------------------------------------------- shared structures

KeyValue = tuple[str, str]
"""A ``KeyValue`` pair."""

KeyLongValue = tuple[str, int]
"""A ``KeyLongValue`` pair."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IntRange:
    """Hash range, both ends inclusive (hash space 0..65535)."""

    start: int
    end: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaInfo:
    """``Schema``."""

    name: str
    schema_data: bytes
    type: SchemaType
    properties: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class EncryptionKeys:
    key: str
    value: bytes
    metadata: tuple[KeyValue, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureFlags:
    supports_auth_refresh: bool = False
    supports_broker_entry_metadata: bool = False
    supports_partial_producer: bool = False
    supports_topic_watchers: bool = False
    supports_get_partitioned_metadata_without_auto_creation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthData:
    auth_method_name: str | None = None
    auth_data: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class KeySharedMeta:
    key_shared_mode: KeySharedMode
    hash_ranges: tuple[IntRange, ...] = ()
    allow_out_of_order_delivery: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnSubscription:
    """``Subscription`` as used by the transaction commands."""

    topic: str
    subscription: str


# ---------------------------------------------------------------- connection


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    TYPE: ClassVar[CommandType] = CommandType.CONNECT
    client_version: str
    auth_method: AuthMethod | None = None
    auth_data: bytes | None = None
    protocol_version: int = 0
    auth_method_name: str | None = None
    proxy_to_broker_url: str | None = None
    original_principal: str | None = None
    original_auth_data: str | None = None
    original_auth_method: str | None = None
    feature_flags: FeatureFlags | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Connected:
    TYPE: ClassVar[CommandType] = CommandType.CONNECTED
    server_version: str
    protocol_version: int = 0
    max_message_size: int | None = None
    feature_flags: FeatureFlags | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthChallenge:
    TYPE: ClassVar[CommandType] = CommandType.AUTH_CHALLENGE
    server_version: str | None = None
    challenge: AuthData | None = None
    protocol_version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthResponse:
    TYPE: ClassVar[CommandType] = CommandType.AUTH_RESPONSE
    client_version: str | None = None
    response: AuthData | None = None
    protocol_version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping:
    TYPE: ClassVar[CommandType] = CommandType.PING


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong:
    TYPE: ClassVar[CommandType] = CommandType.PONG


# ---------------------------------------------------------------- lookup


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionedTopicMetadata:
    TYPE: ClassVar[CommandType] = CommandType.PARTITIONED_METADATA
    topic: str
    request_id: int
    original_principal: str | None = None
    original_auth_data: str | None = None
    original_auth_method: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionedTopicMetadataResponse:
    """Always set ``response``: the C++ client treats a missing one as a failure."""

    TYPE: ClassVar[CommandType] = CommandType.PARTITIONED_METADATA_RESPONSE
    request_id: int
    partitions: int | None = None
    response: MetadataResult | None = None
    error: ServerError | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupTopic:
    TYPE: ClassVar[CommandType] = CommandType.LOOKUP
    topic: str
    request_id: int
    authoritative: bool = False
    original_principal: str | None = None
    original_auth_data: str | None = None
    original_auth_method: str | None = None
    advertised_listener_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LookupTopicResponse:
    """Always set ``response``: the C++ client treats a missing one as ConnectError."""

    TYPE: ClassVar[CommandType] = CommandType.LOOKUP_RESPONSE
    request_id: int
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
    response: LookupResult | None = None
    authoritative: bool = False
    error: ServerError | None = None
    message: str | None = None
    proxy_through_service_url: bool = False


# ---------------------------------------------------------------- producer


@dataclass(frozen=True, slots=True, kw_only=True)
class Producer:
    TYPE: ClassVar[CommandType] = CommandType.PRODUCER
    topic: str
    producer_id: int
    request_id: int
    producer_name: str | None = None
    encrypted: bool = False
    metadata: tuple[KeyValue, ...] = ()
    schema: SchemaInfo | None = None
    epoch: int = 0
    user_provided_producer_name: bool = True
    producer_access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    topic_epoch: int | None = None
    txn_enabled: bool = False
    initial_subscription_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerSuccess:
    TYPE: ClassVar[CommandType] = CommandType.PRODUCER_SUCCESS
    request_id: int
    producer_name: str
    last_sequence_id: int = -1
    schema_version: bytes | None = None
    topic_epoch: int | None = None
    producer_ready: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """SEND's command part; the entry bytes travel beside it in the frame (hot path)."""

    TYPE: ClassVar[CommandType] = CommandType.SEND
    producer_id: int
    sequence_id: int
    num_messages: int = 1
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    highest_sequence_id: int = 0
    is_chunk: bool = False
    marker: bool = False
    message_id: MessageId | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SendReceipt:
    TYPE: ClassVar[CommandType] = CommandType.SEND_RECEIPT
    producer_id: int
    sequence_id: int
    message_id: MessageId | None = None
    highest_sequence_id: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SendError:
    TYPE: ClassVar[CommandType] = CommandType.SEND_ERROR
    producer_id: int
    sequence_id: int
    error: ServerError
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseProducer:
    TYPE: ClassVar[CommandType] = CommandType.CLOSE_PRODUCER
    producer_id: int
    request_id: int
    assigned_broker_service_url: str | None = None
    assigned_broker_service_url_tls: str | None = None


# ---------------------------------------------------------------- consumer


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    TYPE: ClassVar[CommandType] = CommandType.SUBSCRIBE
    topic: str
    subscription: str
    sub_type: SubType
    consumer_id: int
    request_id: int
    consumer_name: str | None = None
    priority_level: int | None = None
    durable: bool = True
    start_message_id: MessageId | None = None
    metadata: tuple[KeyValue, ...] = ()
    read_compacted: bool | None = None
    schema: SchemaInfo | None = None
    initial_position: InitialPosition = InitialPosition.Latest
    replicate_subscription_state: bool | None = None
    force_topic_creation: bool = True
    start_message_rollback_duration_sec: int = 0
    key_shared_meta: KeySharedMeta | None = None
    subscription_properties: tuple[KeyValue, ...] = ()
    consumer_epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Flow:
    """Adds ``message_permits`` permits (counted in messages, not entries). Hot path."""

    TYPE: ClassVar[CommandType] = CommandType.FLOW
    consumer_id: int
    message_permits: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """MESSAGE's command part; the stored entry bytes travel beside it. Hot path: the
    broker builds MESSAGE frames with :func:`magnetar.protocol.frame.encode_message`."""

    TYPE: ClassVar[CommandType] = CommandType.MESSAGE
    consumer_id: int
    message_id: MessageId
    redelivery_count: int = 0
    ack_set: tuple[int, ...] = ()
    consumer_epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """Hot path. ``message_id`` holds every acknowledged id (several for list acks)."""

    TYPE: ClassVar[CommandType] = CommandType.ACK
    consumer_id: int
    ack_type: AckType
    message_id: tuple[MessageId, ...] = ()
    validation_error: ValidationError | None = None
    properties: tuple[KeyLongValue, ...] = ()
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    request_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AckResponse:
    TYPE: ClassVar[CommandType] = CommandType.ACK_RESPONSE
    consumer_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    error: ServerError | None = None
    message: str | None = None
    request_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RedeliverUnacknowledgedMessages:
    TYPE: ClassVar[CommandType] = CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES
    consumer_id: int
    message_ids: tuple[MessageId, ...] = ()
    consumer_epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsubscribe:
    TYPE: ClassVar[CommandType] = CommandType.UNSUBSCRIBE
    consumer_id: int
    request_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Seek:
    """Either ``message_id`` or ``message_publish_time`` is set."""

    TYPE: ClassVar[CommandType] = CommandType.SEEK
    consumer_id: int
    request_id: int
    message_id: MessageId | None = None
    message_publish_time: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseConsumer:
    TYPE: ClassVar[CommandType] = CommandType.CLOSE_CONSUMER
    consumer_id: int
    request_id: int
    assigned_broker_service_url: str | None = None
    assigned_broker_service_url_tls: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReachedEndOfTopic:
    """Never send it to C++ clients: they close the connection on it."""

    TYPE: ClassVar[CommandType] = CommandType.REACHED_END_OF_TOPIC
    consumer_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ActiveConsumerChange:
    TYPE: ClassVar[CommandType] = CommandType.ACTIVE_CONSUMER_CHANGE
    consumer_id: int
    is_active: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class GetLastMessageId:
    TYPE: ClassVar[CommandType] = CommandType.GET_LAST_MESSAGE_ID
    consumer_id: int
    request_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GetLastMessageIdResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_LAST_MESSAGE_ID_RESPONSE
    last_message_id: MessageId
    request_id: int
    consumer_mark_delete_position: MessageId | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerStats:
    TYPE: ClassVar[CommandType] = CommandType.CONSUMER_STATS
    request_id: int
    consumer_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerStatsResponse:
    TYPE: ClassVar[CommandType] = CommandType.CONSUMER_STATS_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    msg_rate_out: float | None = None
    msg_throughput_out: float | None = None
    msg_rate_redeliver: float | None = None
    consumer_name: str | None = None
    available_permits: int | None = None
    unacked_messages: int | None = None
    blocked_consumer_on_unacked_msgs: bool | None = None
    address: str | None = None
    connected_since: str | None = None
    type: str | None = None
    msg_rate_expired: float | None = None
    msg_backlog: int | None = None
    message_ack_rate: float | None = None


# ---------------------------------------------------------------- generic responses, misc


@dataclass(frozen=True, slots=True, kw_only=True)
class Success:
    TYPE: ClassVar[CommandType] = CommandType.SUCCESS
    request_id: int
    schema: SchemaInfo | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """``CommandError``: a request failed (see :func:`magnetar.common.errors.error_for_code`)."""

    TYPE: ClassVar[CommandType] = CommandType.ERROR
    request_id: int
    error: ServerError
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GetTopicsOfNamespace:
    TYPE: ClassVar[CommandType] = CommandType.GET_TOPICS_OF_NAMESPACE
    request_id: int
    namespace: str
    mode: TopicsMode = TopicsMode.PERSISTENT
    topics_pattern: str | None = None
    topics_hash: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GetTopicsOfNamespaceResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE
    request_id: int
    topics: tuple[str, ...] = ()
    filtered: bool = False
    topics_hash: str | None = None
    changed: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSchema:
    TYPE: ClassVar[CommandType] = CommandType.GET_SCHEMA
    request_id: int
    topic: str
    schema_version: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSchemaResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_SCHEMA_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    schema: SchemaInfo | None = None
    schema_version: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GetOrCreateSchema:
    TYPE: ClassVar[CommandType] = CommandType.GET_OR_CREATE_SCHEMA
    request_id: int
    topic: str
    schema: SchemaInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class GetOrCreateSchemaResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_OR_CREATE_SCHEMA_RESPONSE
    request_id: int
    error_code: ServerError | None = None
    error_message: str | None = None
    schema_version: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMigrated:
    TYPE: ClassVar[CommandType] = CommandType.TOPIC_MIGRATED
    resource_id: int
    resource_type: ResourceType
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None


# ---------------------------------------------------------------- topic watchers


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchTopicList:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_LIST
    request_id: int
    watcher_id: int
    namespace: str
    topics_pattern: str
    topics_hash: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchTopicListSuccess:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_LIST_SUCCESS
    request_id: int
    watcher_id: int
    topics_hash: str
    topic: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchTopicUpdate:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_UPDATE
    watcher_id: int
    topics_hash: str
    new_topics: tuple[str, ...] = ()
    deleted_topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchTopicListClose:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_LIST_CLOSE
    request_id: int
    watcher_id: int


# ---------------------------------------------------------------- transactions


@dataclass(frozen=True, slots=True, kw_only=True)
class TcClientConnectRequest:
    TYPE: ClassVar[CommandType] = CommandType.TC_CLIENT_CONNECT_REQUEST
    request_id: int
    tc_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TcClientConnectResponse:
    TYPE: ClassVar[CommandType] = CommandType.TC_CLIENT_CONNECT_RESPONSE
    request_id: int
    error: ServerError | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTxn:
    TYPE: ClassVar[CommandType] = CommandType.NEW_TXN
    request_id: int
    txn_ttl_seconds: int = 0
    tc_id: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _TxnResponse:
    """Fields shared by every transaction response."""

    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    error: ServerError | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.NEW_TXN_RESPONSE


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionToTxn:
    TYPE: ClassVar[CommandType] = CommandType.ADD_PARTITION_TO_TXN
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionToTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.ADD_PARTITION_TO_TXN_RESPONSE


@dataclass(frozen=True, slots=True, kw_only=True)
class AddSubscriptionToTxn:
    TYPE: ClassVar[CommandType] = CommandType.ADD_SUBSCRIPTION_TO_TXN
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    subscription: tuple[TxnSubscription, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AddSubscriptionToTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.ADD_SUBSCRIPTION_TO_TXN_RESPONSE


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxn:
    TYPE: ClassVar[CommandType] = CommandType.END_TXN
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    txn_action: TxnAction | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_RESPONSE


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnOnPartition:
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_PARTITION
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    topic: str | None = None
    txn_action: TxnAction | None = None
    txnid_least_bits_of_low_watermark: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnOnPartitionResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_PARTITION_RESPONSE


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnOnSubscription:
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_SUBSCRIPTION
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    subscription: TxnSubscription | None = None
    txn_action: TxnAction | None = None
    txnid_least_bits_of_low_watermark: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnOnSubscriptionResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_SUBSCRIPTION_RESPONSE


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
