"""Producer commands: registration, SEND and its receipt or error, close.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import CommandType, ProducerAccessMode
from magnetar.protocol.command.structures import KeyValue, SchemaInfo
from magnetar.protocol.message_id import MessageId


@frozen_struct
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


@frozen_struct
class ProducerSuccess:
    TYPE: ClassVar[CommandType] = CommandType.PRODUCER_SUCCESS
    request_id: int
    producer_name: str
    last_sequence_id: int = -1
    schema_version: bytes | None = None
    topic_epoch: int | None = None
    producer_ready: bool = True


@frozen_struct
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


@frozen_struct
class SendReceipt:
    TYPE: ClassVar[CommandType] = CommandType.SEND_RECEIPT
    producer_id: int
    sequence_id: int
    message_id: MessageId | None = None
    highest_sequence_id: int = 0


@frozen_struct
class SendError:
    TYPE: ClassVar[CommandType] = CommandType.SEND_ERROR
    producer_id: int
    sequence_id: int
    error: ServerError
    message: str


@frozen_struct
class CloseProducer:
    TYPE: ClassVar[CommandType] = CommandType.CLOSE_PRODUCER
    producer_id: int
    request_id: int
    assigned_broker_service_url: str | None = None
    assigned_broker_service_url_tls: str | None = None
