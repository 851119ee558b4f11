"""Consumer commands: SUBSCRIBE, FLOW, MESSAGE, ACK, redelivery, seek, close, stats.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import (
    AckType,
    CommandType,
    InitialPosition,
    SubType,
    ValidationError,
)
from magnetar.protocol.command.structures import KeyLongValue, KeySharedMeta, KeyValue, SchemaInfo
from magnetar.protocol.message_id import MessageId


@frozen_struct
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


@frozen_struct
class Flow:
    """Adds ``message_permits`` permits (counted in messages, not entries). Hot path."""

    TYPE: ClassVar[CommandType] = CommandType.FLOW
    consumer_id: int
    message_permits: int


@frozen_struct
class Message:
    """MESSAGE's command part; the stored entry bytes travel beside it. Hot path: the
    broker builds MESSAGE frames with :func:`magnetar.protocol.hand_encoders.encode_message`."""

    TYPE: ClassVar[CommandType] = CommandType.MESSAGE
    consumer_id: int
    message_id: MessageId
    redelivery_count: int = 0
    ack_set: tuple[int, ...] = ()
    consumer_epoch: int | None = None


@frozen_struct
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


@frozen_struct
class AckResponse:
    TYPE: ClassVar[CommandType] = CommandType.ACK_RESPONSE
    consumer_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    error: ServerError | None = None
    message: str | None = None
    request_id: int | None = None


@frozen_struct
class RedeliverUnacknowledgedMessages:
    TYPE: ClassVar[CommandType] = CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES
    consumer_id: int
    message_ids: tuple[MessageId, ...] = ()
    consumer_epoch: int | None = None


@frozen_struct
class Unsubscribe:
    TYPE: ClassVar[CommandType] = CommandType.UNSUBSCRIBE
    consumer_id: int
    request_id: int


@frozen_struct
class Seek:
    """Either ``message_id`` or ``message_publish_time`` is set."""

    TYPE: ClassVar[CommandType] = CommandType.SEEK
    consumer_id: int
    request_id: int
    message_id: MessageId | None = None
    message_publish_time: int | None = None


@frozen_struct
class CloseConsumer:
    TYPE: ClassVar[CommandType] = CommandType.CLOSE_CONSUMER
    consumer_id: int
    request_id: int
    assigned_broker_service_url: str | None = None
    assigned_broker_service_url_tls: str | None = None


@frozen_struct
class ReachedEndOfTopic:
    """Never send it to C++ clients: they close the connection on it."""

    TYPE: ClassVar[CommandType] = CommandType.REACHED_END_OF_TOPIC
    consumer_id: int


@frozen_struct
class ActiveConsumerChange:
    TYPE: ClassVar[CommandType] = CommandType.ACTIVE_CONSUMER_CHANGE
    consumer_id: int
    is_active: bool = False


@frozen_struct
class GetLastMessageId:
    TYPE: ClassVar[CommandType] = CommandType.GET_LAST_MESSAGE_ID
    consumer_id: int
    request_id: int


@frozen_struct
class GetLastMessageIdResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_LAST_MESSAGE_ID_RESPONSE
    last_message_id: MessageId
    request_id: int
    consumer_mark_delete_position: MessageId | None = None


@frozen_struct
class ConsumerStats:
    TYPE: ClassVar[CommandType] = CommandType.CONSUMER_STATS
    request_id: int
    consumer_id: int


@frozen_struct
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
