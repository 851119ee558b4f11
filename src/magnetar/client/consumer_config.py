"""What a consumer is configured with: subscription type, queue size, acks, dead letters.

:class:`ConsumerConfig` is filled by ``Client.subscribe`` (and by readers, which consume
non-durably from a start id); :class:`~magnetar.client.consumer.Consumer` only reads it.
Names follow the official Python client's ``subscribe`` arguments.
:func:`subscribe_command` is what the configuration says on the wire.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.client.message_id import MessageId
from magnetar.client.schema import BytesSchema, Schema
from magnetar.protocol import (
    InitialPosition,
    KeySharedMeta,
    KeySharedMode,
    Subscribe,
    SubType,
)
from magnetar.protocol import MessageId as WireMessageId


class ConsumerType(enum.IntEnum):
    """Subscription types, with the official client's names."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    KeyShared = 3


class ConsumerEventListener(Protocol):
    def became_active(self, consumer: Any, partition: int) -> Any: ...

    def became_inactive(self, consumer: Any, partition: int) -> Any: ...


@dataclass(slots=True, kw_only=True)
class DeadLetterPolicy:
    """Messages redelivered ``max_redeliver_count`` times go to ``dead_letter_topic``
    (default ``<topic>-<subscription>-DLQ``) the next time they would be redelivered."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None
    retry_letter_topic: str | None = None
    """With ``retry_enable``: where
    :meth:`~magnetar.client.consumer.Consumer.reconsume_later` sends messages
    (default ``<topic>-<subscription>-RETRY``)."""


@dataclass(slots=True, kw_only=True)
class ConsumerConfig:
    consumer_type: ConsumerType = ConsumerType.Exclusive
    consumer_name: str | None = None
    schema: Schema[Any] = field(default_factory=BytesSchema)
    receiver_queue_size: int = 1000
    unacked_messages_timeout_ms: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    acknowledgment_group_time_ms: int = 100
    acknowledgment_group_max_size: int = 1000
    batch_index_ack_enabled: bool = False
    initial_position: InitialPosition = InitialPosition.Latest
    priority_level: int | None = None
    properties: Mapping[str, str] | None = None
    subscription_properties: Mapping[str, str] | None = None
    read_compacted: bool = False
    replicate_subscription_state_enabled: bool = False
    key_shared_mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    key_shared_allow_out_of_order: bool = False
    consumer_event_listener: ConsumerEventListener | None = None
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_enable: bool = False
    max_pending_chunked_message: int = 10
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    # Readers: non-durable subscription from a start id.
    durable: bool = True
    start_message_id: MessageId | None = None
    start_message_id_inclusive: bool = False


_SUB_TYPES = {
    ConsumerType.Exclusive: SubType.Exclusive,
    ConsumerType.Shared: SubType.Shared,
    ConsumerType.Failover: SubType.Failover,
    ConsumerType.KeyShared: SubType.Key_Shared,
}


def subscribe_command(
    conf: ConsumerConfig,
    *,
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    consumer_name: str,
    start_message_id: WireMessageId | None,
) -> Subscribe:
    """The SUBSCRIBE a consumer configured by ``conf`` sends (``start_message_id``: where a
    non-durable subscription starts, None for a durable one)."""
    key_shared = None
    if conf.consumer_type == ConsumerType.KeyShared:
        key_shared = KeySharedMeta(
            key_shared_mode=conf.key_shared_mode,
            allow_out_of_order_delivery=conf.key_shared_allow_out_of_order,
        )
    return Subscribe(
        topic=topic,
        subscription=subscription,
        sub_type=_SUB_TYPES[conf.consumer_type],
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=consumer_name,
        priority_level=conf.priority_level,
        durable=conf.durable,
        start_message_id=start_message_id,
        metadata=tuple((conf.properties or {}).items()),
        read_compacted=conf.read_compacted,
        schema=conf.schema.schema_info(),
        initial_position=conf.initial_position,
        replicate_subscription_state=conf.replicate_subscription_state_enabled,
        key_shared_meta=key_shared,
        subscription_properties=tuple((conf.subscription_properties or {}).items()),
    )
