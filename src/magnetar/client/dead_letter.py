"""A consumer's dead-letter and retry-letter topics (Pulsar's ``DeadLetterPolicy``).

A message redelivered ``max_redeliver_count`` times is, the next time it is due for
redelivery, published to the dead-letter topic (default ``<topic>-<subscription>-DLQ``) with
``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` properties, then acknowledged on its own topic.
:meth:`DeadLetters.reconsume_later` re-publishes a message to the retry-letter topic with
a delivery delay (Java's ``reconsumeLater``), or to the dead-letter topic once it was
retried too often. The producers are made on first use, one per letter topic, and closed
with the consumer.

The consumer owns the candidates: it records the messages of an entry received with
``redelivery_count >= max_redeliver_count`` in the ``candidates`` mapping shared with this
object (keyed by ``(ledger_id, entry_id)``) and drops them when they are acknowledged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from magnetar.client.ack_grouping import AckGroupingTracker
from magnetar.client.consumer_config import DeadLetterPolicy
from magnetar.client.context import ClientContext
from magnetar.client.errors import InvalidConfiguration
from magnetar.client.message import Message
from magnetar.common.errors import MagnetarError
from magnetar.common.names import partitioned_topic_name

if TYPE_CHECKING:
    from magnetar.client.producer import Producer


class DeadLetters:
    """The letter topics of one consumer of ``topic`` (partition ``partition``, -1 when the
    topic is not partitioned) on ``subscription``."""

    def __init__(
        self,
        ctx: ClientContext,
        *,
        topic: str,
        subscription: str,
        partition: int,
        policy: DeadLetterPolicy | None,
        candidates: dict[tuple[int, int], list[Message]],
        acks: AckGroupingTracker,
        flush_acks: Callable[[], None],
    ) -> None:
        self._ctx = ctx
        self._topic = topic
        self._subscription = subscription
        self._partition = partition
        self._policy = policy
        self.candidates = candidates
        self._acks = acks
        self._flush_acks = flush_acks
        self._producers: dict[str, Producer] = {}

    def dead_letter_topic(self) -> str:
        assert self._policy is not None
        base = partitioned_topic_name(self._topic) if self._partition >= 0 else self._topic
        return self._policy.dead_letter_topic or f"{base}-{self._subscription}-DLQ"

    async def _producer(self, topic: str) -> Producer:
        producer = self._producers.get(topic)
        if producer is None:
            from magnetar.client.producer import Producer, ProducerConfig

            policy = self._policy
            producer = Producer(
                self._ctx,
                topic,
                -1,
                ProducerConfig(
                    batching_enabled=False,
                    initial_subscription_name=policy.initial_subscription_name
                    if policy is not None
                    else None,
                ),
            )
            await producer._start()
            self._producers[topic] = producer
        return producer

    async def send(self, positions: list[tuple[int, int]]) -> None:
        """Publish the candidates at ``positions`` to the dead-letter topic, then acknowledge
        them. Raises the producer's errors (the messages stay unacknowledged)."""
        producer = await self._producer(self.dead_letter_topic())
        for p in positions:
            messages = self.candidates.pop(p, [])
            for m in messages:
                props = m.properties()
                props.setdefault("REAL_TOPIC", self._topic)
                props.setdefault("ORIGIN_MESSAGE_ID", str(m.message_id()))
                await producer.send(
                    m.data(), properties=props, partition_key=m.partition_key() or None
                )
            self._acks.add_individual(p[0], p[1])
        self._flush_acks()

    async def reconsume_later(
        self,
        message: Message,
        delay_ms: int,
        properties: Mapping[str, str] | None,
        *,
        retry_enable: bool,
    ) -> None:
        """Publish ``message`` to the retry-letter topic, delivered after ``delay_ms``, or to
        the dead-letter topic once ``RECONSUMETIMES`` exceeds ``max_redeliver_count``. The
        caller acknowledges it afterwards. Raises InvalidConfiguration without
        ``retry_enable`` and a retry-letter topic."""
        policy = self._policy
        if not retry_enable or policy is None or policy.retry_letter_topic is None:
            raise InvalidConfiguration("reconsume_later needs subscribe(..., retry_enable=True)")
        props = message.properties()
        if properties:
            props.update(properties)
        times = int(props.get("RECONSUMETIMES", "0")) + 1
        props["RECONSUMETIMES"] = str(times)
        props["DELAY_TIME"] = str(delay_ms)
        props.setdefault("REAL_TOPIC", message.topic_name())
        props.setdefault("ORIGIN_MESSAGE_ID", str(message.message_id()))
        key = message.partition_key() if message.has_partition_key() else None
        if times > policy.max_redeliver_count:
            producer = await self._producer(self.dead_letter_topic())
            await producer.send(message.data(), properties=props, partition_key=key)
        else:
            producer = await self._producer(policy.retry_letter_topic)
            await producer.send(
                message.data(), properties=props, partition_key=key, deliver_after_ms=delay_ms
            )

    async def close(self) -> None:
        """Close the letter producers (their errors are ignored: the consumer is closing)."""
        for producer in self._producers.values():
            with contextlib.suppress(MagnetarError):
                await producer.close()
