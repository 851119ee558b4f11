"""The protocol version and the enums of the wire: ``BaseCommand.Type`` and the enums the
commands' fields use, values as on the wire.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

import enum

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
